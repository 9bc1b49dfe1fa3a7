package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/audit"
	"github.com/fibe-dev/billing/internal/audit/audittest"
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
		cmd := exec.Command(binPath, args...)
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
	}, 30*time.Second, 50*time.Millisecond)
	worker.stop(t, syscall.SIGTERM, 15*time.Second)
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
