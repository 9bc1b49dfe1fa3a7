package stripe

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/fibe-dev/billing/internal/provider"
)

// pageSize is how many events one page of the Events API asks for (its
// maximum).
const pageSize = 100

// ListEvents implements provider.Provider: the Events API, filtered to
// the types intake acts on (completed payments, refunds, disputes), newest
// first, one page per policy call (so a failed page is retried, not the
// whole listing).
func (d *Driver) ListEvents(ctx context.Context, since time.Time, fn func(string, []byte) error) error {
	after := ""
	for {
		page, err := d.eventsPage(ctx, since, after)
		if err != nil {
			return fmt.Errorf("list stripe events: %w", err)
		}
		for _, ev := range page {
			body, err := json.Marshal(ev)
			if err != nil {
				return fmt.Errorf("encode stripe event %s: %w", ev.ID, err)
			}
			if err := fn(ev.ID, body); err != nil {
				return err
			}
		}
		if len(page) < pageSize {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// eventsPage is the page of events after the event after ("" for the first).
func (d *Driver) eventsPage(ctx context.Context, since time.Time, after string) ([]*stripeapi.Event, error) {
	return provider.Call(ctx, d.policy, provider.OpListEvents, func(ctx context.Context) ([]*stripeapi.Event, error) {
		params := &stripeapi.EventListParams{
			CreatedRange: &stripeapi.RangeQueryParams{GreaterThanOrEqual: since.Unix()},
			Types: stripeapi.StringSlice([]string{EventCheckoutCompleted, EventAsyncPaymentSucceeded,
				EventChargeRefunded, EventDisputeCreated, EventDisputeClosed}),
		}
		params.Limit = stripeapi.Int64(pageSize)
		params.Single = true
		if after != "" {
			params.StartingAfter = stripeapi.String(after)
		}
		var page []*stripeapi.Event
		for ev, err := range d.client.V1Events.List(ctx, params) {
			if err != nil {
				return nil, err
			}
			page = append(page, ev)
		}
		return page, nil
	})
}
