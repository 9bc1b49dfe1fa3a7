package main

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/provider"
)

// payments list shows a payment as the API does (fulfillment.PaymentView):
// an order charged twice lists its applied and its unapplied payment, and
// the applied one, half refunded at the provider, is partially_refunded
// with what went back, not applied.
func TestPaymentsListShowsPartialRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}
	client := fulfillmenttest.StartRiver(t, pool, fulfillment.WorkerOptions{})
	var player int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('twice') RETURNING id`).Scan(&player))
	o, err := fulfillment.CreateCheckout(ctx, pool, fulfillment.DefaultSKUs(), fulfillment.CheckoutParams{PlayerID: player,
		SKU: "mana_1000", Provider: provider.Stripe})
	require.NoError(t, err)
	for i, pi := range []string{"pi_first", "pi_second"} { // one after the other: the first one applies
		enqueue(t, pool, client, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_" + pi, Provider: provider.Stripe,
			PaidAmount: o.Amount, PaidCurrency: o.Currency, PaymentID: pi})
		testkit.JobsOn(pool).Wait(t, testkit.Kind("fulfill_order"), i+1, testkit.WaitOptions{})
	}
	enqueue(t, pool, client, fulfillment.ReversePaymentArgs{Provider: provider.Stripe, EventID: "evt_refund",
		PaymentID: "pi_first", ReversalID: "charge:ch_first", ReversalKind: fulfillment.ReversalRefund,
		State: fulfillment.StateSucceeded, Amount: o.Amount / 2, Currency: o.Currency})
	testkit.JobsOn(pool).Wait(t, testkit.Kind("reverse_payment"), 1, testkit.WaitOptions{Strict: true})

	order := strconv.FormatInt(o.ID, 10)
	half := strconv.FormatInt(o.Amount/2, 10)
	out := runBilling(t, env, "payments", "list", "--order", order)
	require.Regexp(t, ` pi_first order=`+order+` .* partially_refunded refunded=`+half+` refund=charge:ch_first:succeeded:`+half+`\n`, out)
	require.Regexp(t, ` pi_second order=`+order+` .* minted=0 clawed_back=0 unapplied reason=`, out)
	require.Regexp(t, `\n2 payments\n$`, out)

	var listed []struct {
		PaymentID      string `json:"payment_id"`
		Status         string `json:"status"`
		RefundedAmount int64  `json:"refunded_amount"`
		Reversals      []struct {
			ID, Kind, State string
			Amount          int64
		} `json:"reversals"`
	}
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, "payments", "list", "--order", order, "--json")), &listed))
	require.Len(t, listed, 2)
	require.Equal(t, "partially_refunded", listed[0].Status)
	require.Equal(t, o.Amount/2, listed[0].RefundedAmount)
	require.Len(t, listed[0].Reversals, 1)
	require.Equal(t, "charge:ch_first", listed[0].Reversals[0].ID)
	require.Equal(t, "unapplied", listed[1].Status)
	require.NotNil(t, listed[1].Reversals, "an empty list, not null")
	require.NoError(t, json.Unmarshal([]byte(runBilling(t, env, "payments", "list", "--unapplied", "--json")), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, "pi_second", listed[0].PaymentID)
	require.Contains(t, runBilling(t, env, "ledger", "verify"), "ledger clean")
}

// enqueue does what webhook intake does: claim an event row and insert its
// job, in one transaction.
func enqueue(t *testing.T, pool *pgxpool.Pool, client *river.Client[pgx.Tx], args river.JobArgs) {
	t.Helper()
	ctx := context.Background()
	// As fulfillment's tests record them: a payment's claim names its order
	// and what was paid.
	var claim string
	var claimArgs []any
	switch a := args.(type) {
	case fulfillment.FulfillOrderArgs:
		claim = `INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount, paid_currency, payload)
			VALUES ($1, $2, 'checkout.session.completed', $3, $4, $5, '{}')`
		claimArgs = []any{a.Provider, a.EventID, a.OrderID, a.PaidAmount, a.PaidCurrency}
	case fulfillment.ReversePaymentArgs:
		claim = `INSERT INTO webhook_events (provider, event_id, event_type, payload) VALUES ($1, $2, 'charge.refunded', '{}')`
		claimArgs = []any{a.Provider, a.EventID}
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, claim, claimArgs...); err != nil {
			return err
		}
		_, err := client.InsertTx(ctx, tx, args, nil)
		return err
	}))
}
