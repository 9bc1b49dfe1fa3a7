package enforcer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
)

// TestFundDayJobsAreGroupCommitted enqueues every kind of fund_day job at
// once and lets one worker run 64 at a time: each job gets the outcome it
// would get alone, each Marquee-day is debited at most once, and the
// debits share transactions (rows of one transaction share created_at, the
// transaction's start).
func TestFundDayJobsAreGroupCommitted(t *testing.T) {
	bothCompletes(t, testFundDayJobsAreGroupCommitted)
}

func testFundDayJobsAreGroupCommitted(t *testing.T) {
	t.Parallel()
	day := "2024-03-10"
	e := newEnv(t, 20, utc, time.Date(2024, 3, 10, 9, 30, 0, 0, utc))
	rich, poor, stopped, paid := groupCommitMarquees(t, e, day)
	var params []river.InsertManyParams
	for _, set := range [][]*enforcer.Marquee{rich, poor, stopped, paid} {
		for _, m := range set {
			params = append(params, river.InsertManyParams{Args: enforcer.FundDayArgs{MarqueeID: m.ID, Day: day}})
		}
	}
	missing := rich[len(rich)-1].ID + 1000
	params = append(params, river.InsertManyParams{Args: enforcer.FundDayArgs{MarqueeID: missing, Day: day}})
	inserter := e.client(clientOpts{})
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := inserter.InsertManyTx(e.ctx, tx, params)
		return err
	}))
	e.client(clientOpts{id: "w", svc: e.svc, maxWorkers: 64})
	e.waitIdle(30 * time.Second)

	end := time.Date(2024, 3, 11, 0, 0, 0, 0, utc)
	for _, m := range rich {
		jobs := e.fundDayJobs(m.ID)
		require.Len(t, jobs, 1)
		require.Equal(t, "completed", jobs[0].State)
		requireOutput(t, jobs[0], enforcer.OutcomeFunded)
		require.Equal(t, int64(1), e.debits(m.ID))
		require.Equal(t, int64(900), e.sparks(m.PlayerID))
		got := e.get(m)
		require.Equal(t, enforcer.StatusFunded, got.Status)
		require.True(t, got.PaidThrough.Equal(end), "paid through %v", got.PaidThrough)
	}
	for _, m := range poor {
		jobs := e.fundDayJobs(m.ID)
		require.Equal(t, "completed", jobs[0].State)
		require.Zero(t, jobs[0].Errors, "no retry storm")
		requireOutput(t, jobs[0], enforcer.OutcomeInsufficient)
		require.Zero(t, e.debits(m.ID))
		got := e.get(m)
		require.Equal(t, enforcer.StatusUnfunded, got.Status)
		require.Contains(t, got.LastError, "insufficient")
	}
	for _, m := range stopped {
		requireOutput(t, e.fundDayJobs(m.ID)[0], enforcer.OutcomeStopped)
		require.Zero(t, e.debits(m.ID))
	}
	for _, m := range paid {
		requireOutput(t, e.fundDayJobs(m.ID)[0], enforcer.OutcomeAlreadyPaid)
		require.Equal(t, int64(1), e.debits(m.ID))
	}
	var state string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT state::text FROM river_job WHERE kind = 'fund_day'
		AND (args->>'marquee_id')::bigint = $1`, missing).Scan(&state))
	require.Equal(t, "cancelled", state, "a missing Marquee cannot be funded by retrying")

	txs := e.count(`SELECT count(DISTINCT created_at) FROM wallet_transactions WHERE kind = 'funding'
		AND reference LIKE 'marquee:%:2024-03-10'`)
	debits := e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'funding' AND reference LIKE 'marquee:%:2024-03-10'`)
	require.Equal(t, int64(100+5), debits)
	require.Less(t, txs, debits/3, "%d debits in %d transactions: fund_day jobs were not group-committed", debits, txs)
}

// TestBatchFundsAMarqueesDaysInDayOrder: a batch holding several days of
// one Marquee, in any order, funds them in day order, the earliest in the
// shared transaction and each later one after it, alone; none is taken as
// already paid because a later day was paid first. (Jobs that arrive in
// different batches are funded in the order their batches lock the
// Marquee; the sweep enqueues a Marquee's next day only once its current
// one is paid.)
func TestBatchFundsAMarqueesDaysInDayOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5, utc, time.Date(2024, 3, 10, 9, 30, 0, 0, utc))
	m, other := e.marquee(e.player(1000)), e.marquee(e.player(1000))
	var days []enforcer.FundDayArgs
	for _, d := range []string{"2024-03-12", "2024-03-10", "2024-03-11"} {
		days = append(days, enforcer.FundDayArgs{MarqueeID: m.ID, Day: d})
	}
	days = append(days, enforcer.FundDayArgs{MarqueeID: other.ID, Day: "2024-03-10"})
	out, errs, err := e.svc.FundDays(e.ctx, days...)
	require.NoError(t, err)
	for i, d := range days {
		require.NoError(t, errs[i], d.Day)
		require.Equal(t, enforcer.OutcomeFunded, out[i].Outcome, "%d %s", d.MarqueeID, d.Day)
	}
	require.Equal(t, int64(3), e.debits(m.ID), "three days, one debit each")
	require.Equal(t, int64(700), e.sparks(m.PlayerID))
	require.True(t, e.get(m).PaidThrough.Equal(time.Date(2024, 3, 13, 0, 0, 0, 0, utc)))
	require.Equal(t, int64(1), e.debits(other.ID))
}

