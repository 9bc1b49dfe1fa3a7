package stripe_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/stripemock"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/stripe"
)

// Stripe cannot refund a Checkout Session id (a payment without a
// PaymentIntent): not retried, left for an operator.
func TestRefundRefusesSessionIDs(t *testing.T) {
	t.Parallel()
	_, err := stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: "http://127.0.0.1:1"}).Refund(context.Background(),
		provider.RefundRequest{PaymentID: "cs_test_1", Amount: 5, Currency: "usd", IdempotencyKey: "k"})
	require.ErrorIs(t, err, provider.ErrNotRefundable)
}

// A refund names the PaymentIntent among the payment's ids, as Stripe's
// specification (stripe-mock) accepts it.
func TestRefundAgainstStripeMock(t *testing.T) {
	t.Parallel()
	d := stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: stripemock.Start(t)})
	id, err := d.Refund(context.Background(), provider.RefundRequest{PaymentID: "cs_test_1",
		Aliases: []string{"cs_test_1", "pi_123"}, Amount: 5, Currency: "usd", IdempotencyKey: "billing-payment-1-refund"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(id, "re_"), id)
}

// Stripe's refusal of a refund (a 4xx) is ErrNotRefundable, after one
// attempt; its being down is ErrDown, not ErrNotRefundable, so the job
// retries later.
func TestRefundClassification(t *testing.T) {
	t.Parallel()
	fake := providertest.Fake(t)
	d := stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: fake.URL,
		Retry: provider.Retry{Budget: 300 * time.Millisecond, BaseDelay: 10 * time.Millisecond}})
	// The fake refunds PaymentIntents only: a charge is refused (400).
	_, err := d.Refund(context.Background(), provider.RefundRequest{PaymentID: "ch_1", Amount: 5, Currency: "usd", IdempotencyKey: "k1"})
	require.ErrorIs(t, err, provider.ErrNotRefundable)
	require.ErrorIs(t, err, provider.ErrRejected)
	require.Len(t, fake.Calls(), 1, "a refusal is not retried")

	fake.SetDown(true)
	_, err = d.Refund(context.Background(), provider.RefundRequest{PaymentID: "pi_1", Amount: 5, Currency: "usd", IdempotencyKey: "k2"})
	require.ErrorIs(t, err, provider.ErrDown)
	require.NotErrorIs(t, err, provider.ErrNotRefundable)
	require.Greater(t, fake.Refused(), 1, "retried within the budget")
	fake.SetDown(false)

	id, err := d.Refund(context.Background(), provider.RefundRequest{PaymentID: "pi_1", Amount: 5, Currency: "usd", IdempotencyKey: "k2"})
	require.NoError(t, err)
	again, err := d.Refund(context.Background(), provider.RefundRequest{PaymentID: "pi_1", Amount: 5, Currency: "usd", IdempotencyKey: "k2"})
	require.NoError(t, err)
	require.Equal(t, id, again, "one key, one refund")
}
