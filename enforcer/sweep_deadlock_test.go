package enforcer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
)

// TestSweepRunsADeadlockVictimAgain builds the deadlock a sweep can meet
// with a funding batch, on purpose: another transaction holds the second of
// two queued fund_day jobs, the sweep's batch locks the first and waits for
// the second, and the other transaction then asks for the first. PostgreSQL
// aborts the sweep's batch (its deadlock check runs first); the sweep runs
// the batch again once the other transaction ends, and reports both jobs as
// already queued instead of failing.
func TestSweepRunsADeadlockVictimAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, utc, time.Date(2025, 3, 10, 12, 0, 0, 0, utc))
	p := e.player(1000)
	first, second := e.marquee(p).ID, e.marquee(p).ID
	inserter := e.client(clientOpts{})
	res, err := e.svc.Sweep(e.ctx, inserter, enforcer.SweepOptions{})
	require.NoError(t, err)
	require.Equal(t, 2, res.Enqueued)
	jobFirst, jobSecond := e.fundDayJobs(first)[0].ID, e.fundDayJobs(second)[0].ID

	// The sweep's backends check for a deadlock 3 s into a lock wait, the
	// holder's only after a minute: when the cycle closes within the
	// sweep's 3 s, the sweep is the one PostgreSQL aborts. A machine too
	// slow to close it in time makes the holder the victim instead, which
	// proves nothing, so the scenario then runs again.
	sweeper := enforcer.New(poolWithDeadlockTimeout(t, e.pool, "3s"), e.wallet,
		enforcer.Options{TZ: utc, Now: e.clock.Now, Logger: quiet, BatchSize: 100})
	deadlocksBefore := enforcer.SweepDeadlocks()
	ctx, cancel := context.WithTimeout(e.ctx, waitDeadline)
	defer cancel()
	for attempt := 1; ; attempt++ {
		require.LessOrEqual(t, attempt, 3, "the holder was the deadlock's victim every time: the sweep's check ran before the cycle closed")
		holder, err := e.pool.Begin(e.ctx)
		require.NoError(t, err)
		// A failing check must not leave the lock held: the sweep would
		// wait on it, and the pools' Close at cleanup on both.
		defer func() { _ = holder.Rollback(context.Background()) }()
		_, err = holder.Exec(e.ctx, `SET LOCAL deadlock_timeout = '1min'`)
		require.NoError(t, err)
		var holderPID int32
		require.NoError(t, holder.QueryRow(e.ctx, `SELECT pg_backend_pid()`).Scan(&holderPID))
		lockJob(t, holder, jobSecond)

		type outcome struct {
			res *enforcer.SweepResult
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			res, err := sweeper.Sweep(ctx, inserter, enforcer.SweepOptions{})
			done <- outcome{res, err}
		}()
		wait := func() outcome {
			select {
			case got := <-done:
				return got
			case <-ctx.Done():
				t.Fatal("the sweep did not return once the holder let go")
				return outcome{}
			}
		}
		require.Eventually(t, func() bool {
			return e.count(`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holderPID) == 1
		}, waitDeadline, 5*time.Millisecond, "the sweep never waited for the held job")
		// The sweep holds the first job while it waits for the second: the
		// order that lets the holder close a cycle.
		_, err = e.pool.Exec(e.ctx, `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE NOWAIT`, jobFirst)
		require.Equal(t, "55P03", pgCode(err), "the waiting sweep does not hold the first job: %v", err)

		_, err = holder.Exec(e.ctx, `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE`, jobFirst)
		if pgCode(err) == "40P01" {
			require.NoError(t, holder.Rollback(e.ctx))
			require.NoError(t, wait().err)
			continue
		}
		// The holder got the first job while holding the second: the
		// sweep's transaction was aborted, not finished.
		require.NoError(t, err)
		select {
		case got := <-done:
			t.Fatalf("the sweep returned while the holder held its jobs: %+v, %v", got.res, got.err)
		default:
		}
		require.NoError(t, holder.Rollback(e.ctx))
		got := wait()
		require.NoError(t, got.err, "a sweep batch chosen as a deadlock's victim fails the sweep")
		require.GreaterOrEqual(t, enforcer.SweepDeadlocks(), deadlocksBefore+1, "the aborted batch is counted")
		require.Equal(t, 2, got.res.Seen)
		require.Equal(t, 0, got.res.Enqueued)
		require.Equal(t, 2, got.res.AlreadyQueued)
		break
	}
	require.Equal(t, int64(2), e.count(`SELECT count(*) FROM river_job WHERE kind = 'fund_day'`))
}

// poolWithDeadlockTimeout opens a second pool on pool's database whose
// sessions wait timeout before checking a lock wait for a deadlock.
func poolWithDeadlockTimeout(t *testing.T, pool *pgxpool.Pool, timeout string) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config()
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = timeout
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func lockJob(t *testing.T, tx pgx.Tx, id int64) {
	t.Helper()
	_, err := tx.Exec(t.Context(), `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