// TestADayAheadOfAnUnpaidDayIsNotDue: a day still to come is paid only
// once the day before it is. Paying it over an unpaid day would move
// paid_through past that day, and the gate would serve it for nothing
// (already_paid, no debit, once its own job came). Whether it comes by
// FundDay, in one batch with its earlier days, or as a fund_day job
// inserted by hand, it completes not_due with nothing debited, and is paid
// once the days before it are.
func TestADayAheadOfAnUnpaidDayIsNotDue(t *testing.T) {
	t.Parallel()
	for _, tz := range []*time.Location{utc, newYork} {
		t.Run(tz.String(), func(t *testing.T) {
			t.Parallel()
			// 2024-03-10 is New York's 23-hour day.
			e := newEnv(t, 5, tz, time.Date(2024, 3, 10, 9, 30, 0, 0, tz))
			m := e.marquee(e.player(1000))
			fund := func(days ...string) []enforcer.Outcome {
				t.Helper()
				var args []enforcer.FundDayArgs
				for _, d := range days {
					args = append(args, enforcer.FundDayArgs{MarqueeID: m.ID, Day: d})
				}
				out, errs, err := e.svc.FundDays(e.ctx, args...)
				require.NoError(t, err)
				got := make([]enforcer.Outcome, len(days))
				for i := range days {
					require.NoError(t, errs[i], days[i])
					got[i] = out[i].Outcome
				}
				return got
			}
			notDue, funded := enforcer.OutcomeNotDue, enforcer.OutcomeFunded

			require.Equal(t, []enforcer.Outcome{notDue}, fund("2024-03-11"), "tomorrow, today unpaid")
			require.Equal(t, []enforcer.Outcome{notDue, notDue}, fund("2024-03-12", "2024-03-11"), "one batch, today not in it")
			require.Zero(t, e.debits(m.ID))
			require.Nil(t, e.get(m).PaidThrough)
			require.False(t, enforcer.Funded(e.get(m), e.clock.Now()), "today is not served")

			inserter := e.client(clientOpts{})
			e.client(clientOpts{id: "w", svc: e.svc})
			_, err := inserter.Insert(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-11"}, nil)
			require.NoError(t, err)
			e.waitIdle(15 * time.Second)
			jobs := e.fundDayJobs(m.ID)
			require.Len(t, jobs, 1)
			require.Equal(t, "completed", jobs[0].State, "not due is an answer, not an error to retry")
			requireOutput(t, jobs[0], notDue)
			require.Zero(t, e.debits(m.ID))
			require.Zero(t, e.count(`SELECT count(*) FROM events`), "nothing to tell: nothing moved")

			require.Equal(t, []enforcer.Outcome{funded}, fund("2024-03-10"))
			require.Equal(t, []enforcer.Outcome{notDue}, fund("2024-03-12"), "the 11th is still unpaid")
			require.Equal(t, []enforcer.Outcome{funded, funded}, fund("2024-03-12", "2024-03-11"), "the 11th first, whatever the order")
			require.Equal(t, int64(3), e.debits(m.ID))
			require.Equal(t, int64(700), e.sparks(m.PlayerID))
			require.True(t, e.get(m).PaidThrough.Equal(time.Date(2024, 3, 13, 0, 0, 0, 0, tz)))
		})
	}
}

// TestTodayAndTomorrowRacedPayTodayFirst races today's and tomorrow's
// fundings of the same Marquees through two services (two processes'
// batches, so no batch orders them): tomorrow is paid only after today,
// never over it, each day at most once; funding tomorrow again afterwards
// pays what the race left not due.
func TestTodayAndTomorrowRacedPayTodayFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 24, utc, time.Date(2024, 3, 10, 9, 30, 0, 0, utc))
	other := enforcer.New(e.pool, e.wallet, enforcer.Options{TZ: utc, Now: e.clock.Now, Logger: quiet})
	services := []*enforcer.Service{e.svc, other}
	var marquees []*enforcer.Marquee
	for range 5 {
		marquees = append(marquees, e.marquee(e.player(1000)))
	}
	const perDay = 6
	type call struct {
		args enforcer.FundDayArgs
		res  *enforcer.FundResult
		err  error
	}
	var calls []*call
	for _, m := range marquees {
		for i := range 2 * perDay {
			calls = append(calls, &call{args: enforcer.FundDayArgs{MarqueeID: m.ID, Day: []string{"2024-03-10", "2024-03-11"}[i%2]}})
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			<-start
			c.res, c.err = services[(i/2)%2].FundDay(e.ctx, c.args)
		})
	}
	close(start)
	wg.Wait()

	funded := map[enforcer.FundDayArgs]int{}
	for _, c := range calls {
		require.NoError(t, c.err)
		require.Contains(t, []enforcer.Outcome{enforcer.OutcomeFunded, enforcer.OutcomeAlreadyPaid, enforcer.OutcomeNotDue},
			c.res.Outcome)
		if c.res.Outcome == enforcer.OutcomeFunded {
			funded[c.args]++
		}
		if c.args.Day == "2024-03-10" {
			require.NotEqual(t, enforcer.OutcomeNotDue, c.res.Outcome, "today is always due")
		}
	}
	debitID := func(m *enforcer.Marquee, day string) int64 {
		return e.count(`SELECT coalesce(max(id), 0) FROM wallet_transactions WHERE kind = 'funding' AND reference = $1`,
			fmt.Sprintf("marquee:%d:%s", m.ID, day))
	}
	for _, m := range marquees {
		today, tomorrow := enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-10"}, enforcer.FundDayArgs{MarqueeID: m.ID, Day: "2024-03-11"}
		require.Equal(t, 1, funded[today], "marquee %d: today paid once", m.ID)
		require.LessOrEqual(t, funded[tomorrow], 1)
		require.Equal(t, int64(1+funded[tomorrow]), e.debits(m.ID))
		end := time.Date(2024, 3, 11+funded[tomorrow], 0, 0, 0, 0, utc)
		require.True(t, e.get(m).PaidThrough.Equal(end), "marquee %d: paid through %v", m.ID, e.get(m).PaidThrough)
		if funded[tomorrow] == 1 {
			require.Greater(t, debitID(m, "2024-03-11"), debitID(m, "2024-03-10"), "marquee %d: tomorrow paid before today", m.ID)
		}

		res, err := e.svc.FundDay(e.ctx, tomorrow)
		require.NoError(t, err)
		require.Equal(t, map[bool]enforcer.Outcome{false: enforcer.OutcomeFunded, true: enforcer.OutcomeAlreadyPaid}[funded[tomorrow] == 1],
			res.Outcome)
		require.Equal(t, int64(2), e.debits(m.ID))
		require.Equal(t, int64(800), e.sparks(m.PlayerID))
	}
}

