package jobhold_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
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
	held, wrote          error
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
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers: workers, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), TestOnly: true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = client.Stop(stop)
	})
	subscribed, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	_, err = client.Insert(ctx, probeArgs{}, nil)
	require.NoError(t, err)

	var s seen
	select {
	case s = <-w.out:
	case <-time.After(2 * time.Minute):
		t.Fatal("the probe job never ran")
	}
	require.NoError(t, s.held, "the running attempt, on its own database")
	require.True(t, s.assigned, "the lock is a write: the commit waits for a synchronous standby")
	require.ErrorIs(t, s.otherAttempt, jobhold.ErrNotHeld, "another attempt of the job")
	require.ErrorIs(t, s.astray, jobhold.ErrNotHeld, "another database")

	select {
	case <-subscribed:
	case <-time.After(2 * time.Minute):
		t.Fatal("the probe job never completed")
	}
	err = inTx(ctx, pool, func(tx pgx.Tx) error { return jobhold.LockTx(ctx, tx, s.job) })
	require.ErrorIs(t, err, jobhold.ErrNotHeld, "a job that has ended")
}
