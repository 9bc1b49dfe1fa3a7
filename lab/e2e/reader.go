package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ledgerReader is Jepsen's bank-test reader: while the run is live it
// repeatedly sums every ledger entry per currency in one REPEATABLE READ
// snapshot. Double entry means every such sum is zero, in every snapshot.
type ledgerReader struct {
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	reads      atomic.Int64
	failures   atomic.Int64 // reads that could not run (e.g. during the PostgreSQL restart)
	mu         sync.Mutex
	violations []string
}

func startLedgerReader(ctx context.Context, pool *pgxpool.Pool) *ledgerReader {
	ctx, cancel := context.WithCancel(ctx)
	lr := &ledgerReader{cancel: cancel}
	lr.wg.Add(1)
	go func() {
		defer lr.wg.Done()
		for ctx.Err() == nil {
			if err := lr.readOnce(ctx, pool); err != nil && ctx.Err() == nil {
				lr.failures.Add(1)
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
	}()
	return lr
}

func (lr *ledgerReader) readOnce(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT currency, sum(amount)::bigint, count(*) FROM ledger_entries GROUP BY currency`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var cur string
			var sum, n int64
			if err := rows.Scan(&cur, &sum, &n); err != nil {
				return err
			}
			if sum != 0 {
				lr.mu.Lock()
				lr.violations = append(lr.violations, fmt.Sprintf("%s entries summed to %d over %d rows", cur, sum, n))
				lr.mu.Unlock()
			}
		}
		lr.reads.Add(1)
		return rows.Err()
	})
}

func (lr *ledgerReader) stop() {
	lr.cancel()
	lr.wg.Wait()
}
