package timeline

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

// ref is one provider id: a payment's alias, or an id an event names.
type ref struct{ provider, id string }

func splitRefs(refs []ref) (providers, ids []string) {
	for _, r := range refs {
		providers, ids = append(providers, r.provider), append(ids, r.id)
	}
	return providers, ids
}

// eventRow is one reversal_events row: a refund or dispute event as the
// provider sent it, and its decision.
type eventRow struct {
	ID                                int64
	Provider, EventID, ReversalID     string
	PaymentRef, OtherRef, Kind, State string
	Amount                            int64
	Currency, Status, Reason          string
	Payment                           int64 // 0 while pending, or refused unread
	ReceivedAt                        time.Time
	DecidedAt                         *time.Time
}

const eventColumns = `e.id, e.provider, e.event_id, e.reversal_id, e.payment_ref, coalesce(e.other_ref, ''), e.kind,
	e.state, e.amount, e.currency, e.status, coalesce(e.reason, ''), coalesce(e.payment, 0), e.received_at, e.decided_at`

// eventsSQL finds the events decided against the payments $1 and every
// event that names one of the ids ($2, $3) by either of its references,
// pending and refused ones included.
const eventsSQL = `SELECT ` + eventColumns + ` FROM reversal_events e WHERE e.payment = ANY($1)
UNION
SELECT ` + eventColumns + ` FROM unnest($2::text[], $3::text[]) AS r(provider, id)
	JOIN reversal_events e ON e.provider = r.provider AND e.payment_ref = r.id
UNION
SELECT ` + eventColumns + ` FROM unnest($2::text[], $3::text[]) AS r(provider, id)
	JOIN reversal_events e ON e.provider = r.provider AND e.other_ref = r.id
ORDER BY 1`

// eventsByReversalSQL finds every event of one refund or dispute id.
const eventsByReversalSQL = `SELECT ` + eventColumns + ` FROM reversal_events e
WHERE e.provider = $1 AND e.reversal_id = $2 ORDER BY e.id`

func scanEvent(r pgx.Row) (*eventRow, error) {
	var e eventRow
	err := r.Scan(&e.ID, &e.Provider, &e.EventID, &e.ReversalID, &e.PaymentRef, &e.OtherRef, &e.Kind, &e.State,
		&e.Amount, &e.Currency, &e.Status, &e.Reason, &e.Payment, &e.ReceivedAt, &e.DecidedAt)
	return &e, err
}

func loadEvents(ctx context.Context, q dbtx.DB, payments []int64, refs []ref) ([]*eventRow, error) {
	providers, ids := splitRefs(refs)
	return collect(ctx, q, "reversal events", eventsSQL, []any{payments, providers, ids}, scanEvent)
}

// factRow is one payment_reversals row: an accepted fact.
type factRow struct {
	Provider, ReversalID, Kind, State string
	Amount                            int64
	Currency                          string
	Payment                           int64
	CreatedAt, UpdatedAt              time.Time
}

const factsSQL = `SELECT provider, reversal_id, kind, state, amount, currency, payment, created_at, updated_at
FROM payment_reversals WHERE payment = ANY($1) ORDER BY id`

func loadFacts(ctx context.Context, q dbtx.DB, payments []int64) ([]*factRow, error) {
	return collect(ctx, q, "facts", factsSQL, []any{payments}, func(r pgx.Row) (*factRow, error) {
		var f factRow
		err := r.Scan(&f.Provider, &f.ReversalID, &f.Kind, &f.State, &f.Amount, &f.Currency, &f.Payment,
			&f.CreatedAt, &f.UpdatedAt)
		return &f, err
	})
}
