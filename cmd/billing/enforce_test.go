package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

// TestEnforceOnce runs `billing enforce --once` as an operator would: it
// enqueues one fund_day job per unpaid running Marquee for the day of --at,
// a second run finds them queued, and a worker process then funds them.
func TestEnforceOnce(t *testing.T) {
	t.Parallel()
	require.Equal(t, jobs.QueueFunding, enforcer.QueueFunding, "fund_day jobs go to the worker's funding queue")
	ctx := context.Background()
	dbURL, pool := newDB(t)
	w := wallet.New(pool, wallet.Options{})
	var marquees []int64
	for i := range 3 {
		var player int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('p') RETURNING id`).Scan(&player))
		_, err := w.Credit(ctx, wallet.PostParams{PlayerID: player, Currency: wallet.Sparks, Amount: 1000,
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("seed:%d", i))})
		require.NoError(t, err)
		m, err := enforcer.CreateMarquee(ctx, pool, enforcer.DefaultPlans(), enforcer.CreateParams{PlayerID: player, Name: "m", Plan: "standard"})
		require.NoError(t, err)
		marquees = append(marquees, m.ID)
	}
	env := []string{"BILLING_DATABASE_URL=" + dbURL, "BILLING_LOG_FORMAT=json", "BILLING_SERVICE_DAY_TZ=America/New_York"}

	// 03:00 UTC on 2024-03-11 is still 2024-03-10 in New York.
	out := runBilling(t, env, "enforce", "--once", "--at", "2024-03-11T03:00:00Z")
	require.Regexp(t, `^enforce: day=2024-03-10 seen=3 enqueued=3 already_queued=0 took=\S+\n$`, out)
	out = runBilling(t, env, "enforce", "--once", "--at", "2024-03-11T03:00:00Z")
	require.Regexp(t, `^enforce: day=2024-03-10 seen=3 enqueued=0 already_queued=3 took=\S+\n$`, out)
	out = runBilling(t, env, "enforce", "--once", "--at", "2024-03-11T03:00:00Z", "--json")
	require.Regexp(t, `^\{"day":"2024-03-10","seen":3,"enqueued":0,"already_queued":3,"took_ms":\d+\}\n$`, out)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'fund_day'
		AND args->>'day' = '2024-03-10' AND queue = 'funding' AND state = 'available'`).Scan(&n))
	require.Equal(t, 3, n)

	for _, args := range [][]string{{"enforce"}, {"enforce", "--once", "--at", "yesterday"}} {
		cmd := exec.Command(billingBin(t), args...)
		cmd.Env = append(cmd.Environ(), env...)
		b, err := cmd.CombinedOutput()
		require.Error(t, err, "%v", args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(string(b)), "\n")+1, "one line: %s", b)
	}

	// A worker process works the jobs enforce enqueued. Its own periodic
	// sweep funds today at the same time, and a Marquee already paid through
	// today is (rightly) not charged again for a day before that: so each
	// 2024-03-10 job ends completed, with one debit or none, never two.
	worker := startProc(t, env, "worker")
	require.Eventually(t, func() bool {
		var done int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'fund_day'
			AND args->>'day' = '2024-03-10' AND state = 'completed'`).Scan(&done)
		return done == 3
	}, waitDeadline, 50*time.Millisecond)
	worker.stop(t, syscall.SIGTERM, waitDeadline)
	for _, id := range marquees {
		var keys int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wallet_transactions
			WHERE idempotency_key = $1`, wallet.FundingKey(id, "2024-03-10").String()).Scan(&keys))
		require.LessOrEqual(t, keys, 1)
		var debits int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wallet_transactions
			WHERE kind = 'funding' AND idempotency_key LIKE 'marquee:' || $1::bigint || ':%'`, id).Scan(&debits))
		require.GreaterOrEqual(t, debits, 1, "funded for today at least")
	}
	newYork, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	audittest.RequireClean(t, pool, audit.Options{TZ: newYork}) // the service-day zone of env
}

// TestEnforceRefusesFutureDay: --at a day after today (in the service-day
// zone, not UTC) is refused unless --allow-future; today and the past are not.
func TestEnforceRefusesFutureDay(t *testing.T) {
	t.Parallel()
	newYork, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	// 2024-03-11 01:00 UTC is still 2024-03-10 in New York.
	now := time.Date(2024, 3, 11, 1, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{{}, now, now.Add(-48 * time.Hour), time.Date(2024, 3, 11, 3, 59, 0, 0, time.UTC)} {
		require.NoError(t, checkSweepDay(at, now, newYork, false), "%s is today or before in New York", at)
	}
	tomorrow := time.Date(2024, 3, 11, 4, 0, 0, 0, time.UTC) // 00:00 on 2024-03-11 in New York (EDT)
	err = checkSweepDay(tomorrow, now, newYork, false)
	require.ErrorIs(t, err, errFutureDay)
	require.ErrorContains(t, err, "service day 2024-03-11, today is 2024-03-10 (America/New_York)")
	require.ErrorContains(t, err, "--allow-future")
	require.NoError(t, checkSweepDay(tomorrow, now, newYork, true))
}

// TestEnforceFutureDayAndDryRun runs the binary: a future --at is refused
// with nothing enqueued; --dry-run says what it would enqueue (and with
// --json which Marquees) and enqueues nothing, for any day; --allow-future
// then enqueues the future day.
func TestEnforceFutureDayAndDryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	var player int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('p') RETURNING id`).Scan(&player))
	var ids []string
	for range 2 {
		m, err := enforcer.CreateMarquee(ctx, pool, enforcer.DefaultPlans(), enforcer.CreateParams{PlayerID: player, Name: "m", Plan: "standard"})
		require.NoError(t, err)
		ids = append(ids, strconv.FormatInt(m.ID, 10))
	}
	env := []string{"BILLING_DATABASE_URL=" + dbURL, "BILLING_SERVICE_DAY_TZ=Pacific/Kiritimati"} // UTC+14: tomorrow comes early
	zone, err := time.LoadLocation("Pacific/Kiritimati")
	require.NoError(t, err)
	future := time.Now().In(zone).AddDate(0, 0, 2)
	at, day := future.Format(time.RFC3339), future.Format(enforcer.DayLayout)
	jobs := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&n))
		return n
	}

	code, out := runBillingExit(t, env, "enforce", "--once", "--at", at)
	require.Equal(t, 1, code)
	require.Contains(t, out, "--at names a service day after today")
	require.Contains(t, out, "service day "+day)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line: %s", out)
	require.Zero(t, jobs(), "a refused sweep enqueues nothing")

	out = runBilling(t, env, "enforce", "--once", "--at", at, "--dry-run")
	require.Regexp(t, `^enforce: dry run, nothing enqueued: day=`+day+` seen=2 would_enqueue=2 already_queued=0 took=\S+\n$`, out)
	var dry struct {
		Day          string   `json:"day"`
		DryRun       bool     `json:"dry_run"`
		WouldEnqueue int      `json:"would_enqueue"`
		Marquees     []string `json:"marquees"`
	}
	before := time.Now().In(zone).Format(enforcer.DayLayout)
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, "enforce", "--once", "--dry-run", "--json")), &dry))
	require.Contains(t, []string{before, time.Now().In(zone).Format(enforcer.DayLayout)}, dry.Day, "today")
	require.True(t, dry.DryRun)
	require.Equal(t, 2, dry.WouldEnqueue)
	require.Equal(t, ids, dry.Marquees)
	require.Zero(t, jobs(), "a dry run enqueues nothing")

	out = runBilling(t, env, "enforce", "--once", "--at", at, "--allow-future")
	require.Regexp(t, `^enforce: day=`+day+` seen=2 enqueued=2 already_queued=0 took=\S+\n$`, out)
	require.Equal(t, 2, jobs())
	out = runBilling(t, env, "enforce", "--once", "--at", at, "--dry-run")
	require.Regexp(t, ` would_enqueue=0 already_queued=2 `, out)
}
