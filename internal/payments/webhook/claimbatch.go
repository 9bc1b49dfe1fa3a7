package webhook

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/internal/payments/outcome"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

// claimBatchSQL is THE claim, over arrays, one element per candidate: a
// single delivery is a batch of one. A candidate's duplicates within the
// batch are counted on its row with it ($9 how many, $10 when the last
// arrived), and a candidate whose event is already claimed adds itself to
// them: every delivery of the batch is then a write its commit waits for
// (a 2xx never rests on a claim committed only on a primary since lost).
// A redrive (an operator's, not a delivery) passes -1 duplicates: it
// counts nothing and moves no delivery time. The candidates come sorted by
// (provider, event_id), so two batches lock the rows they share in the
// same order and never deadlock. An event with no job (a type we only
// acknowledge, or one refused as it was read) is claimed with its outcome
// ($11, $12). xmax = 0 tells an inserted row (the delivery won) from an
// updated one.
const claimBatchSQL = `INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount, paid_currency,
	payload, claimed_at, duplicate_deliveries, last_delivery_at, outcome, outcome_reason, outcome_at, payment_ref)
SELECT c.provider, c.event_id, c.event_type, c.order_id, c.paid_amount, c.paid_currency, c.payload, c.claimed_at,
	c.dups, c.last_dup, c.outcome, c.reason, CASE WHEN c.outcome IS NOT NULL THEN c.claimed_at END, c.payment_ref
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::bytea[],
	$8::timestamptz[], $9::bigint[], $10::timestamptz[], $11::text[], $12::text[], $13::text[])
	AS c(provider, event_id, event_type, order_id, paid_amount, paid_currency, payload, claimed_at, dups, last_dup,
		outcome, reason, payment_ref)
ON CONFLICT (provider, event_id) DO UPDATE
	SET duplicate_deliveries = webhook_events.duplicate_deliveries + 1 + EXCLUDED.duplicate_deliveries,
		last_delivery_at = CASE WHEN EXCLUDED.duplicate_deliveries < 0 THEN webhook_events.last_delivery_at
			ELSE greatest(EXCLUDED.claimed_at, EXCLUDED.last_delivery_at) END
RETURNING provider, event_id, xmax = 0`

// liveJob is the condition that event w has a River job still to run:
// the state of a job that will (again) call its worker.
const liveJob = `EXISTS (SELECT 1 FROM river_job j WHERE j.kind IN ('fulfill_order', 'reverse_payment')
	AND j.args ->> 'event_id' = w.event_id AND j.args ->> 'provider' = w.provider
	AND j.state IN ('available', 'pending', 'scheduled', 'running', 'retryable'))`

// orphansSQL finds, among the candidates ($1, $2), the claimed events
// with no outcome and no live job: their job was cancelled or discarded
// (or lost) before it decided them. It runs after the claim INSERT in the
// same transaction, so each row is locked by this transaction and read in
// a snapshot taken after the lock: a concurrent redelivery that re-enqueued
// its job has committed it by then, and is seen. Rows this batch inserted
// are in the answer too (no job yet); the caller skips the won.
const orphansSQL = `SELECT w.provider, w.event_id FROM unnest($1::text[], $2::text[]) AS c(provider, event_id)
JOIN webhook_events w ON w.provider = c.provider AND w.event_id = c.event_id
WHERE w.outcome IS NULL AND NOT ` + liveJob

// batchResult is what one claim transaction did: the keys it won, and
// those it re-enqueued (orphans, claimed earlier).
type batchResult struct {
	won, redriven map[claimKey]struct{}
}

// commitBatch claims the candidates of reqs in one transaction: BEGIN
// pipelined with the claim INSERT and the orphan check (one round trip),
// one InsertManyTx of the jobs (won events', and re-enqueued orphans'),
// the outcome of an orphan that needs no job, and COMMIT.
func (h *handler) commitBatch(ctx context.Context, reqs []claimReq, cands []int) (batchResult, error) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	args, keys := claimArgs(reqs, cands)
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(claimBatchSQL, args...)
	b.Queue(orphansSQL, keys...)
	br := h.opts.Pool.SendBatch(ctx, b)
	tx := br.Tx()
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	res, orphans, err := readClaims(br, len(cands))
	if err != nil {
		return batchResult{}, err
	}
	jobs := fulfilJobs(reqs, cands, res.won)
	redo, err := h.redriveJobs(ctx, tx, reqs, cands, res, orphans)
	if err != nil {
		return batchResult{}, err
	}
	if jobs = append(jobs, redo...); len(jobs) > 0 {
		if _, err := h.opts.River.InsertManyTx(ctx, tx, jobs); err != nil {
			return batchResult{}, fmt.Errorf("webhook: enqueue %d jobs: %w", len(jobs), err)
		}
	}
	if h.opts.hooks.beforeCommit != nil {
		h.opts.hooks.beforeCommit(ctx, tx)
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return batchResult{}, fmt.Errorf("webhook: commit claim: %w", err)
	}
	return res, nil
}

