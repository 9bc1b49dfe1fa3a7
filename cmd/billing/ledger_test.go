package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
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
		Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("seed:1")})
	require.NoError(t, err)
	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: player, Mana: 20, IdempotencyKey: wallet.CallerKey("conv:1")})
	require.NoError(t, err)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}

	out := runBilling(t, env, "ledger", "verify")
	require.Equal(t, "ledger clean: 2 wallets, 3 transactions, 6 ledger entries; invariants 4-12 clean\n", out)
	clean := verifyJSON(t, env, 0)
	require.Equal(t, true, clean["clean"])
	require.Empty(t, clean["violations"])
	require.EqualValues(t, 3, clean["transactions"])
	require.Equal(t, []any{"funding", "fulfillment", "webhook", "payments", "events"}, clean["checked"])
	require.Equal(t, strings.TrimSpace(out), clean["summary"])
	require.Equal(t, true, verifyJSON(t, env, 0, "--player", strconv.FormatInt(player, 10))["clean"])

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

	broken := verifyJSON(t, env, 1)
	require.Equal(t, false, broken["clean"])
	require.EqualValues(t, 2, broken["violations_total"])
	vs := broken["violations"].([]any)
	require.Len(t, vs, 2)
	first := vs[0].(map[string]any)
	require.EqualValues(t, 1, first["invariant"])
	require.Equal(t, "balance_vs_entries", first["check"])
	require.Equal(t, lines[0], first["line"])
}

// verifyJSON runs ledger verify --json, wants exit status code and returns
// the one JSON object it printed on stdout.
func verifyJSON(t *testing.T, env []string, code int, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(billingBin(t), append([]string{"ledger", "verify", "--json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if code == 0 {
		require.NoError(t, err, stderr.String())
	} else {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, code, exit.ExitCode(), stderr.String())
	}
	var report map[string]any
	dec := json.NewDecoder(&stdout)
	require.NoError(t, dec.Decode(&report), stdout.String())
	require.False(t, dec.More(), "one JSON object")
	return report
}

// TestLedgerVerifyUnknownPlayer: auditing a player that does not exist is
// an error, not a clean ledger.
func TestLedgerVerifyUnknownPlayer(t *testing.T) {
	t.Parallel()
	dbURL, _ := newDB(t)
	code, out := runBillingExit(t, []string{"BILLING_DATABASE_URL=" + dbURL}, "ledger", "verify", "--player", "999")
	require.Equal(t, 1, code)
	require.Equal(t, "billing: ledger verify: --player 999: no such player\n", out)
	require.NotContains(t, out, "clean")
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
		Amount: 50, Kind: wallet.KindPurchase, IdempotencyKey: wallet.FulfilmentKey(999)})
	require.NoError(t, err)

	code, raw := runBillingExit(t, []string{"BILLING_DATABASE_URL=" + dbURL}, "ledger", "verify")
	require.Equal(t, 1, code, raw)
	require.Contains(t, raw, "invariant 5")
	require.Contains(t, raw, "order:999:fulfilment")
	require.Contains(t, raw, "ledger NOT clean")
	report := verifyJSON(t, []string{"BILLING_DATABASE_URL=" + dbURL}, 1)
	var invariants []float64
	for _, v := range report["violations"].([]any) {
		invariants = append(invariants, v.(map[string]any)["invariant"].(float64))
	}
	require.Contains(t, invariants, 5.0, "%v", report)
}
