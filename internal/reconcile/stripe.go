package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/fibe-dev/billing/internal/webhook"
)

// Stripe lists Stripe events through stripe-go's list iterator (auto
// pagination), filtered to the completed-payment types intake fulfils.
type Stripe struct{ Client *stripe.Client }

// List implements Lister.
func (s Stripe) List(ctx context.Context, since time.Time, fn func(string, []byte) error) error {
	params := &stripe.EventListParams{
		CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()},
		Types:        stripe.StringSlice([]string{webhook.StripeCheckoutCompleted, webhook.StripeAsyncPaymentSucceeded}),
	}
	params.Limit = stripe.Int64(100)
	for ev, err := range s.Client.V1Events.List(ctx, params) {
		if err != nil {
			return fmt.Errorf("list stripe events: %w", err)
		}
		body, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode stripe event %s: %w", ev.ID, err)
		}
		if err := fn(ev.ID, body); err != nil {
			return err
		}
	}
	return nil
}
