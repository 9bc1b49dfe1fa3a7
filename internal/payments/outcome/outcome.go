// Package outcome records what became of a claimed provider event
// (invariant 11 of docs/contract.md): applied (naming what it made),
// refused (with its reason), ignored (a type we only acknowledge) or
// waiting (a refund or dispute whose payment is not known yet). The
// outcome is a column set on the event's claim, webhook_events, written by
// whoever decides the event, in the transaction of that decision: a job
// that commits its effects commits its outcome with them, so there is no
// moment at which the effect is there and the outcome missing (or the
// other way round).
//
// An outcome, once applied, refused or ignored, is final: RecordTx writes
// only over none or waiting, so a retried job, a redelivery or a second
// decision never rewrites what the first decided.
package outcome

import (
	"context"
	"fmt"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

// Outcomes, as stored in webhook_events.outcome.
const (
	Applied = "applied"
	Refused = "refused"
	Ignored = "ignored"
	Waiting = "waiting"
)

// Result is one event's outcome: Ref names what an applied event made
// ("wallet_transaction:12", "payment:3", "fact:re_1"); Reason says why an
// event was refused, ignored or is waiting.
type Result struct {
	Outcome string
	Ref     string
	Reason  string
}

// AppliedTo is an applied outcome naming what the event made.
func AppliedTo(ref string) Result { return Result{Outcome: Applied, Ref: ref} }

// RefusedFor is a refused outcome with its reason.
func RefusedFor(reason string) Result { return Result{Outcome: Refused, Reason: reason} }

// recordSQL writes an outcome over none or waiting only; waiting never
// over waiting (the first time it began waiting stays).
const recordSQL = `UPDATE webhook_events SET outcome = $3, outcome_ref = nullif($4, ''), outcome_reason = nullif($5, ''),
	outcome_at = now()
WHERE provider = $1 AND event_id = $2 AND (outcome IS NULL OR (outcome = 'waiting' AND $3 <> 'waiting'))`

// RecordTx records r as the outcome of provider's event eventID in db (the
// decision's own transaction). It reports whether it wrote: false when
// the event already has a final outcome, or was never claimed (a job
// enqueued by hand).
func RecordTx(ctx context.Context, db dbtx.DB, provider, eventID string, r Result) (bool, error) {
	if r.Outcome == Refused && r.Reason == "" {
		r.Reason = "refused" // the column says why; never leave it empty
	}
	tag, err := db.Exec(ctx, recordSQL, provider, eventID, r.Outcome, r.Ref, r.Reason)
	if err != nil {
		return false, fmt.Errorf("outcome: record %s of %s event %q: %w", r.Outcome, provider, eventID, err)
	}
	return tag.RowsAffected() == 1, nil
}
