package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fibe"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
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
	_, err = e.wallets.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: alice.id, Mana: 150, Key: wallet.CallerKey("cb:alice"), Reference: "test refund"})
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

	f, err := fulfillment.ForgiveDebt(ctx, e.pool, e.wallets, alice.id, "ops-1", "test")
	require.NoError(t, err)
	require.Equal(t, int64(50), f.Mana)
	requireProblem(t, e.do(alice, http.MethodPost, "/v1/conversions", "c2", `{"mana":10}`), http.StatusConflict, CodeInsufficientBalance)
	e.credit(alice, wallet.Mana, 10)
	require.Equal(t, http.StatusCreated, e.do(alice, http.MethodPost, "/v1/conversions", "c3", `{"mana":10}`).status)
	e.requireAuditClean()
}

// End to end through the real server, webhook intake, worker and SDK: a
// paid order, a partial refund, then a full one; the SDK's order shows what
// went back, and a second refund delivery moves nothing.
func TestSDKOrderShowsRefunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnvWith(t, func(s *setup) { s.providers[provider.Stripe].WebhookSecrets = []string{"whsec_sdk"} })
	e.startWorker()
	alice := e.newPlayer("alice")
	sdk := fibe.NewClient(e.srv.URL, alice.key)
	o, err := sdk.Checkouts.Create(ctx, fibe.CheckoutParams{SKU: "mana_1000", Provider: "stripe"})
	require.NoError(t, err)
	id, err := strconv.ParseInt(o.ID, 10, 64)
	require.NoError(t, err)
	pi := providerevents.OrderPaymentID("stripe", o.ID)
	send := func(body []byte) {
		h, v, err := providerevents.Sign("stripe", "whsec_sdk", body, time.Now())
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/webhooks/stripe", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(h, v)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.NoError(t, res.Body.Close())
	}
	waitOrder := func(want string) *fibe.Order {
		deadline := time.Now().Add(waitDeadline)
		for {
			got, err := sdk.Orders.Get(ctx, o.ID)
			require.NoError(t, err)
			if got.Status == want || time.Now().After(deadline) {
				require.Equal(t, want, got.Status)
				return got
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	send(providerevents.CompletedEvent("stripe", "evt_paid", id, 999, "usd"))
	waitOrder(fibe.OrderFulfilled)
	send(providerevents.ReversalEvent("stripe", "evt_r1", pi, "ch_1", "refund", "succeeded", 333, "usd"))
	got := waitOrder(fibe.OrderPartiallyRefunded)
	require.Equal(t, int64(333), got.RefundedAmount)
	require.Equal(t, int64(334), got.ClawedBackMana) // ceil(1000 x 333 / 999)
	require.Len(t, got.Payments, 1, "the SDK reads the order's payments")
	require.Equal(t, fibe.PaymentPartiallyRefunded, got.Payments[0].Status)
	require.Equal(t, int64(333), got.Payments[0].RefundedAmount)
	require.Len(t, got.Payments[0].Reversals, 1)
	require.Equal(t, "charge:ch_1", got.Payments[0].Reversals[0].ID)
	require.Empty(t, got.Unapplied())
	send(providerevents.ReversalEvent("stripe", "evt_r2", pi, "ch_1", "refund", "succeeded", 999, "usd"))
	got = waitOrder(fibe.OrderRefunded)
	require.Equal(t, int64(999), got.RefundedAmount)
	require.Equal(t, int64(1000), got.ClawedBackMana)
	require.Equal(t, fibe.PaymentRefunded, got.Payments[0].Status)
	require.Equal(t, int64(999), got.Payments[0].Reversals[0].Amount)
	w, err := sdk.Wallets.Get(ctx)
	require.NoError(t, err)
	require.Zero(t, w.Mana.Balance)
	e.requireAuditClean()
}
