package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/stripe/stripe-go/v82"
)

// RefundRequest asks a provider to give an unapplied payment back.
type RefundRequest struct {
	PaymentID string // the provider's payment id
	Amount    int64  // minor units
	Currency  string
	// IdempotencyKey is derived from our payment row id, so a retried job
	// never refunds twice: the provider answers the first refund again.
	IdempotencyKey string
}

// Refunder refunds payments through one provider's API. It is called
// outside any database transaction.
type Refunder interface {
	Refund(ctx context.Context, r RefundRequest) (refundID string, err error)
}

// ErrNotRefundable marks a payment a Refunder can never refund (retrying
// does not help): it stays unapplied for an operator.
var ErrNotRefundable = errors.New("fulfillment: payment cannot be refunded automatically")

// RefundKey is the provider idempotency key of the refund of payment row id.
func RefundKey(paymentRowID int64) string {
	return "billing-payment-" + strconv.FormatInt(paymentRowID, 10) + "-refund"
}

// StripeRefunder refunds through Stripe's refund API (stripe-go).
type StripeRefunder struct{ client *stripe.Client }

// DefaultStripeAPIURL is Stripe's API.
const DefaultStripeAPIURL = "https://api.stripe.com"

// NewStripeRefunder returns a refunder for secret key; apiURL points it at
// Stripe ("" for the real API) or at stripe-mock in tests. stripe-go
// retries network errors, 409 and 5xx itself, with the same key, a bounded
// number of times.
func NewStripeRefunder(secretKey, apiURL string) *StripeRefunder {
	if apiURL == "" {
		apiURL = DefaultStripeAPIURL
	}
	retries := int64(2)
	cfg := &stripe.BackendConfig{URL: stripe.String(apiURL), MaxNetworkRetries: &retries}
	return &StripeRefunder{client: stripe.NewClient(secretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(cfg)))}
}

// Refund refunds r's PaymentIntent in full.
func (s *StripeRefunder) Refund(ctx context.Context, r RefundRequest) (string, error) {
	if !strings.HasPrefix(r.PaymentID, "pi_") {
		return "", fmt.Errorf("%w: stripe payment %q is not a PaymentIntent", ErrNotRefundable, r.PaymentID)
	}
	params := &stripe.RefundCreateParams{PaymentIntent: stripe.String(r.PaymentID), Amount: stripe.Int64(r.Amount)}
	params.SetIdempotencyKey(r.IdempotencyKey)
	params.AddMetadata("reason", "unapplied payment (billing)")
	ref, err := s.client.V1Refunds.Create(ctx, params)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode >= 400 && se.HTTPStatusCode < 500 && se.HTTPStatusCode != 409 &&
			se.HTTPStatusCode != 429 {
			return "", fmt.Errorf("%w: stripe refund of %s: %w", ErrNotRefundable, r.PaymentID, err)
		}
		return "", fmt.Errorf("fulfillment: stripe refund of %s: %w", r.PaymentID, err)
	}
	return ref.ID, nil
}
