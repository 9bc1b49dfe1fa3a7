package enforcer_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
)

// TestFundDayByHandConcurrently works the same Marquee-day 20 times at once,
// outside River: one debit, 19 answers that it is already paid.
func TestFundDayByHandConcurrently(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 10, 9, 30, 0, 0, utc)
	e := newEnv(t, 24, utc, now)
	p := e.player(1000)
	m := e.marquee(p)

	const n = 20
	results := make([]*enforcer.FundResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"})
		}()
	}
	close(start)
	wg.Wait()
	outcomes := map[enforcer.Outcome]int{}
	for i := range n {
		require.NoError(t, errs[i])
		outcomes[results[i].Outcome]++
	}
	require.Equal(t, map[enforcer.Outcome]int{enforcer.OutcomeFunded: 1, enforcer.OutcomeAlreadyPaid: n - 1}, outcomes)
	require.Equal(t, int64(1), e.debits(m.ID))
	require.Equal(t, int64(900), e.sparks(p))
	got := e.get(m)
	require.Equal(t, enforcer.StatusFunded, got.Status)
	require.True(t, got.PaidThrough.Equal(time.Date(2024, 3, 11, 0, 0, 0, 0, utc)))
}

// TestFundDayEnqueuedTwentyTimes inserts the same fund_day job 20 times at
// once: one job, one debit; after it completed, enqueueing again is allowed
// and does not debit again.
func TestFundDayEnqueuedTwentyTimes(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 10, 9, 30, 0, 0, utc)
	e := newEnv(t, 30, utc, now)
	p := e.player(1000)
	m := e.marquee(p)
	inserter := e.client(clientOpts{})

	enqueue := func() (inserted int) {
		const n = 20
		var wg sync.WaitGroup
		var fresh atomic.Int64
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
					res, err := enforcer.EnqueueFundDayTx(e.ctx, tx, inserter, m.ID, e.clock.Now(), e.tz)
					if err == nil && !res.UniqueSkippedAsDuplicate {
						fresh.Add(1)
					}
					return err
				})
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		return int(fresh.Load())
	}
	require.Equal(t, 1, enqueue())
	jobs := e.fundDayJobs(m.ID)
	require.Len(t, jobs, 1)
	require.Equal(t, "available", jobs[0].State)
	require.Equal(t, "2024-03-10", jobs[0].Day)

	e.client(clientOpts{id: "w", svc: e.svc})
	e.waitIdle(15 * time.Second)
	require.Equal(t, int64(1), e.debits(m.ID))
	requireOutput(t, e.fundDayJobs(m.ID)[0], enforcer.OutcomeFunded)

	// Completed jobs do not count for uniqueness (so an unfunded day can be
	// retried after a top-up): with the worker running, a burst may insert
	// again once the previous job completed; each takes the fast path.
	again := enqueue()
	require.GreaterOrEqual(t, again, 1)
	e.waitIdle(15 * time.Second)
	jobs = e.fundDayJobs(m.ID)
	require.Len(t, jobs, 1+again)
	for _, j := range jobs[1:] {
		require.Equal(t, "completed", j.State)
		requireOutput(t, j, enforcer.OutcomeAlreadyPaid)
	}
	require.Equal(t, int64(1), e.debits(m.ID))
	require.Equal(t, int64(900), e.sparks(p))
}

// TestFundDayFailureAfterPostIsRetried fails the first attempt after the
// wallet post, before commit: River retries it, and it debits once. On the
// commit path, the job is completed inside the debit's transaction.
func TestFundDayFailureAfterPostIsRetried(t *testing.T) {
	bothCompletes(t, testFundDayFailureAfterPostIsRetried)
}

