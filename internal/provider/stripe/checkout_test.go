package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/stripemock"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
	"github.com/fibe-dev/billing/internal/provider/stripe"
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

func (r *recorder) all() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.reqs...)
}

// TestCheckoutAgainstStripeMock validates our session parameters against
// Stripe's API specification, and that the Idempotency-Key header is
// derived from the order id.
func TestCheckoutAgainstStripeMock(t *testing.T) {
	t.Parallel()
	url := stripemock.Start(t)
	rec := &recorder{}
	d := stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: url, HTTPClient: &http.Client{Transport: rec, Timeout: 10 * time.Second}})
	sess, err := d.OpenCheckout(context.Background(), providertest.CheckoutRequest(42, ""))
	require.NoError(t, err)
	require.NotEmpty(t, sess.ID)
	require.NotEmpty(t, sess.URL)
	reqs := rec.all()
	require.Len(t, reqs, 1)
	require.Equal(t, "/v1/checkout/sessions", reqs[0].URL.Path)
	require.Equal(t, "billing-checkout-order-42", reqs[0].Header.Get("Idempotency-Key"))
}

func TestCheckoutParametersAndReplay(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	d := stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: fake.URL})
	first, err := d.OpenCheckout(context.Background(), providertest.CheckoutRequest(7, ""))
	require.NoError(t, err)
	again, err := d.OpenCheckout(context.Background(), providertest.CheckoutRequest(7, ""))
	require.NoError(t, err)
	require.Equal(t, first, again, "one order, one session: the key replays it")
	require.Equal(t, 1, fake.Created(provider.Stripe))
	calls := fake.Calls()
	require.Len(t, calls, 2)
	for _, c := range calls {
		require.Empty(t, c.Problem)
		require.Equal(t, fakeapi.Call{Provider: "stripe", Path: "/v1/checkout/sessions",
			IdempotencyKey: "billing-checkout-order-7", OrderID: "7", Amount: 999, Currency: "usd", Status: 200}, c)
	}
}

func TestCheckoutRetryBudget(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	d := stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: fake.URL,
		Retry: provider.Retry{Budget: 2 * time.Second, BaseDelay: 10 * time.Millisecond, RetryAfter: 3 * time.Second}})

	t.Run("transient failures are retried with the same key", func(t *testing.T) {
		fake.FailNext(provider.Stripe, 500, 429, 503)
		sess, err := d.OpenCheckout(context.Background(), providertest.CheckoutRequest(1, ""))
		require.NoError(t, err)
		require.NotEmpty(t, sess.URL)
	})
	t.Run("4xx is the provider's refusal, not retried", func(t *testing.T) {
		before := len(fake.Calls())
		fake.FailNext(provider.Stripe, 400)
		_, err := d.OpenCheckout(context.Background(), providertest.CheckoutRequest(2, ""))
		rej, ok := errors.AsType[*provider.RejectedError](err)
		require.True(t, ok, "got %v", err)
		require.Equal(t, 400, rej.Status)
		require.Equal(t, "injected failure", rej.Message)
		require.Len(t, fake.Calls(), before+1)
	})
	t.Run("down for the whole budget is a DownError", func(t *testing.T) {
		fake.SetDown(true)
		defer fake.SetDown(false)
		start := time.Now()
		_, err := d.OpenCheckout(context.Background(), providertest.CheckoutRequest(3, ""))
		require.ErrorIs(t, err, provider.ErrDown)
		require.Less(t, time.Since(start), 3*time.Second, "bounded by the budget")
		down, _ := errors.AsType[*provider.DownError](err)
		require.Equal(t, 3*time.Second, down.RetryAfter)
	})
	for _, c := range fake.Calls() {
		require.True(t, strings.HasPrefix(c.IdempotencyKey, "billing-checkout-order-"))
	}
}

func TestCheckoutWithoutKeyIsNotConfigured(t *testing.T) {
	t.Parallel()
	_, err := stripe.New(provider.Options{}).OpenCheckout(context.Background(), providertest.CheckoutRequest(1, ""))
	require.ErrorIs(t, err, provider.ErrNotConfigured)
}