// groupCommitMarquees are 100 Marquees whose owners can pay, 10 whose
// owners cannot, 5 stopped ones and 5 already paid for day.
func groupCommitMarquees(t *testing.T, e *env, day string) (rich, poor, stopped, paid []*enforcer.Marquee) {
	t.Helper()
	for range 100 {
		rich = append(rich, e.marquee(e.player(1000)))
	}
	for range 10 {
		poor = append(poor, e.marquee(e.player(50)))
	}
	for range 5 {
		m := e.marquee(e.player(1000))
		_, err := e.pool.Exec(e.ctx, `UPDATE marquees SET desired_state = 'stopped', status = 'stopped' WHERE id = $1`, m.ID)
		require.NoError(t, err)
		stopped = append(stopped, m)
	}
	for range 5 {
		m := e.marquee(e.player(1000))
		_, err := e.svc.FundDay(e.ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: day})
		require.NoError(t, err)
		paid = append(paid, m)
	}
	return rich, poor, stopped, paid
}

// TestFailedBatchIsRetriedJobByJob fails every batch's first attempt after
// its debits, before commit: the batch rolls back as a whole, River retries
// each job, and each Marquee is debited exactly once.
func TestFailedBatchIsRetriedJobByJob(t *testing.T) {
	bothCompletes(t, testFailedBatchIsRetriedJobByJob)
}

func testFailedBatchIsRetriedJobByJob(t *testing.T) {
	t.Parallel()
	day := "2024-03-10"
	e := newEnv(t, 20, utc, time.Date(2024, 3, 10, 9, 30, 0, 0, utc))
	var ms []*enforcer.Marquee
	var params []river.InsertManyParams
	for range 30 {
		m := e.marquee(e.player(1000))
		ms = append(ms, m)
		params = append(params, river.InsertManyParams{Args: enforcer.FundDayArgs{MarqueeID: m.ID, Day: day}})
	}
	e.svc.SetHooks(func(ctx context.Context, tx pgx.Tx, job *river.Job[enforcer.FundDayArgs]) error {
		if job.Attempt == 1 {
			return errors.New("injected failure after the debits")
		}
		return nil
	}, nil)
	_, err := e.client(clientOpts{}).InsertMany(e.ctx, params)
	require.NoError(t, err)
	e.client(clientOpts{id: "w", svc: e.svc, maxWorkers: 32})
	e.waitIdle(30 * time.Second)
	for _, m := range ms {
		jobs := e.fundDayJobs(m.ID)
		require.Len(t, jobs, 1)
		require.Equal(t, "completed", jobs[0].State)
		require.Equal(t, 2, jobs[0].Attempt, "retried once by River")
		requireOutput(t, jobs[0], enforcer.OutcomeFunded)
		require.Equal(t, int64(1), e.debits(m.ID))
		require.Equal(t, int64(900), e.sparks(m.PlayerID))
	}
}
