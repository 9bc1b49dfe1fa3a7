package webhook

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/internal/durable"
)

// claimBatchSQL is claimSQL over arrays, one element per candidate. A
// candidate's duplicates within the batch are counted on its row with it
// ($9 how many, $10 when the last arrived), and a candidate whose event is
// already claimed adds itself to them: every delivery of the batch is
// then a write its commit waits for (see claimSQL). The candidates come
// sorted by (provider, event_id), so two batches lock the rows they share
// in the same order and never deadlock.
const claimBatchSQL = `INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount, paid_currency,
	payload, claimed_at, duplicate_deliveries, last_delivery_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::bytea[],
	$8::timestamptz[], $9::bigint[], $10::timestamptz[])
ON CONFLICT (provider, event_id) DO UPDATE
	SET duplicate_deliveries = webhook_events.duplicate_deliveries + 1 + EXCLUDED.duplicate_deliveries,
		last_delivery_at = greatest(EXCLUDED.claimed_at, EXCLUDED.last_delivery_at)
RETURNING provider, event_id, xmax = 0`

// commitBatch claims the candidates of reqs and enqueues the fulfillment of
// the won completed payments in one transaction: BEGIN pipelined with the
// claim INSERT (one round trip), one InsertManyTx when a payment won, and
// COMMIT. Claims alone (no payment among them) need no transaction: their
// INSERT is one autocommit statement. It returns the keys won.
func (h *handler) commitBatch(ctx context.Context, reqs []claimReq, cands []int) (map[claimKey]struct{}, error) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	args, payments := claimArgs(reqs, cands)
	if !payments {
		var claimed map[claimKey]struct{}
		err := durable.Do(ctx, h.opts.Pool, func(conn *pgxpool.Conn) error {
			rows, err := conn.Query(ctx, claimBatchSQL, args...)
			claimed, err = collectClaims(rows, err, len(cands))
			return err
		})
		return claimed, err
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(claimBatchSQL, args...)
	br := h.opts.Pool.SendBatch(ctx, b)
	tx := br.Tx()
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	claimed, err := readClaims(br, len(cands))
	if err != nil {
		return nil, err
	}
	if jobs := fulfilJobs(reqs, cands, claimed); len(jobs) > 0 {
		if _, err := h.opts.River.InsertManyTx(ctx, tx, jobs); err != nil {
			return nil, fmt.Errorf("webhook: enqueue %d fulfilments: %w", len(jobs), err)
		}
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return nil, fmt.Errorf("webhook: commit batch: %w", err)
	}
	return claimed, nil
}

// claimArgs are the claim INSERT's arrays, one element per candidate in
// (provider, event_id) order, and whether any candidate is a completed
// payment or a reversal (and so may enqueue a job).
func claimArgs(reqs []claimReq, cands []int) (args []any, payments bool) {
	n := len(cands)
	var (
		providers, ids, types = make([]string, n), make([]string, n), make([]string, n)
		orders, amounts       = make([]*int64, n), make([]*int64, n)
		currencies            = make([]*string, n)
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
		payments = payments || jobArgs(r.ev) != nil
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
	return []any{providers, ids, types, orders, amounts, currencies, payloads, ats, dups, lastDups}, payments
}

// readClaims reads the results of the batch BEGIN; claim INSERT, and closes
// it (after which its transaction may be used).
func readClaims(br pgx.BatchResults, n int) (map[claimKey]struct{}, error) {
	_, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("webhook: begin batch: %w", err)
	}
	rows, err := br.Query()
	claimed, err := collectClaims(rows, err, n)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("webhook: batch claim: %w", cerr)
	}
	return claimed, err
}

// collectClaims reads the keys the claim INSERT returned.
func collectClaims(rows pgx.Rows, err error, n int) (map[claimKey]struct{}, error) {
	if err != nil {
		return nil, fmt.Errorf("webhook: batch claim: %w", err)
	}
	claimed := make(map[claimKey]struct{}, n)
	var k claimKey
	var won bool
	_, err = pgx.ForEachRow(rows, []any{&k.provider, &k.eventID, &won}, func() error {
		if won {
			claimed[k] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: batch claim: %w", err)
	}
	return claimed, nil
}

// fulfilJobs are the fulfill_order jobs of the won completed payments.
func fulfilJobs(reqs []claimReq, cands []int, claimed map[claimKey]struct{}) []river.InsertManyParams {
	var jobs []river.InsertManyParams
	for _, i := range cands {
		r := reqs[i]
		if _, won := claimed[r.key()]; won && jobArgs(r.ev) != nil {
			jobs = append(jobs, river.InsertManyParams{Args: jobArgs(r.ev), InsertOpts: &river.InsertOpts{Metadata: r.meta}})
		}
	}
	return jobs
}
