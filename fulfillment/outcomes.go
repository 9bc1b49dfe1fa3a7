package fulfillment

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/payments/outcome"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

// Invariant 11: every claimed event ends in one recorded outcome, written
// here in the transaction of the job that decides it (package outcome).

// appliedTo is an applied outcome naming the row kind:id it made.
func appliedTo(kind string, id int64) *outcome.Result {
	r := outcome.AppliedTo(kind + ":" + strconv.FormatInt(id, 10))
	return &r
}

func refusedFor(reason string) *outcome.Result {
	r := outcome.RefusedFor(reason)
	return &r
}

// recordOutcomes records r as the outcome of provider's event eventID (nil:
// none), then the outcome of every reversal event ev decided now: an
// evaluation of a payment decides the refunds and disputes that waited
// for it, whichever job ran it.
func recordOutcomes(ctx context.Context, tx pgx.Tx, provider, eventID string, r *outcome.Result, ev evaluation) error {
	for _, e := range ev.events {
		if !e.decidedNow {
			continue
		}
		res := outcome.AppliedTo("fact:" + e.reversalID)
		if e.status == EventRefused {
			res = outcome.RefusedFor(e.reason)
		}
		if _, err := outcome.RecordTx(ctx, tx, ev.payment.Provider, e.eventID, res); err != nil {
			return err
		}
	}
	if r == nil {
		return nil
	}
	_, err := outcome.RecordTx(ctx, tx, provider, eventID, *r)
	return err
}

// reversalResult is the outcome of a reverse_payment job's own event, as
// finish is told it.
func reversalResult(a ReversePaymentArgs, metric, refused string) *outcome.Result {
	switch {
	case refused != "":
		return refusedFor(refused)
	case metric == OutcomeAwaitingPayment:
		return &outcome.Result{Outcome: outcome.Waiting, Reason: "payment " + a.PaymentID + " is not known yet"}
	}
	r := outcome.AppliedTo("fact:" + a.ReversalID)
	return &r
}

// UnknownPaymentGrace is how long a refund or dispute naming a payment we
// do not know waits for it: the reconciliation window, in which a payment
// whose webhook was lost is listed from the provider and claimed.
const UnknownPaymentGrace = 72 * time.Hour

// ReasonUnknownPayment is the refusal of a reversal event whose payment
// never became known within UnknownPaymentGrace.
const ReasonUnknownPayment = "unknown payment after its grace period"

// RefuseUnknown refuses every refund or dispute event still pending,
// received more than grace before now, whose payment is still unknown:
// reversal_events and the event's outcome both say refused, with
// ReasonUnknownPayment. Each event is refused under its payment ids'
// locks (beginForPayment), so a payment recorded at that moment either
// decides it first or finds it refused. It returns the events refused.
func (w *ReverseWorker) RefuseUnknown(ctx context.Context, grace time.Duration) ([]EventKey, error) {
	rows, err := w.pool.Query(ctx, `SELECT provider, event_id, payment_ref, coalesce(other_ref, '')
		FROM reversal_events WHERE status = 'pending' AND received_at < now() - $1::interval ORDER BY id`, grace)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: find waiting reversal events: %w", err)
	}
	waiting, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReversePaymentArgs, error) {
		var a ReversePaymentArgs
		return a, r.Scan(&a.Provider, &a.EventID, &a.PaymentID, &a.OtherRef)
	})
	if err != nil {
		return nil, fmt.Errorf("fulfillment: find waiting reversal events: %w", err)
	}
	var refused []EventKey
	for _, a := range waiting {
		done, err := w.refuseUnknown(ctx, a)
		if err != nil {
			return refused, err
		}
		if done {
			refused = append(refused, EventKey{Provider: a.Provider, EventID: a.EventID})
		}
	}
	return refused, nil
}

// EventKey names one claimed provider event.
type EventKey struct {
	Provider string `json:"provider"`
	EventID  string `json:"event_id"`
}

func (w *ReverseWorker) refuseUnknown(ctx context.Context, a ReversePaymentArgs) (bool, error) {
	tx, err := beginForPayment(ctx, w.pool, a.Provider, a.refs())
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, known, err := paymentOrderByRefs(ctx, tx, a.Provider, a.refs()); err != nil || known {
		return false, err // known: decide-pending decides it against its payment
	}
	tag, err := tx.Exec(ctx, `UPDATE reversal_events SET status = 'refused', reason = $3, decided_at = now()
		WHERE provider = $1 AND event_id = $2 AND status = 'pending'`, a.Provider, a.EventID, ReasonUnknownPayment)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	if _, err := outcome.RecordTx(ctx, tx, a.Provider, a.EventID, outcome.RefusedFor(ReasonUnknownPayment)); err != nil {
		return false, err
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return false, fmt.Errorf("fulfillment: commit refusal of %s event %q: %w", a.Provider, a.EventID, err)
	}
	decisions.WithLabelValues(a.Provider, EventRefused).Inc()
	return true, nil
}
