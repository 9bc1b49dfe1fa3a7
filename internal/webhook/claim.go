package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/durable"
	"github.com/fibe-dev/billing/internal/telemetry"
)

// Default sizes of the claim batcher (Options.ClaimBatch, ClaimConcurrency).
const (
	DefaultClaimBatch       = 64
	DefaultClaimConcurrency = 2
)

// claimReq is one verified delivery waiting for its claim.
type claimReq struct {
	ev   *Event
	body []byte
	at   time.Time // claimed_at, taken when the delivery arrived
	meta []byte    // the delivery's trace context, for its fulfilment job's metadata
}

// claimKey is what webhook_events is UNIQUE on.
type claimKey struct{ provider, eventID string }

func (r claimReq) key() claimKey { return claimKey{r.ev.Provider, r.ev.ID} }

// hooks are seams for this package's tests (set through export_test.go);
// all nil in production.
type hooks struct {
	// queued is called by each delivery just before it joins a batch.
	queued func()
	// batch is called with the event ids of each batch before it runs.
	batch func(eventIDs []string)
}

// claim claims ev, and enqueues its fulfillment, in the next batch of
// concurrent claims. It reports whether this delivery won. The wait is
// bounded like a claim transaction, so a stuck database answers 503; the
// batch may still commit the claim then, and the provider's retry is
// answered as a duplicate.
func (h *handler) claim(ctx context.Context, ev *Event, body []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	ctx, span := telemetry.StartClaim(ctx, ev.Provider, ev.ID, ev.Type, orderID(ev))
	defer span.End()
	if h.opts.hooks.queued != nil {
		h.opts.hooks.queued()
	}
	return h.claims.Do(ctx, claimReq{ev: ev, body: body, at: h.opts.Now(), meta: telemetry.JobMetadata(ctx)})
}

// claimBatch is the groupcommit function of the claims: every candidate of
// the batch is claimed, and the won payments enqueued, in one transaction
// (see commitBatch). When that fails, each delivery is retried alone with
// claimOne, so one poison delivery fails only itself; the batch-level
// error is therefore always nil. A commit no standby confirmed
// (durable.ErrNotDurable) fails every delivery of the batch instead.
func (h *handler) claimBatch(ctx context.Context, reqs []claimReq) ([]bool, []error, error) {
	if h.opts.hooks.batch != nil {
		h.opts.hooks.batch(eventIDs(reqs))
	}
	won, errs := make([]bool, len(reqs)), make([]error, len(reqs))
	cands := candidates(reqs)
	claimed, err := h.commitBatch(ctx, reqs, cands)
	if errors.Is(err, durable.ErrNotDurable) {
		// Not one delivery's fault: the primary has no standby confirming
		// commits now, and each retried alone would only wait the same way.
		for i := range errs {
			errs[i] = err
		}
		return won, errs, nil
	}
	if err != nil {
		h.opts.Logger.Warn("webhook: batch claim failed, retrying its deliveries one by one",
			"deliveries", len(reqs), "error", err)
		h.claimEach(ctx, reqs, won, errs)
		return won, errs, nil
	}
	for _, i := range cands {
		_, won[i] = claimed[reqs[i].key()]
	}
	return won, errs, nil
}

// candidates returns the index of the first delivery of each (provider,
// event id) in reqs; the others are duplicates of it and lose.
func candidates(reqs []claimReq) []int {
	seen := make(map[claimKey]struct{}, len(reqs))
	out := make([]int, 0, len(reqs))
	for i, r := range reqs {
		if _, dup := seen[r.key()]; !dup {
			seen[r.key()] = struct{}{}
			out = append(out, i)
		}
	}
	return out
}

func eventIDs(reqs []claimReq) []string {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ev.ID
	}
	return ids
}

