package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

func TestLedgerVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	var player int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('v') RETURNING id`).Scan(&player))
	s := wallet.New(pool, wallet.Options{})
	_, err := s.Credit(ctx, wallet.PostParams{PlayerID: player, Currency: wallet.Mana, Amount: 50,
		Kind: wallet.KindAdjustment, IdempotencyKey: "seed:1"})
	require.NoError(t, err)
	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: player, Mana: 20, IdempotencyKey: "conv:1"})
	require.NoError(t, err)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}

	out := runBilling(t, env, "ledger", "verify")
	require.Equal(t, "ledger clean: 2 wallets, 3 transactions, 6 ledger entries; invariants 4-10 clean\n", out)

	_, err = pool.Exec(ctx, `UPDATE wallets SET balance = balance + 1 WHERE player_id = $1 AND currency = 'sparks'`, player)
	require.NoError(t, err)
	code, raw := runBillingExit(t, env, "ledger", "verify")
	require.Equal(t, 1, code, raw)
	lines := strings.Split(strings.TrimSpace(raw), "\n")
	require.Len(t, lines, 3, raw)
	require.Contains(t, lines[0], "invariant 1 balance_vs_entries wallet=")
	require.Contains(t, lines[1], "invariant 1 balance_vs_latest_entry wallet=")
	require.Contains(t, lines[2], "ledger NOT clean: 2 violations")
	require.NotContains(t, raw, "\r", "no progress redraws when not on a terminal")
}

// TestLedgerVerifyDomainInvariants: verify also audits invariants 4-6, here
// a fulfillment credit whose order does not exist.
func TestLedgerVerifyDomainInvariants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	var player int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('v') RETURNING id`).Scan(&player))
	_, err := wallet.New(pool, wallet.Options{}).Credit(ctx, wallet.PostParams{PlayerID: player, Currency: wallet.Mana,
		Amount: 50, Kind: wallet.KindPurchase, IdempotencyKey: "order:999:fulfilment"})
	require.NoError(t, err)

	code, raw := runBillingExit(t, []string{"BILLING_DATABASE_URL=" + dbURL}, "ledger", "verify")
	require.Equal(t, 1, code, raw)
	require.Contains(t, raw, "invariant 5")
	require.Contains(t, raw, "order:999:fulfilment")
	require.Contains(t, raw, "ledger NOT clean")
}
