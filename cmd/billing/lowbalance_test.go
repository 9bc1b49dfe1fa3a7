package main

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdjustJudgesLowBalance: the processes' wallet store carries the
// low-balance observer with BILLING_LOW_BALANCE_DAYS: an operator's Sparks
// adjustment that leaves 2 days of a running Marquee is a
// wallet.low_balance under the default threshold (3 days), and not under
// a threshold of 1. The ledger (the events' invariant too) stays clean.
func TestAdjustJudgesLowBalance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	for _, c := range []struct {
		days string // BILLING_LOW_BALANCE_DAYS; "" is the default
		want int64  // wallet.low_balance events
	}{{"", 1}, {"1", 0}} {
		env := []string{"BILLING_DATABASE_URL=" + dbURL}
		if c.days != "" {
			env = append(env, "BILLING_LOW_BALANCE_DAYS="+c.days)
		}
		var player int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('d') RETURNING id`).Scan(&player))
		_, err := pool.Exec(ctx, `INSERT INTO marquees (player_id, name, plan, daily_price) VALUES ($1, 'm', 'standard', 100)`, player)
		require.NoError(t, err)
		p := strconv.FormatInt(player, 10)
		for i, amount := range []string{"500", "-300"} {
			runBilling(t, env, "wallet", "adjust", "--player", p, "--currency", "sparks", "--amount", amount,
				"--reason", "test", "--key", "lb-"+p+"-"+strconv.Itoa(i))
		}
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE player_id = $1 AND type = 'wallet.low_balance'`,
			player).Scan(&n))
		require.Equal(t, c.want, n, "BILLING_LOW_BALANCE_DAYS=%q", c.days)
	}
	require.Contains(t, runBilling(t, []string{"BILLING_DATABASE_URL=" + dbURL}, "ledger", "verify"), "ledger clean")
	require.Contains(t, runBillingFail(t, []string{"BILLING_DATABASE_URL=" + dbURL, "BILLING_LOW_BALANCE_DAYS=0"},
		"ledger", "verify"), "low_balance_days")
}