// claimEach runs every delivery of a failed batch alone, concurrently
// (each on its own connection, with its own timeout).
func (h *handler) claimEach(ctx context.Context, reqs []claimReq, won []bool, errs []error) {
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() { won[i], errs[i] = h.claimOne(ctx, reqs[i]) })
	}
	wg.Wait()
}

// claimSQL claims one delivery. A delivery of an event already claimed
// counts itself on the claim's row (duplicate_deliveries): that write is
// what makes even a duplicate's answer wait for the synchronous standby,
// so a 2xx never rests on a claim committed only on a primary since lost.
// xmax = 0 tells an inserted row (this delivery won) from an updated one.
const claimSQL = `INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount, paid_currency,
	payload, claimed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (provider, event_id) DO UPDATE
	SET duplicate_deliveries = webhook_events.duplicate_deliveries + 1, last_delivery_at = EXCLUDED.claimed_at
RETURNING xmax = 0`

// claimOne is the single-delivery path, the fallback and the reference of
// a batch: it inserts the event row and, for a won completed payment, its
// fulfil job, in one transaction. It reports whether this delivery won.
func (h *handler) claimOne(ctx context.Context, r claimReq) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	ev := r.ev
	args := []any{ev.Provider, ev.ID, ev.Type, nil, nil, nil, r.body, r.at}
	if p := ev.Payment; p != nil {
		args[3], args[4], args[5] = p.OrderID, p.Amount, p.Currency
	}
	job := jobArgs(ev)
	if job == nil {
		// Nothing else to commit with it: a single autocommit statement.
		var won bool
		err := durable.Do(ctx, h.opts.Pool, func(conn *pgxpool.Conn) (err error) {
			won, err = claimed(conn.QueryRow(ctx, claimSQL, args...))
			return err
		})
		return won, err
	}
	tx, err := h.opts.Pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("webhook: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	won, err := claimed(tx.QueryRow(ctx, claimSQL, args...))
	if err != nil {
		return false, err
	}
	if won {
		if _, err = h.opts.River.InsertTx(ctx, tx, job, &river.InsertOpts{Metadata: r.meta}); err != nil {
			return false, fmt.Errorf("webhook: enqueue fulfilment of %s event %q: %w", ev.Provider, ev.ID, err)
		}
	}
	// A duplicate commits its count too: see claimSQL.
	if err := durable.Commit(ctx, tx); err != nil {
		return false, fmt.Errorf("webhook: commit claim: %w", err)
	}
	return won, nil
}

// claimed reads claimSQL's answer: whether this delivery inserted the row.
func claimed(row pgx.Row) (bool, error) {
	var won bool
	if err := row.Scan(&won); err != nil {
		return false, fmt.Errorf("webhook: claim: %w", err)
	}
	return won, nil
}

// orderID is the order a payment event names, 0 for other events.
func orderID(ev *Event) int64 {
	if ev.Payment == nil {
		return 0
	}
	return ev.Payment.OrderID
}

// jobArgs is the job a won claim of ev enqueues in the claim's
// transaction: a fulfilment for a completed payment, a reversal for a
// refund or dispute, nil for an event we only acknowledge.
func jobArgs(ev *Event) river.JobArgs {
	switch {
	case ev.Payment != nil:
		return fulfillment.FulfillOrderArgs{
			OrderID:      ev.Payment.OrderID,
			EventID:      ev.ID,
			Provider:     ev.Provider,
			PaidAmount:   ev.Payment.Amount,
			PaidCurrency: ev.Payment.Currency,
			PaymentID:    ev.Payment.PaymentID,
			Aliases:      ev.Payment.Aliases,
		}
	case ev.Reversal != nil:
		r := ev.Reversal
		return fulfillment.ReversePaymentArgs{Provider: ev.Provider, EventID: ev.ID, PaymentID: r.PaymentID,
			ReversalID: r.ReversalID, ReversalKind: r.Kind, State: r.State, Amount: r.Amount, Currency: r.Currency,
			OtherRef: r.OtherRef}
	}
	return nil
}
