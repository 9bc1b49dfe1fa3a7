package enforcer_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/kit/proctest"
)

// TestSweepThreeClientsAndTenManualSweeps: 500 Marquees, three River
// clients with the periodic sweep configured (one leader inserts it) and 10
// more sweeps at once: each Marquee is debited exactly once for the day and
// paid through its end.
func TestSweepThreeClientsAndTenManualSweeps(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 11, 3, 15, 0, 0, 0, newYork) // the 25-hour day
	e := newEnv(t, 50, newYork, now)

	const players, perPlayer = 125, 4
	var ids []int64
	var owners []int64
	for range players {
		p := e.player(1000)
		owners = append(owners, p)
		for range perPlayer {
			ids = append(ids, e.marquee(p).ID)
		}
	}

	var clients []*river.Client[pgx.Tx]
	for i := range 3 {
		workers := river.NewWorkers()
		svc := enforcer.New(e.pool, e.wallet, enforcer.Options{TZ: newYork, Now: e.clock.Now, Logger: quiet})
		periodic := enforcer.Register(workers, enforcer.WorkerOptions{Service: svc, Schedule: river.PeriodicInterval(time.Second)})
		require.Len(t, periodic, 1)
		clients = append(clients, e.client(clientOpts{id: fmt.Sprintf("worker-%d", i), workers: workers, periodic: periodic}))
	}

	var wg sync.WaitGroup
	results := make([]*enforcer.SweepResult, 10)
	errs := make([]error, 10)
	start := make(chan struct{})
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = e.svc.Sweep(e.ctx, clients[i%3], enforcer.SweepOptions{})
		}()
	}
	close(start)
	wg.Wait()
	for i := range 10 {
		require.NoError(t, errs[i])
		require.Equal(t, "2024-11-03", results[i].Day)
	}

	end := time.Date(2024, 11, 4, 0, 0, 0, 0, newYork)
	require.Eventually(t, func() bool {
		return e.count(`SELECT count(*) FROM marquees WHERE paid_through = $1`, end) == int64(len(ids))
	}, waitDeadline, 50*time.Millisecond)
	// Group-committed funding can finish before leader election does, so wait
	// for the leader's periodic sweep rather than expect it already ran: the
	// invariants below then also cover a sweep that arrives after funding.
	require.Eventually(t, func() bool {
		return e.count(`SELECT count(*) FROM river_job WHERE kind = 'enforcer_sweep' AND state = 'completed'`) > 0
	}, waitDeadline, 50*time.Millisecond, "the leader's periodic sweep ran")
	e.waitIdle(20 * time.Second)

	require.Equal(t, int64(len(ids)), e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'funding'`))
	for _, id := range ids {
		require.Equal(t, int64(1), e.debits(id), "marquee %d", id)
	}
	for _, p := range owners {
		require.Equal(t, int64(1000-perPlayer*100), e.sparks(p))
	}
	require.Equal(t, int64(len(ids)), e.count(`SELECT count(*) FROM marquees WHERE status = 'funded'`))
	require.Equal(t, int64(len(ids)), e.count(`SELECT count(*) FROM river_job WHERE kind = 'fund_day'
		AND metadata->'output'->>'outcome' = 'funded'`))
	require.Zero(t, e.count(`SELECT count(*) FROM river_job WHERE kind = 'fund_day'
		AND (state <> 'completed' OR coalesce(array_length(errors, 1), 0) > 0)`), "no failed fund_day job")
	n, err := enforcer.CountUnfunded(e.ctx, e.pool, e.clock.Now())
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestSweepPagesAndDeduplicates checks keyset paging with a small batch, the
// filter (stopped, paid) and that a second sweep finds everything queued.
func TestSweepPagesAndDeduplicates(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 10, 12, 0, 0, 0, utc)
	e := newEnv(t, 6, utc, now)
	p := e.player(50 * 100)
	_, err := e.pool.Exec(e.ctx, `INSERT INTO marquees (player_id, name, plan, daily_price)
		SELECT $1, 'm' || g, 'standard', 100 FROM generate_series(1, 250) g`, p)
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `UPDATE marquees SET desired_state = 'stopped' WHERE id % 10 = 0`)
	require.NoError(t, err)
	// Paid through today (id % 10 = 1) and through yesterday (id % 10 = 2).
	for id := int64(1); id <= 250; id++ {
		day := map[int64]string{1: "2024-03-10", 2: "2024-03-09"}[id%10]
		if day != "" {
			res, err := e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: id, Day: day})
			require.NoError(t, err)
			require.Equal(t, enforcer.OutcomeFunded, res.Outcome)
		}
	}
	inserter := e.client(clientOpts{})

	var progress []int
	res, err := e.svc.Sweep(e.ctx, inserter, enforcer.SweepOptions{Progress: func(r enforcer.SweepResult) {
		progress = append(progress, r.Seen)
	}})
	require.NoError(t, err)
	require.Equal(t, 200, res.Seen, "250 - 25 stopped - 25 paid through today")
	require.Equal(t, 200, res.Enqueued)
	require.Zero(t, res.AlreadyQueued)
	require.Equal(t, []int{100, 200}, progress, "batches of 100")
	require.Equal(t, int64(200), e.count(`SELECT count(DISTINCT args->>'marquee_id') FROM river_job
		WHERE kind = 'fund_day' AND args->>'day' = '2024-03-10' AND queue = 'funding'`))

	res, err = e.svc.Sweep(e.ctx, inserter, enforcer.SweepOptions{})
	require.NoError(t, err)
	require.Equal(t, 200, res.Seen)
	require.Zero(t, res.Enqueued)
	require.Equal(t, 200, res.AlreadyQueued)

	// An operator replaying another day enqueues that day's jobs.
	res, err = e.svc.Sweep(e.ctx, inserter, enforcer.SweepOptions{At: now.Add(-24 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, "2024-03-09", res.Day)
	require.Equal(t, 175, res.Enqueued, "paid through 03-10 or 03-11 covers 03-09")
	require.Equal(t, int64(375), e.count(`SELECT count(*) FROM river_job WHERE kind = 'fund_day'`))
}

// TestSweepHundredThousand sweeps 100,000 Marquees (skipped with -short),
// under the race detector too: the time goes to PostgreSQL, so a second
// build without -race for its full size would cost more than it saves
// (docs/testing.md).
func TestSweepHundredThousand(t *testing.T) {
	proctest.Slow(t, "sweeps 100,000 Marquees")
	t.Parallel()
	now := time.Date(2024, 3, 10, 12, 0, 0, 0, utc)
	e := newEnv(t, 6, utc, now)
	p := e.player(0)
	const n = 100_000
	_, err := e.pool.Exec(e.ctx, `INSERT INTO marquees (player_id, name, plan, daily_price)
		SELECT $1, 'm' || g, 'standard', 100 FROM generate_series(1, $2) g`, p, n)
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `ANALYZE marquees`)
	require.NoError(t, err)
	svc := enforcer.New(e.pool, e.wallet, enforcer.Options{TZ: utc, Now: e.clock.Now, Logger: quiet})
	res, err := svc.Sweep(e.ctx, e.client(clientOpts{}), enforcer.SweepOptions{})
	require.NoError(t, err)
	require.Equal(t, n, res.Seen)
	require.Equal(t, n, res.Enqueued)
	require.Equal(t, int64(n), e.count(`SELECT count(*) FROM river_job WHERE kind = 'fund_day'`))
	t.Logf("sweep+enqueue of %d Marquees took %v (race detector: %v)", n, res.Took, raceEnabled)
}

// TestSweepDryRun: a dry run pages the same Marquees as a sweep, says which
// it would enqueue and which are queued already, and inserts nothing.
func TestSweepDryRun(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 10, 12, 0, 0, 0, utc)
	e := newEnv(t, 6, utc, now)
	p := e.player(50 * 100)
	_, err := e.pool.Exec(e.ctx, `INSERT INTO marquees (player_id, name, plan, daily_price)
		SELECT $1, 'm' || g, 'standard', 100 FROM generate_series(1, 150) g`, p)
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `UPDATE marquees SET desired_state = 'stopped' WHERE id % 10 = 0`)
	require.NoError(t, err)
	inserter := e.client(clientOpts{})
	var planned []int64
	dry := enforcer.SweepOptions{DryRun: true, Planned: func(ids []int64) { planned = append(planned, ids...) }}
	res, err := e.svc.Sweep(e.ctx, inserter, dry)
	require.NoError(t, err)
	require.Equal(t, enforcer.SweepResult{Day: "2024-03-10", Seen: 135, Enqueued: 135, Took: res.Took}, *res)
	require.Len(t, planned, 135)
	require.Zero(t, e.count(`SELECT count(*) FROM river_job`), "a dry run enqueues nothing")

	// Half of them queued for real (odd ids); the dry run then plans the rest.
	_, err = e.svc.Sweep(e.ctx, inserter, enforcer.SweepOptions{})
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `DELETE FROM river_job WHERE (args->>'marquee_id')::bigint % 2 = 0`)
	require.NoError(t, err)
	queued := e.count(`SELECT count(*) FROM river_job`)
	planned = nil
	res, err = e.svc.Sweep(e.ctx, inserter, dry)
	require.NoError(t, err)
	require.Equal(t, 135, res.Seen)
	require.Equal(t, int(queued), res.AlreadyQueued)
	require.Equal(t, 135-int(queued), res.Enqueued)
	require.Len(t, planned, res.Enqueued)
	for _, id := range planned {
		require.Zero(t, id%2, "only the Marquees whose job is not queued: %d", id)
	}
	require.Equal(t, queued, e.count(`SELECT count(*) FROM river_job`), "still nothing enqueued")
}

// A sweep fails only while the database does. Its retries must outlast a
// failover on a loaded machine (the chaos run's double failure once
// discarded a sweep that had River's default backoff and 3 attempts), and
// each wait must stay short, so the day is swept soon after the database
// is back.
func TestSweepRetriesOutlastAFailover(t *testing.T) {
	t.Parallel()
	w := &enforcer.SweepWorker{}
	maxAttempts := enforcer.SweepArgs{}.InsertOpts().MaxAttempts
	var waited time.Duration
	for attempt := 1; attempt < maxAttempts; attempt++ {
		before := time.Now()
		wait := w.NextRetry(&river.Job[enforcer.SweepArgs]{JobRow: &rivertype.JobRow{Attempt: attempt}}).Sub(before)
		require.LessOrEqual(t, wait, time.Minute+time.Second, "attempt %d waits too long", attempt)
		require.Positive(t, wait)
		waited += wait
	}
	require.GreaterOrEqual(t, waited, 3*time.Minute, "a sweep's retries end before a slow failover does")
}
