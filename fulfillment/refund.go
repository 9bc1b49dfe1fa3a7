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
	// Aliases are every id the payment is known by (PaymentID among them):
	// Stripe refunds a PaymentIntent or a charge, not a Checkout Session.
	Aliases  []string
	Amount   int64 // minor units
	Currency string
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

// Refund refunds r's PaymentIntent (or, without one, its charge) in full.
func (s *StripeRefunder) Refund(ctx context.Context, r RefundRequest) (string, error) {
	params := &stripe.RefundCreateParams{Amount: stripe.Int64(r.Amount)}
	ids := append([]string{r.PaymentID}, r.Aliases...)
	if pi := withPrefix(ids, "pi_"); pi != "" {
		params.PaymentIntent = stripe.String(pi)
	} else if ch := withPrefix(ids, "ch_"); ch != "" {
		params.Charge = stripe.String(ch)
	} else {
		return "", fmt.Errorf("%w: stripe payment %q has no PaymentIntent or charge", ErrNotRefundable, r.PaymentID)
	}
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

// withPrefix returns the first of ids that starts with prefix, or "".
func withPrefix(ids []string, prefix string) string {
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			return id
		}
	}
	return ""
}