// claimArgs are the claim INSERT's arrays, one element per candidate in
// (provider, event_id) order, and the orphan check's (provider, event_id).
func claimArgs(reqs []claimReq, cands []int) (args, keys []any) {
	n := len(cands)
	var (
		providers, ids, types = make([]string, n), make([]string, n), make([]string, n)
		orders, amounts       = make([]*int64, n), make([]*int64, n)
		currencies, outcomes  = make([]*string, n), make([]*string, n)
		reasons, paymentRefs  = make([]*string, n), make([]*string, n)
		payloads              = make([][]byte, n)
		ats                   = make([]time.Time, n)
		dups                  = make([]int64, n)
		lastDups              = make([]*time.Time, n)
	)
	sorted := slices.Clone(cands)
	slices.SortFunc(sorted, func(a, b int) int {
		return cmp.Or(strings.Compare(reqs[a].ev.Provider, reqs[b].ev.Provider), strings.Compare(reqs[a].ev.ID, reqs[b].ev.ID))
	})
	slot := make(map[claimKey]int, n)
	for j, i := range sorted {
		r := reqs[i]
		slot[r.key()] = j
		providers[j], ids[j], types[j], payloads[j], ats[j] = r.ev.Provider, r.ev.ID, r.ev.Type, r.body, r.at
		if p := r.ev.Payment; p != nil {
			orders[j], amounts[j], currencies[j] = &p.OrderID, &p.Amount, &p.Currency
		}
		if res := claimOutcome(r.ev); res != nil {
			outcomes[j], reasons[j] = &res.Outcome, nilIfEmpty(res.Reason)
		}
		paymentRefs[j] = nilIfEmpty(paymentRef(r.ev))
		if r.redrive {
			dups[j] = -1
		}
	}
	// The deliveries that are not candidates are duplicates of one.
	for i, r := range reqs {
		if j := slot[r.key()]; i != sorted[j] {
			dups[j]++
			if lastDups[j] == nil || r.at.After(*lastDups[j]) {
				lastDups[j] = &reqs[i].at
			}
		}
	}
	args = []any{providers, ids, types, orders, amounts, currencies, payloads, ats, dups, lastDups, outcomes, reasons,
		paymentRefs}
	return args, []any{providers, ids}
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// readClaims reads the results of the batch BEGIN; claim INSERT; orphan
// check, and closes it (after which its transaction may be used).
func readClaims(br pgx.BatchResults, n int) (batchResult, []claimKey, error) {
	res := batchResult{won: make(map[claimKey]struct{}, n), redriven: map[claimKey]struct{}{}}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return res, nil, fmt.Errorf("webhook: begin claim: %w", err)
	}
	rows, err := br.Query()
	if err == nil {
		err = collectClaims(rows, res.won)
	}
	var orphans []claimKey
	if err == nil {
		rows, err = br.Query()
		if err == nil {
			orphans, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimKey, error) {
				var k claimKey
				return k, r.Scan(&k.provider, &k.eventID)
			})
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return res, nil, fmt.Errorf("webhook: claim: %w", err)
	}
	return res, orphans, nil
}

// collectClaims reads the keys the claim INSERT returned into won.
func collectClaims(rows pgx.Rows, won map[claimKey]struct{}) error {
	var k claimKey
	var inserted bool
	_, err := pgx.ForEachRow(rows, []any{&k.provider, &k.eventID, &inserted}, func() error {
		if inserted {
			won[k] = struct{}{}
		}
		return nil
	})
	return err
}

// fulfilJobs are the jobs of the won events that have one.
func fulfilJobs(reqs []claimReq, cands []int, won map[claimKey]struct{}) []river.InsertManyParams {
	var jobs []river.InsertManyParams
	for _, i := range cands {
		r := reqs[i]
		if _, ok := won[r.key()]; ok && jobArgs(r.ev) != nil {
			jobs = append(jobs, river.InsertManyParams{Args: jobArgs(r.ev), InsertOpts: &river.InsertOpts{Metadata: r.meta}})
		}
	}
	return jobs
}

// redriveJobs are the jobs of the orphans among the candidates not won
// here, read from each one's stored payload (the claim is the referee: the
// payload it stored is the event). An orphan whose payload calls for no
// job gets its outcome (ignored, or refused) in tx instead.
func (h *handler) redriveJobs(ctx context.Context, tx pgx.Tx, reqs []claimReq, cands []int, res batchResult,
	orphans []claimKey) ([]river.InsertManyParams, error) {
	byKey := make(map[claimKey]claimReq, len(cands))
	for _, i := range cands {
		byKey[reqs[i].key()] = reqs[i]
	}
	var jobs []river.InsertManyParams
	for _, k := range orphans {
		if _, won := res.won[k]; won {
			continue
		}
		r := byKey[k]
		ev, err := h.storedEvent(ctx, tx, k, r.ev)
		if err != nil {
			return nil, err
		}
		res.redriven[k] = struct{}{}
		if job := jobArgs(ev); job != nil {
			jobs = append(jobs, river.InsertManyParams{Args: job, InsertOpts: &river.InsertOpts{Metadata: r.meta}})
			continue
		}
		if _, err := outcome.RecordTx(ctx, tx, k.provider, k.eventID, *claimOutcome(ev)); err != nil {
			return nil, err
		}
	}
	h.logRedriven(ctx, res.redriven)
	return jobs, nil
}
