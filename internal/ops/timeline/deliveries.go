package timeline

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

// deliveryRow is one webhook_events row: a provider event, claimed once.
type deliveryRow struct {
	Provider, EventID, EventType string
	OrderID                      *int64
	PaidAmount                   *int64
	PaidCurrency                 string
	ClaimedAt                    time.Time
	// Duplicates counts the deliveries after the claiming one, which the
	// intake counts on the claim's row; LastDelivery is the latest of
	// them (nil: delivered once).
	Duplicates   int64
	LastDelivery *time.Time
	// Outcome is what became of the event (invariant 11): applied,
	// refused, ignored, waiting, or "" while its job has not decided;
	// OutcomeRef names what it made, OutcomeReason why it was refused.
	Outcome, OutcomeRef, OutcomeReason string
}

const deliveryColumns = `w.provider, w.event_id, w.event_type, w.order_id, w.paid_amount, coalesce(w.paid_currency, ''),
	w.claimed_at, w.duplicate_deliveries, w.last_delivery_at, coalesce(w.outcome, ''), coalesce(w.outcome_ref, ''),
	coalesce(w.outcome_reason, '')`

// deliveriesSQL finds the payment events of orders $1, the events ($2,
// $3) by their claim's key, and the events naming payment ids ($4, $5)
// (a refund or dispute refused as it was read has no reversal event).
const deliveriesSQL = `SELECT ` + deliveryColumns + ` FROM webhook_events w WHERE w.order_id = ANY($1)
UNION
SELECT ` + deliveryColumns + ` FROM unnest($2::text[], $3::text[]) AS e(provider, event_id)
	JOIN webhook_events w ON w.provider = e.provider AND w.event_id = e.event_id
UNION
SELECT ` + deliveryColumns + ` FROM unnest($4::text[], $5::text[]) AS r(provider, payment_ref)
	JOIN webhook_events w ON w.provider = r.provider AND w.payment_ref = r.payment_ref
ORDER BY 7, 2`

func loadDeliveries(ctx context.Context, q dbtx.DB, orderIDs []int64, events, refs []ref) ([]*deliveryRow, error) {
	providers, ids := splitRefs(events)
	rp, rid := splitRefs(refs)
	return collect(ctx, q, "deliveries", deliveriesSQL, []any{orderIDs, providers, ids, rp, rid}, func(r pgx.Row) (*deliveryRow, error) {
		var d deliveryRow
		err := r.Scan(&d.Provider, &d.EventID, &d.EventType, &d.OrderID, &d.PaidAmount, &d.PaidCurrency, &d.ClaimedAt,
			&d.Duplicates, &d.LastDelivery, &d.Outcome, &d.OutcomeRef, &d.OutcomeReason)
		return &d, err
	})
}

// jobRow is one river_job row of a fulfilment or a reversal.
type jobRow struct {
	ID                       int64
	Kind, State              string
	Attempt, MaxAttempts     int
	CreatedAt, ScheduledAt   time.Time
	AttemptedAt, FinalizedAt *time.Time
	Errors                   []Attempt
	Args                     jobArgs
}

// jobArgs are the fields of fulfill_order and reverse_payment args a
// timeline reads.
type jobArgs struct {
	OrderID    int64  `json:"order_id"`
	EventID    string `json:"event_id"`
	Provider   string `json:"provider"`
	PaymentID  string `json:"payment_id"`
	ReversalID string `json:"reversal_id"`
	Kind       string `json:"kind"`
	State      string `json:"state"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// riverError is one element of river_job.errors, as River stores it.
type riverError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// Job kinds a timeline shows.
const (
	kindFulfil  = "fulfill_order"
	kindReverse = "reverse_payment"
)

// jobsSQL finds the jobs of the events ($1, $2) and the reversal jobs
// naming the payment ids ($3, $4), each through a partial expression
// index on River's args (migration 00013): a job's args are looked up as
// a claim's key is, never searched.
const jobsSQL = `SELECT ` + jobColumns + ` FROM unnest($1::text[], $2::text[]) AS e(provider, event_id)
	JOIN river_job j ON j.args ->> 'event_id' = e.event_id AND j.args ->> 'provider' = e.provider
		AND j.kind IN ('fulfill_order', 'reverse_payment')
UNION
SELECT ` + jobColumns + ` FROM unnest($3::text[], $4::text[]) AS r(provider, payment_id)
	JOIN river_job j ON j.args ->> 'payment_id' = r.payment_id AND j.args ->> 'provider' = r.provider
		AND j.kind = 'reverse_payment'
ORDER BY 1`

const jobColumns = `j.id, j.kind, j.state::text, j.attempt, j.max_attempts, j.created_at, j.scheduled_at, j.attempted_at,
	j.finalized_at, coalesce(to_jsonb(j.errors), '[]'::jsonb)::text, j.args::text`

// loadJobs reads the jobs of events and the reversal jobs that name refs.
func loadJobs(ctx context.Context, q dbtx.DB, events, refs []ref) ([]*jobRow, error) {
	if len(events) == 0 && len(refs) == 0 {
		return nil, nil
	}
	ep, eid := splitRefs(events)
	rp, rid := splitRefs(refs)
	return collect(ctx, q, "jobs", jobsSQL, []any{ep, eid, rp, rid}, scanJob)
}

func scanJob(r pgx.Row) (*jobRow, error) {
	var j jobRow
	var errs, args string
	if err := r.Scan(&j.ID, &j.Kind, &j.State, &j.Attempt, &j.MaxAttempts, &j.CreatedAt, &j.ScheduledAt,
		&j.AttemptedAt, &j.FinalizedAt, &errs, &args); err != nil {
		return nil, err
	}
	var attempts []riverError
	if err := json.Unmarshal([]byte(errs), &attempts); err != nil {
		return nil, fmt.Errorf("job %d errors: %w", j.ID, err)
	}
	for _, a := range attempts {
		j.Errors = append(j.Errors, Attempt{Attempt: a.Attempt, At: a.At, Error: a.Error})
	}
	if err := json.Unmarshal([]byte(args), &j.Args); err != nil {
		return nil, fmt.Errorf("job %d args: %w", j.ID, err)
	}
	return &j, nil
}