func testFundDayFailureAfterPostIsRetried(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 10, 9, 30, 0, 0, utc)
	e := newEnv(t, 20, utc, now)
	p := e.player(1000)
	m := e.marquee(p)

	var attempts atomic.Int32
	var checked atomic.Bool
	e.svc.SetHooks(func(ctx context.Context, tx pgx.Tx, job *river.Job[enforcer.FundDayArgs]) error {
		attempts.Add(1)
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM wallet_transactions WHERE kind = 'funding'`).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return errors.New("debit not visible after the post")
		}
		if job.Attempt == 1 {
			return errors.New("injected failure after the post")
		}
		return nil
	}, func(ctx context.Context, tx pgx.Tx, job *river.Job[enforcer.FundDayArgs]) error {
		// Inside the transaction: the job is completed and the debit made;
		// outside it, neither is visible until the commit.
		var inside, outside string
		var outsideDebits int
		if err := tx.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1`, job.ID).Scan(&inside); err != nil {
			return err
		}
		if err := e.pool.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1`, job.ID).Scan(&outside); err != nil {
			return err
		}
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM wallet_transactions WHERE kind = 'funding'`).Scan(&outsideDebits); err != nil {
			return err
		}
		if inside == "completed" && outside == "running" && outsideDebits == 0 {
			checked.Store(true)
		}
		return nil
	})
	w := e.client(clientOpts{id: "w", svc: e.svc})
	_, err := w.Insert(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"}, nil)
	require.NoError(t, err)
	e.waitIdle(20 * time.Second)

	jobs := e.fundDayJobs(m.ID)
	require.Len(t, jobs, 1)
	require.Equal(t, "completed", jobs[0].State)
	require.Equal(t, 2, jobs[0].Attempt, "retried once by River")
	require.Equal(t, 1, jobs[0].Errors)
	requireOutput(t, jobs[0], enforcer.OutcomeFunded)
	require.Equal(t, int32(2), attempts.Load())
	require.True(t, checked.Load(), "job completed in the debit's transaction")
	require.Equal(t, int64(1), e.debits(m.ID))
	require.Equal(t, int64(900), e.sparks(p))
}

// TestFundedAt2359AndAgainAfterMidnight funds a Marquee a minute before the
// end of its day, then once more after midnight, in New York time.
func TestFundedAt2359AndAgainAfterMidnight(t *testing.T) {
	t.Parallel()
	for _, tz := range []*time.Location{utc, newYork} {
		t.Run(tz.String(), func(t *testing.T) {
			t.Parallel()
			// 2024-03-10 is New York's 23-hour day.
			e := newEnv(t, 20, tz, time.Date(2024, 3, 10, 23, 59, 0, 0, tz))
			p := e.player(1000)
			m := e.marquee(p)
			inserter := e.client(clientOpts{})
			e.client(clientOpts{id: "w", svc: e.svc})

			sweep := func() *enforcer.SweepResult {
				res, err := e.svc.Sweep(e.ctx, inserter, enforcer.SweepOptions{})
				require.NoError(t, err)
				e.waitIdle(15 * time.Second)
				return res
			}
			res := sweep()
			require.Equal(t, 1, res.Enqueued)
			require.Equal(t, "2024-03-10", res.Day)
			m = e.get(m)
			midnight := time.Date(2024, 3, 11, 0, 0, 0, 0, tz)
			require.True(t, m.PaidThrough.Equal(midnight), "paid through %v", m.PaidThrough)
			require.True(t, enforcer.Funded(m, e.clock.Now()))
			require.Zero(t, sweep().Seen, "paid through the end of the day")

			e.clock.Set(midnight.Add(30 * time.Second))
			require.False(t, enforcer.Funded(m, e.clock.Now()), "the paid day is over")
			res = sweep()
			require.Equal(t, 1, res.Enqueued)
			require.Equal(t, "2024-03-11", res.Day)
			m = e.get(m)
			require.True(t, m.PaidThrough.Equal(time.Date(2024, 3, 12, 0, 0, 0, 0, tz)))
			require.True(t, enforcer.Funded(m, e.clock.Now()))
			require.Zero(t, sweep().Seen)
			require.Equal(t, int64(2), e.debits(m.ID), "one debit per day")
			require.Equal(t, int64(800), e.sparks(p))
		})
	}
}

