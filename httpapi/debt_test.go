package httpapi

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// While a player owes Mana, conversions answer 409 outstanding_debt with
// the amount (before insufficient_balance); buying stays open; the order
// shows what went back.
func TestConversionRefusedWhileOwing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 100)
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = e.wallets.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: alice.id, Mana: 150, Key: "cb:alice", Reference: "test refund"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	r := e.do(alice, http.MethodPost, "/v1/conversions", "c1", `{"mana":10}`)
	requireProblem(t, r, http.StatusConflict, CodeOutstandingDebt)
	require.Contains(t, r.str("detail"), "owes 50 Mana")
	require.Zero(t, e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`))

	o := e.do(alice, http.MethodPost, "/v1/checkouts", "k1", `{"sku":"mana_1000","provider":"stripe"}`)
	require.Equal(t, http.StatusCreated, o.status, string(o.raw))
	got := e.do(alice, http.MethodGet, "/v1/orders/"+o.str("id"), "", "")
	require.EqualValues(t, 0, got.body["refunded_amount"])
	require.EqualValues(t, 0, got.body["clawed_back_mana"])

	f, err := e.wallets.ForgiveDebt(ctx, alice.id, "ops-1", "test")
	require.NoError(t, err)
	require.Equal(t, int64(50), f.Mana)
	requireProblem(t, e.do(alice, http.MethodPost, "/v1/conversions", "c2", `{"mana":10}`), http.StatusConflict, CodeInsufficientBalance)
	e.credit(alice, wallet.Mana, 10)
	require.Equal(t, http.StatusCreated, e.do(alice, http.MethodPost, "/v1/conversions", "c3", `{"mana":10}`).status)
	e.requireAuditClean()
}
