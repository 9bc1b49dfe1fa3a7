package creem_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/creem"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
)

func TestCheckout(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	d := creem.New(provider.Options{APIKey: "creem_test", APIURL: fake.URL})
	r := providertest.CheckoutRequest(5, "prod_1")
	_, err := d.OpenCheckout(context.Background(), r)
	require.ErrorIs(t, err, provider.ErrRejected, "unknown product")
	fake.SetProduct("prod_1", fakeapi.Product{Price: 1000, Currency: "usd"})
	_, err = d.OpenCheckout(context.Background(), r)
	require.ErrorIs(t, err, provider.ErrPriceMismatch)
	fake.SetProduct("prod_1", fakeapi.Product{Price: 999, Currency: "USD"})
	sess, err := d.OpenCheckout(context.Background(), r)
	require.NoError(t, err)
	require.NotEmpty(t, sess.URL)
	require.Equal(t, 1, fake.Created(provider.Creem))
	r.CatalogueID = ""
	_, err = d.OpenCheckout(context.Background(), r)
	require.ErrorIs(t, err, provider.ErrSKUNotConfigured)
}

// Creem's API lists no events and its refunds are not automated: both say
// so without a call.
func TestNoListingNoRefunds(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	d := creem.New(provider.Options{APIKey: "creem_test", APIURL: fake.URL})
	err := d.ListEvents(context.Background(), time.Now().Add(-time.Hour), func(string, []byte) error { return nil })
	require.ErrorIs(t, err, provider.ErrNoListing)
	_, err = d.Refund(context.Background(), provider.RefundRequest{PaymentID: "ord_1", Amount: 5, Currency: "usd", IdempotencyKey: "k"})
	require.ErrorIs(t, err, provider.ErrUnsupported)
	require.Zero(t, fake.Requests())
}
