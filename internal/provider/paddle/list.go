package paddle

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	paddleapi "github.com/PaddleHQ/paddle-go-sdk/v4"

	"github.com/fibe-dev/billing/internal/provider"
)

// ListEvents implements provider.Provider: the events intake acts on
// (transaction.completed, and the adjustments that refund or charge back)
// through the events API, newest first, until one older than since. Each
// page is fetched through the policy: the SDK's collection fetches a page
// when its iteration reaches it, and a failed fetch leaves the collection
// where it was, so the next attempt fetches the same page again.
func (d *Driver) ListEvents(ctx context.Context, since time.Time, fn func(string, []byte) error) error {
	list, err := provider.Call(ctx, d.policy, provider.OpListEvents, func(ctx context.Context) (*paddleapi.Collection[paddleapi.Event], error) {
		return d.sdk.ListEvents(ctx, &paddleapi.ListEventsRequest{
			EventType: []string{EventTransactionCompleted, EventAdjustmentCreated, EventAdjustmentUpdated},
			OrderBy:   paddleapi.PtrTo("id[DESC]"),
			PerPage:   paddleapi.PtrTo(200),
		})
	})
	if err != nil {
		return fmt.Errorf("list paddle events: %w", err)
	}
	for {
		e, ok, err := d.next(ctx, list)
		if err != nil {
			return fmt.Errorf("list paddle events: %w", err)
		}
		if !ok {
			return nil
		}
		if done, err := visit(e, since, fn); done || err != nil {
			return err
		}
	}
}

// next is the collection's next event, fetching its page if need be.
func (d *Driver) next(ctx context.Context, events *paddleapi.Collection[paddleapi.Event]) (paddleapi.Event, bool, error) {
	var r *paddleapi.Res[paddleapi.Event]
	err := d.policy.Do(ctx, provider.OpListEvents, func(ctx context.Context) error {
		r = events.Next(ctx)
		return r.Err()
	})
	if err != nil {
		return nil, false, err
	}
	return r.Value(), r.Ok(), nil
}

// visit passes e to fn unless it is older than since (done: the listing
// has gone past since).
func visit(e paddleapi.Event, since time.Time, fn func(string, []byte) error) (done bool, err error) {
	body, err := json.Marshal(e)
	if err != nil {
		return true, fmt.Errorf("encode paddle event: %w", err)
	}
	var head struct {
		EventID    string    `json:"event_id"`
		OccurredAt time.Time `json:"occurred_at"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		return true, fmt.Errorf("read paddle event: %w", err)
	}
	if head.OccurredAt.Before(since) {
		return true, nil
	}
	return false, fn(head.EventID, body)
}
