package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/wallet"
)

// The operator's money commands: debts list and forgive, wallet adjust,
// payments list, each with --json and replay-safe keys; ledger verify
// checks invariants 7-9.
func TestMoneyCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}
	var player int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('d') RETURNING id`).Scan(&player))
	p := strconv.FormatInt(player, 10)

	var adj struct {
		ID       string `json:"id"`
		Amount   int64  `json:"amount"`
		Replayed bool   `json:"replayed"`
	}
	args := []string{"wallet", "adjust", "--player", p, "--currency", "mana", "--amount", "40", "--reason", "goodwill", "--key", "ops-1", "--json"}
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, args...)), &adj))
	first := adj
	require.Equal(t, int64(40), adj.Amount)
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, args...)), &adj))
	require.Equal(t, first.ID, adj.ID)
	require.True(t, adj.Replayed)
	require.Contains(t, runBillingFail(t, env, "wallet", "adjust", "--player", p, "--currency", "mana", "--amount", "-41",
		"--reason", "too much", "--key", "ops-2"), "insufficient balance")
	zero := runBillingFail(t, env, "wallet", "adjust", "--player", p, "--currency", "mana", "--amount", "0",
		"--reason", "nothing", "--key", "ops-3")
	require.Equal(t, "billing: wallet adjust: --amount must be a nonzero integer (positive credits, negative debits), got 0\n", zero)

	// A forgiveness while nothing is owed spends its key on "0 forgiven".
	var f forgivenessJSON
	early := []string{"debts", "forgive", "--player", p, "--key", "fg-0", "--reason", "nothing yet", "--json"}
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, early...)), &f))
	require.Equal(t, forgivenessJSON{PlayerID: player}, f)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = wallet.New(pool, wallet.Options{}).ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: player, Mana: 100, Key: wallet.CallerKey("cb"), Reference: "t"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	var debts []debtJSON
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, "debts", "list", "--json")), &debts))
	require.Len(t, debts, 1)
	require.Equal(t, debtJSON{PlayerID: player, Mana: 60, UpdatedAt: debts[0].UpdatedAt}, debts[0])
	require.Contains(t, runBilling(t, env, "ledger", "verify"), "ledger clean")
	// Replayed after the debt opened, that key forgives nothing.
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, early...)), &f))
	require.Equal(t, forgivenessJSON{PlayerID: player, Replayed: true}, f)
	require.Contains(t, runBilling(t, env, "debts", "list"), "1 open debt, 60 Mana in total")

	forgive := []string{"debts", "forgive", "--player", p, "--key", "fg-1", "--reason", "support", "--json"}
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, forgive...)), &f))
	require.Equal(t, forgivenessJSON{PlayerID: player, Mana: 60}, f)
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, forgive...)), &f))
	require.Equal(t, forgivenessJSON{PlayerID: player, Mana: 60, Replayed: true}, f)
	require.Contains(t, runBilling(t, env, "debts", "list"), "0 open debts")
	require.Equal(t, "[]\n", runBilling(t, env, "payments", "list", "--unapplied", "--json"))

	_, err = pool.Exec(ctx, `UPDATE debts SET outstanding = 5 WHERE player_id = $1`, player)
	require.NoError(t, err)
	require.Contains(t, runBillingFail(t, env, "ledger", "verify"), "invariant 9 debt_vs_receivable")
}

// payments mark-refunded takes an unapplied payment off the --unapplied
// list once, replays, refuses another refund id or a minted payment, and
// moves no money.
func TestPaymentsMarkRefunded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}
	var player, order, payment int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('m') RETURNING id`).Scan(&player))
	o, err := fulfillment.CreateCheckout(ctx, pool, fulfillment.DefaultSKUs(), fulfillment.CheckoutParams{PlayerID: player,
		SKU: "mana_1000", Provider: provider.Paddle})
	require.NoError(t, err)
	order = o.ID
	// What intake records for a second, distinct payment of a paid order:
	// the payment and its payment.unapplied event, in one transaction.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO payments (provider, payment_id, order_id, player_id, event_id, amount,
		currency, mana_minted, status, reason) VALUES ('paddle', 'txn_twice', $1, $2, 'evt_twice', 999, 'usd', 0, 'unapplied',
		'order is already paid') RETURNING id`, order, player).Scan(&payment))
	_, err = events.EmitTx(ctx, tx, events.Event{Type: events.PaymentUnapplied, Key: fulfillment.UnappliedKey(payment),
		PlayerID: player, Data: map[string]any{"provider": "paddle", "payment_id": "txn_twice", "order_id": order,
			"amount": 999, "currency": "usd", "reason": "order is already paid"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	id := strconv.FormatInt(payment, 10)
	listed := runBilling(t, env, "payments", "list", "--unapplied")
	require.Contains(t, listed, "txn_twice")
	require.True(t, strings.HasSuffix(listed, "\n1 payment\n"), "one payment, counted in the singular:\n%s", listed)

	var got struct {
		ID       string `json:"id"`
		Status   string `json:"status"`
		RefundID string `json:"refund_id"`
		Changed  bool   `json:"changed"`
	}
	mark := []string{"payments", "mark-refunded", "--payment", id, "--refund-id", "re_dash_1", "--json"}
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, mark...)), &got))
	require.Equal(t, id, got.ID)
	require.Equal(t, "refunded", got.Status)
	require.Equal(t, "re_dash_1", got.RefundID)
	require.True(t, got.Changed)
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, mark...)), &got))
	require.False(t, got.Changed, "replayed")
	require.Equal(t, "[]\n", runBilling(t, env, "payments", "list", "--unapplied", "--json"))
	require.Contains(t, runBillingFail(t, env, "payments", "mark-refunded", "--payment", id, "--refund-id", "re_dash_2"),
		"already refunded under another refund id")
	require.Contains(t, runBillingFail(t, env, "payments", "mark-refunded", "--payment", "99999999", "--refund-id", "re_x"),
		"no such payment")
	require.Contains(t, runBillingFail(t, env, "payments", "mark-refunded", "--payment", id), `"refund-id" not set`)
	require.Contains(t, runBilling(t, env, "ledger", "verify"), "ledger clean")
}
