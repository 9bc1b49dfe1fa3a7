package checkout_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/checkout"
	"github.com/fibe-dev/billing/internal/providerfake"
	"github.com/fibe-dev/billing/internal/stripemock"
)

// recorder is an http.RoundTripper that keeps every request's headers.
type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req.Clone(context.Background()))
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func request(order int64) checkout.Request {
	return checkout.Request{OrderID: order, SKU: "mana_1000", Amount: 999, Currency: "usd",
		Catalogue:  fulfillment.SKU{Amount: 999, Currency: "usd", Mana: 1000, Name: "1000 Mana", CreemProductID: "prod_1"},
		SuccessURL: "https://example.test/ok", CancelURL: "https://example.test/cancel"}
}

// TestStripeSessionAgainstStripeMock validates our session parameters
// against Stripe's API specification, and that the Idempotency-Key header
// is derived from the order id.
func TestStripeSessionAgainstStripeMock(t *testing.T) {
	t.Parallel()
	url := stripemock.Start(t)
	rec := &recorder{}
	s := checkout.NewStripe("sk_test_123", url, &http.Client{Transport: rec, Timeout: 10 * time.Second})
	sess, err := s.Open(context.Background(), request(42))
	require.NoError(t, err)
	require.NotEmpty(t, sess.ID)
	require.NotEmpty(t, sess.URL)
	require.Len(t, rec.reqs, 1)
	require.Equal(t, "/v1/checkout/sessions", rec.reqs[0].URL.Path)
	require.Equal(t, "billing-checkout-order-42", rec.reqs[0].Header.Get("Idempotency-Key"))
}

func TestStripeSessionParametersAndReplay(t *testing.T) {
	t.Parallel()
	fake := providerfake.Start()
	t.Cleanup(fake.Close)
	s := checkout.NewStripe("sk_test_123", fake.URL, nil)
	first, err := s.Open(context.Background(), request(7))
	require.NoError(t, err)
	again, err := s.Open(context.Background(), request(7))
	require.NoError(t, err)
	require.Equal(t, first, again, "one order, one session: the key replays it")
	require.Equal(t, 1, fake.Created(providerfake.Stripe))
	calls := fake.Calls()
	require.Len(t, calls, 2)
	for _, c := range calls {
		require.Empty(t, c.Problem)
		require.Equal(t, providerfake.Call{Provider: "stripe", Path: "/v1/checkout/sessions",
			IdempotencyKey: "billing-checkout-order-7", OrderID: "7", Amount: 999, Currency: "usd", Status: 200}, c)
	}
}

func TestRetryBudget(t *testing.T) {
	t.Parallel()
	fake := providerfake.Start()
	t.Cleanup(fake.Close)
	svcRetry := checkout.Retry{Budget: 2 * time.Second, BaseDelay: 10 * time.Millisecond, RetryAfter: 3 * time.Second}
	s := checkout.NewStripe("sk_test_123", fake.URL, nil)

	t.Run("transient failures are retried with the same key", func(t *testing.T) {
		fake.FailNext(providerfake.Stripe, 500, 429, 503)
		sess, err := checkout.OpenWithRetry(context.Background(), svcRetry, "stripe", s, request(1))
		require.NoError(t, err)
		require.NotEmpty(t, sess.URL)
	})
	t.Run("4xx is the provider's refusal, not retried", func(t *testing.T) {
		before := len(fake.Calls())
		fake.FailNext(providerfake.Stripe, 400)
		_, err := checkout.OpenWithRetry(context.Background(), svcRetry, "stripe", s, request(2))
		rej, ok := errors.AsType[*checkout.RejectedError](err)
		require.True(t, ok, "got %v", err)
		require.Equal(t, 400, rej.Status)
		require.Equal(t, "injected failure", rej.Message)
		require.Len(t, fake.Calls(), before+1)
	})
	t.Run("down for the whole budget is a DownError", func(t *testing.T) {
		fake.SetDown(true)
		defer fake.SetDown(false)
		start := time.Now()
		_, err := checkout.OpenWithRetry(context.Background(), svcRetry, "stripe", s, request(3))
		require.ErrorIs(t, err, checkout.ErrProviderDown)
		require.Less(t, time.Since(start), 3*time.Second, "bounded by the budget")
		down, _ := errors.AsType[*checkout.DownError](err)
		require.Equal(t, 3*time.Second, down.RetryAfter)
	})
	for _, c := range fake.Calls() {
		require.True(t, strings.HasPrefix(c.IdempotencyKey, "billing-checkout-order-"))
	}
}

func TestPaddleTransaction(t *testing.T) {
	t.Parallel()
	fake := providerfake.Start()
	t.Cleanup(fake.Close)
	p, err := checkout.NewPaddle("pdl_test", fake.URL, nil)
	require.NoError(t, err)
	sess, err := p.Open(context.Background(), request(9))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sess.ID, "txn_"))
	require.Contains(t, sess.URL, "_ptxn="+sess.ID)
	c := fake.Calls()[0]
	require.Empty(t, c.Problem)
	require.Equal(t, "9", c.OrderID)
	require.Equal(t, int64(999), c.Amount)
	require.Equal(t, "usd", c.Currency)

	r := request(10)
	r.Catalogue.PaddlePriceID = "pri_1"
	fake.SetProduct("pri_1", providerfake.Product{Price: 1999, Currency: "usd"})
	_, err = p.Open(context.Background(), r)
	require.ErrorIs(t, err, checkout.ErrPriceMismatch)
	require.Equal(t, 1, fake.Created(providerfake.Paddle), "a mismatched price opens nothing")
	fake.SetProduct("pri_1", providerfake.Product{Price: 999, Currency: "usd"})
	_, err = p.Open(context.Background(), r)
	require.NoError(t, err)
	require.Equal(t, 2, fake.Created(providerfake.Paddle))

	fake.FailNext(providerfake.Paddle, 503)
	_, err = p.Open(context.Background(), request(11))
	require.True(t, checkout.Retryable(err), "503 is retryable: %v", err)
	fake.FailNext(providerfake.Paddle, 400)
	_, err = p.Open(context.Background(), request(11))
	require.ErrorIs(t, err, checkout.ErrProviderRejected)
}

func TestCreemCheckout(t *testing.T) {
	t.Parallel()
	fake := providerfake.Start()
	t.Cleanup(fake.Close)
	c := checkout.NewCreem("creem_test", fake.URL, nil)
	r := request(5)
	_, err := c.Open(context.Background(), r)
	require.ErrorIs(t, err, checkout.ErrProviderRejected, "unknown product")
	fake.SetProduct("prod_1", providerfake.Product{Price: 1000, Currency: "usd"})
	_, err = c.Open(context.Background(), r)
	require.ErrorIs(t, err, checkout.ErrPriceMismatch)
	fake.SetProduct("prod_1", providerfake.Product{Price: 999, Currency: "USD"})
	sess, err := c.Open(context.Background(), r)
	require.NoError(t, err)
	require.NotEmpty(t, sess.URL)
	require.Equal(t, 1, fake.Created(providerfake.Creem))
	r.Catalogue.CreemProductID = ""
	_, err = c.Open(context.Background(), r)
	require.ErrorIs(t, err, checkout.ErrNotConfigured)
}
