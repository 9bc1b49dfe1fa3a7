package stripe

import (
	"context"
	"errors"
	"fmt"
	"strings"

	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/fibe-dev/billing/internal/provider"
)

// Refund implements provider.Provider: it refunds r's PaymentIntent (or,
// without one, its charge), under r's idempotency key on every attempt. A
// refusal (a 4xx but 409 and 429) is provider.ErrNotRefundable.
func (d *Driver) Refund(ctx context.Context, r provider.RefundRequest) (string, error) {
	if err := d.Available(provider.Refunds); err != nil {
		return "", err
	}
	params := &stripeapi.RefundCreateParams{Amount: stripeapi.Int64(r.Amount)}
	ids := append([]string{r.PaymentID}, r.Aliases...)
	if pi := withPrefix(ids, "pi_"); pi != "" {
		params.PaymentIntent = stripeapi.String(pi)
	} else if ch := withPrefix(ids, "ch_"); ch != "" {
		params.Charge = stripeapi.String(ch)
	} else {
		return "", fmt.Errorf("%w: stripe payment %q has no PaymentIntent or charge", provider.ErrNotRefundable, r.PaymentID)
	}
	params.SetIdempotencyKey(r.IdempotencyKey)
	params.AddMetadata("reason", "unapplied payment (billing)")
	ref, err := provider.Call(ctx, d.policy, provider.OpRefund, func(ctx context.Context) (*stripeapi.Refund, error) {
		return d.client.V1Refunds.Create(ctx, params)
	})
	if errors.Is(err, provider.ErrRejected) {
		return "", fmt.Errorf("%w: stripe refund of %s: %w", provider.ErrNotRefundable, r.PaymentID, err)
	}
	if err != nil {
		return "", fmt.Errorf("stripe refund of %s: %w", r.PaymentID, err)
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