// TestInsufficientThenTopUp: without Sparks the Marquee is unfunded, the job
// completes without error (no retry storm); after a top-up the next sweep
// funds it, once.
func TestInsufficientThenTopUp(t *testing.T) { bothCompletes(t, testInsufficientThenTopUp) }

func testInsufficientThenTopUp(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 10, 8, 0, 0, 0, utc)
	e := newEnv(t, 20, utc, now)
	p := e.player(50)
	m := e.marquee(p)
	inserter := e.client(clientOpts{})
	e.client(clientOpts{id: "w", svc: e.svc})
	sweep := func() *enforcer.SweepResult {
		res, err := e.svc.Sweep(e.ctx, inserter, enforcer.SweepOptions{})
		require.NoError(t, err)
		e.waitIdle(15 * time.Second)
		return res
	}

	for i := range 3 { // three sweeps while broke: one quiet job each, no errors
		require.Equal(t, 1, sweep().Enqueued)
		got := e.get(m)
		require.Equal(t, enforcer.StatusUnfunded, got.Status)
		require.Contains(t, got.LastError, "insufficient")
		require.False(t, enforcer.Funded(got, e.clock.Now()))
		jobs := e.fundDayJobs(m.ID)
		require.Len(t, jobs, i+1)
		for _, j := range jobs {
			require.Equal(t, "completed", j.State)
			require.Equal(t, 1, j.Attempt)
			require.Zero(t, j.Errors)
			requireOutput(t, j, enforcer.OutcomeInsufficient)
		}
		e.clock.Set(e.clock.Now().Add(5 * time.Minute))
	}
	require.Zero(t, e.debits(m.ID))
	require.Equal(t, int64(50), e.sparks(p))

	e.credit(p, 100) // top-up later the same day
	require.Equal(t, 1, sweep().Enqueued)
	got := e.get(m)
	require.Equal(t, enforcer.StatusFunded, got.Status)
	require.Empty(t, got.LastError)
	require.True(t, enforcer.Funded(got, e.clock.Now()))
	require.True(t, got.PaidThrough.Equal(time.Date(2024, 3, 11, 0, 0, 0, 0, utc)))
	require.Zero(t, sweep().Seen)
	require.Equal(t, int64(1), e.debits(m.ID))
	require.Equal(t, int64(50), e.sparks(p))
}

// TestStoppedMarqueeIsNeitherSweptNorDebited.
func TestStoppedMarqueeIsNeitherSweptNorDebited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 6, utc, time.Date(2024, 3, 10, 8, 0, 0, 0, utc))
	p := e.player(1000)
	m := e.marquee(p)
	_, err := e.pool.Exec(e.ctx, `UPDATE marquees SET desired_state = 'stopped', status = 'stopped' WHERE id = $1`, m.ID)
	require.NoError(t, err)
	res, err := e.svc.Sweep(e.ctx, e.client(clientOpts{}), enforcer.SweepOptions{})
	require.NoError(t, err)
	require.Zero(t, res.Seen)
	fr, err := e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"})
	require.NoError(t, err)
	require.Equal(t, enforcer.OutcomeStopped, fr.Outcome)
	require.Zero(t, e.debits(m.ID))
	_, err = e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID + 1, Day: "2024-03-10"})
	require.ErrorIs(t, err, enforcer.ErrNotFound)
	_, err = e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "10/03/2024"})
	require.ErrorIs(t, err, enforcer.ErrInvalidDay)
}

func requireOutput(t *testing.T, j jobRow, want enforcer.Outcome) {
	t.Helper()
	var out enforcer.FundResult
	require.NoError(t, json.Unmarshal([]byte(j.Output), &out), "output %q", j.Output)
	require.Equal(t, want, out.Outcome)
}
