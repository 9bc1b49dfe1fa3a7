package audit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestRunComposesEveryCheck breaks one invariant of each domain behind the
// code's back (1: ledger, 4: funding, 5: fulfillment, 11: webhook, 9: a
// debt without its receivable entries) and
// expects Run to report each of them, and each through OnViolation.
func TestRunComposesEveryCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	audittest.RequireClean(t, pool, audit.Options{}) // an empty database is clean

	var player int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('p') RETURNING id`).Scan(&player))
	_, err := wallet.New(pool, wallet.Options{}).Credit(ctx, wallet.PostParams{PlayerID: player, Currency: wallet.Sparks,
		Amount: 500, Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("audit-test"), Account: wallet.AccountAdjustments})
	require.NoError(t, err)
	audittest.RequireClean(t, pool, audit.Options{})

	for _, sql := range []string{
		`UPDATE wallets SET balance = balance + 1 WHERE player_id = ` + itoa(player),
		`INSERT INTO marquees (player_id, name, plan, daily_price, paid_through)
			VALUES (` + itoa(player) + `, 'm', 'standard', 100, '2024-03-11T00:00:00Z')`,
		`INSERT INTO orders (player_id, sku, provider, amount, currency, mana, status, fulfilled_at, wallet_transaction_id)
			VALUES (` + itoa(player) + `, 'mana_1000', 'stripe', 999, 'usd', 1000, 'fulfilled', now(), 999999)`,
		`INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount, paid_currency, payload)
			VALUES ('stripe', 'evt_1', 'checkout.session.completed', 1, 999, 'usd', '\x7b7d')`,
		`INSERT INTO debts (player_id, outstanding) VALUES (` + itoa(player) + `, 5)`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	var seen []string
	report, err := audit.Run(ctx, pool, audit.Options{OnViolation: func(l string) { seen = append(seen, l) }})
	require.NoError(t, err)
	require.False(t, report.Clean())
	require.False(t, report.Ledger.Clean(), "invariant 1")
	require.Equal(t, []string{"funding", "fulfillment", "webhook", "payments", "events"}, report.Checked)
	for _, want := range []string{"invariant 4 paid_through_backed", "invariant 5 fulfilled_without_its_credit",
		"invariant 11 event_without_outcome", "invariant 9 debt_vs_receivable"} {
		require.True(t, containsPrefix(report.Domain, want), "%s not in %q", want, report.Domain)
	}
	require.Len(t, seen, int(report.Ledger.Total)+len(report.Domain))
	require.Contains(t, report.Summary(), "NOT clean")

	scoped, err := audit.Run(ctx, pool, audit.Options{PlayerID: player})
	require.NoError(t, err)
	require.Empty(t, scoped.Checked, "a player's audit is the ledger's alone")
	require.False(t, scoped.Clean())
}

func containsPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
