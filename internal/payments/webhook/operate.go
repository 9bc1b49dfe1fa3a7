package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/payments/outcome"
	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

// What an operator does with claimed events (`billing webhooks`): list
// them by outcome, re-drive the orphans (no outcome, no live job) through
// the claim, or close one on purpose.

// ErrNotClaimed is returned for an event that was never claimed.
var ErrNotClaimed = errors.New("webhook: no such claimed event")

// ErrLiveJob is returned when closing an event whose job may still run.
var ErrLiveJob = errors.New("webhook: the event has a live job")

// ClaimedEvent is one claimed event and its outcome ("" while its job
// has not decided; then Live says whether a job will run).
type ClaimedEvent struct {
	Provider  string    `json:"provider"`
	EventID   string    `json:"event_id"`
	Type      string    `json:"type"`
	ClaimedAt time.Time `json:"claimed_at"`
	Outcome   string    `json:"outcome"`
	Ref       string    `json:"outcome_ref,omitempty"`
	Reason    string    `json:"outcome_reason,omitempty"`
	Live      bool      `json:"live_job"`
}

const claimedColumns = `w.provider, w.event_id, w.event_type, w.claimed_at, coalesce(w.outcome, ''),
	coalesce(w.outcome_ref, ''), coalesce(w.outcome_reason, ''), ` + liveJob

// ListParams filter List.
type ListParams struct {
	// Outcome is applied, refused, ignored, waiting, or "orphaned" (no
	// outcome and no live job); "" is every event.
	Outcome  string
	Provider string // "": every provider
	EventID  string // "": every event
	Limit    int    // 0: 1000
}

// Orphaned is the List filter of events with no outcome and no live job.
const Orphaned = "orphaned"

// List returns claimed events, oldest first.
func List(ctx context.Context, db dbtx.DB, p ListParams) ([]ClaimedEvent, error) {
	if p.Limit <= 0 {
		p.Limit = 1000
	}
	where := `($1 = '' OR w.outcome = $1)`
	if p.Outcome == Orphaned {
		where = `$1 <> '' AND w.outcome IS NULL AND NOT ` + liveJob
	}
	rows, err := db.Query(ctx, `SELECT `+claimedColumns+` FROM webhook_events w WHERE `+where+`
		AND ($2 = '' OR w.provider = $2) AND ($3 = '' OR w.event_id = $3) ORDER BY w.claimed_at, w.id LIMIT $4`,
		p.Outcome, p.Provider, p.EventID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("webhook: list events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClaimedEvent, error) {
		var e ClaimedEvent
		return e, r.Scan(&e.Provider, &e.EventID, &e.Type, &e.ClaimedAt, &e.Outcome, &e.Ref, &e.Reason, &e.Live)
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: list events: %w", err)
	}
	return out, nil
}

// Redrive re-drives claimed event (provider, eventID) through the claim,
// as a redelivery would: when it has no outcome and no live job, its work
// is re-enqueued from its stored payload (or its outcome recorded, for an
// event that needs no job), under the claim's lock, so any number of
// concurrent redrives and redeliveries enqueue one job. It reports whether
// it re-enqueued; false for an event that needed nothing. It needs the
// Claimer's Providers to read the payload.
func (c *Claimer) Redrive(ctx context.Context, provider, eventID string) (bool, error) {
	var payload []byte
	err := c.h.opts.Pool.QueryRow(ctx, `SELECT payload FROM webhook_events WHERE provider = $1 AND event_id = $2`,
		provider, eventID).Scan(&payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("%w: %s %q", ErrNotClaimed, provider, eventID)
	}
	if err != nil {
		return false, fmt.Errorf("webhook: read %s event %q: %w", provider, eventID, err)
	}
	in, ok := c.h.opts.Providers[provider]
	if !ok {
		return false, fmt.Errorf("webhook: no driver for provider %q", provider)
	}
	ev, err := in.Parse(payload)
	if err != nil {
		return false, fmt.Errorf("webhook: read stored %s event %q: %w", provider, eventID, err)
	}
	r := claimReq{ev: ev, body: payload, at: c.h.opts.Now(), redrive: true}
	res, err := c.h.commitBatch(ctx, []claimReq{r}, []int{0})
	if err != nil {
		return false, err
	}
	_, redriven := res.redriven[r.key()]
	return redriven, nil
}

// Close records claimed event (provider, eventID) refused on purpose, with
// reason: for an event an operator decided no job must apply. Only an
// event with no outcome yet (or waiting for its payment) and no live job
// can be closed; a waiting refund or dispute is refused with it, so its
// payment's arrival does not apply it later. It reports whether it closed
// (false: the event already had a final outcome).
func Close(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, provider, eventID, reason string) (bool, error) {
	if reason == "" {
		return false, errors.New("webhook: close needs a reason")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("webhook: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var open, live bool
	err = tx.QueryRow(ctx, `SELECT w.outcome IS NULL OR w.outcome = 'waiting', `+liveJob+` FROM webhook_events w
		WHERE w.provider = $1 AND w.event_id = $2 FOR UPDATE OF w`, provider, eventID).Scan(&open, &live)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("%w: %s %q", ErrNotClaimed, provider, eventID)
	case err != nil:
		return false, fmt.Errorf("webhook: read %s event %q: %w", provider, eventID, err)
	case !open:
		return false, nil
	case live:
		return false, fmt.Errorf("%w: %s %q: cancel it in the River UI first, or let it decide", ErrLiveJob, provider, eventID)
	}
	why := "closed by operator: " + reason
	if _, err := tx.Exec(ctx, `UPDATE reversal_events SET status = 'refused', reason = $3, decided_at = now()
		WHERE provider = $1 AND event_id = $2 AND status = 'pending'`, provider, eventID, why); err != nil {
		return false, fmt.Errorf("webhook: close %s event %q: %w", provider, eventID, err)
	}
	r := outcome.Result{Outcome: outcome.Refused, Ref: "operator", Reason: why}
	if _, err := outcome.RecordTx(ctx, tx, provider, eventID, r); err != nil {
		return false, err
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return false, fmt.Errorf("webhook: commit close of %s event %q: %w", provider, eventID, err)
	}
	return true, nil
}
