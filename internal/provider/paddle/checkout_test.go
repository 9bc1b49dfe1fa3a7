package paddle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/paddle"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
)

func TestCheckoutTransaction(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	d := paddle.New(provider.Options{APIKey: "pdl_test", APIURL: fake.URL,
		Retry: provider.Retry{Budget: 2 * time.Second, BaseDelay: 10 * time.Millisecond}})
	sess, err := d.OpenCheckout(context.Background(), providertest.CheckoutRequest(9, ""))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sess.ID, "txn_"))
	require.Contains(t, sess.URL, "_ptxn="+sess.ID)
	c := fake.Calls()[0]
	require.Empty(t, c.Problem)
	require.Equal(t, "9", c.OrderID)
	require.Equal(t, int64(999), c.Amount)
	require.Equal(t, "usd", c.Currency)

	r := providertest.CheckoutRequest(10, "")
	r.CatalogueID = "pri_1"
	fake.SetProduct("pri_1", fakeapi.Product{Price: 1999, Currency: "usd"})
	_, err = d.OpenCheckout(context.Background(), r)
	require.ErrorIs(t, err, provider.ErrPriceMismatch)
	require.Equal(t, 1, fake.Created(provider.Paddle), "a mismatched price opens nothing")
	fake.SetProduct("pri_1", fakeapi.Product{Price: 999, Currency: "usd"})
	_, err = d.OpenCheckout(context.Background(), r)
	require.NoError(t, err)
	require.Equal(t, 2, fake.Created(provider.Paddle))

	before := len(fake.Calls())
	fake.FailNext(provider.Paddle, 503)
	_, err = d.OpenCheckout(context.Background(), providertest.CheckoutRequest(11, ""))
	require.NoError(t, err, "503 is retried")
	require.Len(t, fake.Calls(), before+2)
	fake.FailNext(provider.Paddle, 400)
	_, err = d.OpenCheckout(context.Background(), providertest.CheckoutRequest(12, ""))
	require.ErrorIs(t, err, provider.ErrRejected)
	require.Len(t, fake.Calls(), before+3, "a refusal is not retried")
}
