package jobhold_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/platform/jobhold"
)

// The contract of the seam: in a real River client, a running job's
// attempt is held on its own database, as a write, and nowhere else:
// not with another attempt number, not on another database, not once the
// job has ended.

func TestMain(m *testing.M) { testdb.Main(m) }

type probeArgs struct{}

func (probeArgs) Kind() string { return "jobhold_probe" }

// seen is what the worker found while its job was running.
type seen struct {
	job                  *rivertype.JobRow
	held                 error
	otherAttempt, astray error
	assigned             bool
}

type probeWorker struct {
	river.WorkerDefaults[probeArgs]
	pool, other *pgxpool.Pool
	out         chan seen
}

func (w *probeWorker) Work(ctx context.Context, job *river.Job[probeArgs]) error {
	s := seen{job: job.JobRow}
	s.held = inTx(ctx, w.pool, func(tx pgx.Tx) error {
		if err := jobhold.LockTx(ctx, tx, job.JobRow); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned() IS NOT NULL`).Scan(&s.assigned)
	})
	other := *job.JobRow
	other.Attempt++
	s.otherAttempt = inTx(ctx, w.pool, func(tx pgx.Tx) error { return jobhold.LockTx(ctx, tx, &other) })
	s.astray = inTx(ctx, w.other, func(tx pgx.Tx) error { return jobhold.LockTx(ctx, tx, job.JobRow) })
	w.out <- s
	return nil
}

func inTx(ctx context.Context, pool *pgxpool.Pool, f func(pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	return f(tx)
}

func TestLockTxHoldsOnlyTheRunningAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, other := testdb.New(t), testdb.New(t)
	w := &probeWorker{pool: pool, other: other, out: make(chan seen, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, jobs := testkit.StartRiver(t, pool, testkit.RiverOptions{Workers: workers, Queues: map[string]int{river.QueueDefault: 1}})
	_, err := client.Insert(ctx, probeArgs{}, nil)
	require.NoError(t, err)

	var s seen
	select {
	case s = <-w.out:
	case <-time.After(testdb.WorkDeadline):
		t.Fatal("the probe job never ran")
	}
	require.NoError(t, s.held, "the running attempt, on its own database")
	require.True(t, s.assigned, "the lock is a write: the commit waits for a synchronous standby")
	require.ErrorIs(t, s.otherAttempt, jobhold.ErrNotHeld, "another attempt of the job")
	require.ErrorIs(t, s.astray, jobhold.ErrNotHeld, "another database")

	jobs.Wait(t, testkit.Kind("jobhold_probe"), 1, testkit.WaitOptions{Strict: true})
	err = inTx(ctx, pool, func(tx pgx.Tx) error { return jobhold.LockTx(ctx, tx, s.job) })
	require.ErrorIs(t, err, jobhold.ErrNotHeld, "a job that has ended")
}
