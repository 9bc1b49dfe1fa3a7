package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fibe-dev/billing/fulfillment"
)

// Claimer claims provider events that did not arrive as a webhook delivery
// (reconciliation lists them from the provider's API) through the SAME
// claim as a delivery: claimOne, the reference path of the batcher. So
// claim-once holds whichever comes first, the webhook or the listing, even
// at the same moment on two processes: the UNIQUE (provider, event_id)
// INSERT decides. The body is stored as the event's payload; for a listed
// event it is what the provider's API answered to our authenticated call
// (there is no signature to verify), read by the provider's driver.
type Claimer struct{ h *handler }

// NewClaimer returns a Claimer; it needs opts.Pool and opts.River only.
func NewClaimer(opts Options) *Claimer {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Claimer{h: &handler{opts: opts}}
}

// Claim claims ev, read from body by its provider's driver. It reports
// whether this call won the claim (false: already claimed).
func (c *Claimer) Claim(ctx context.Context, ev *Event, body []byte) (bool, error) {
	return c.h.claimOne(ctx, claimReq{ev: ev, body: body, at: c.h.opts.Now()})
}

// Claimed reports whether provider's event eventID is already claimed.
func Claimed(ctx context.Context, db fulfillment.DB, provider, eventID string) (bool, error) {
	var found bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_events WHERE provider = $1 AND event_id = $2)`,
		provider, eventID).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("webhook: read claim: %w", err)
	}
	return found, nil
}
