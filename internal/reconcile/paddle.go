package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"

	"github.com/fibe-dev/billing/internal/webhook"
)

// Paddle lists Paddle transaction.completed events through paddle-go-sdk,
// newest first, until one older than since.
type Paddle struct{ SDK *paddle.SDK }

// errOlder stops the iteration at the first event before since.
var errOlder = errors.New("older than since")

// List implements Lister.
func (p Paddle) List(ctx context.Context, since time.Time, fn func(string, []byte) error) error {
	res, err := p.SDK.ListEvents(ctx, &paddle.ListEventsRequest{
		EventType: []string{webhook.PaddleTransactionCompleted},
		OrderBy:   paddle.PtrTo("id[DESC]"),
		PerPage:   paddle.PtrTo(200),
	})
	if err != nil {
		return fmt.Errorf("list paddle events: %w", err)
	}
	err = res.Iter(ctx, func(e paddle.Event) (bool, error) {
		body, err := json.Marshal(e)
		if err != nil {
			return false, fmt.Errorf("encode paddle event: %w", err)
		}
		var head struct {
			EventID    string    `json:"event_id"`
			OccurredAt time.Time `json:"occurred_at"`
		}
		if err := json.Unmarshal(body, &head); err != nil {
			return false, fmt.Errorf("read paddle event: %w", err)
		}
		if head.OccurredAt.Before(since) {
			return false, errOlder
		}
		return true, fn(head.EventID, body)
	})
	if errors.Is(err, errOlder) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list paddle events: %w", err)
	}
	return nil
}
