package fulfillment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/wallet"
)

// eventData reads event id's data; nil when there is no such event.
func eventData(t *testing.T, pool *pgxpool.Pool, id string) map[string]any {
	t.Helper()
	s, err := events.Show(context.Background(), pool, id)
	if err != nil {
		require.ErrorIs(t, err, events.ErrEventNotFound)
		return nil
	}
	var body struct {
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(s.Body, &body))
	return body.Data
}

// One payment delivered N times under N event ids, worked at once: one
// credit and one order.fulfilled under the id derived from the credit's
// key. A second, distinct payment is unapplied and refunded: one
// payment.unapplied and one payment.refunded. A refund of the applied
// payment: reversal.applied. The full audit, events included, is clean.
func TestPaymentPathEmitsItsEvents(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	refunder := &amountRefunder{}
	client := startRiverWith(t, pool, fulfillment.WorkerOptions{Refunders: map[string]fulfillment.Refunder{"stripe": refunder}})
	player := newPlayer(t, pool)
	o := checkout(t, pool, player, "mana_1000", "stripe")
	const n = 8
	var args []fulfillment.FulfillOrderArgs
	for i := range n {
		args = append(args, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: fmt.Sprintf("evt_dup_%d", i), Provider: "stripe",
			PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_one"})
	}
	args = append(args, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_second", Provider: "stripe",
		PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_two"})
	payAll(t, pool, client, args)
	waitJobs(t, pool, len(args))

	// The jobs race: either payment may be the one applied.
	ps, err := fulfillment.ListPayments(context.Background(), pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
	require.NoError(t, err)
	require.Len(t, ps, 2, "one row per provider payment")
	first, second := ps[0], ps[1]
	if second.Status == fulfillment.PaymentApplied {
		first, second = second, first
	}
	require.Equal(t, fulfillment.PaymentApplied, first.Status)
	require.Equal(t, fulfillment.PaymentRefunded, second.Status)

	fulfilled := events.ID(events.OrderFulfilled, wallet.FulfilmentKey(o.ID).String())
	data := eventData(t, pool, fulfilled)
	require.NotNil(t, data, "order.fulfilled was written")
	require.Equal(t, first.PaymentID, data["payment_id"])
	require.EqualValues(t, 1000, data["mana_credited"])
	require.EqualValues(t, 999, data["amount"])
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM events WHERE type = 'order.fulfilled'`))

	unapplied := events.ID(events.PaymentUnapplied, fulfillment.UnappliedKey(second.ID))
	require.NotNil(t, eventData(t, pool, unapplied))
	refundedID := events.ID(events.PaymentRefunded, fulfillment.RefundKey(second.ID))
	refunded := eventData(t, pool, refundedID)
	require.NotNil(t, refunded, "payment.refunded was written with the automatic refund")
	require.Equal(t, second.PaymentID, refunded["payment_id"])

	reverse(t, pool, client, fulfillment.ReversePaymentArgs{Provider: "stripe", EventID: "evt_refund", PaymentID: first.PaymentID,
		ReversalID: "re_1", ReversalKind: "refund", State: "succeeded", Amount: 999, Currency: "usd"})
	waitKind(t, pool, "reverse_payment", 1)
	appliedID := events.ID(events.ReversalApplied, fulfillment.ReversalEventKey("stripe", "evt_refund"))
	applied := eventData(t, pool, appliedID)
	require.NotNil(t, applied, "reversal.applied was written")
	require.EqualValues(t, 1000, applied["mana_clawed_back"])
	requireClean(t, pool)

	// The player's sequence follows the order the effects committed in:
	// distinct, and later for an effect that followed another (the
	// fulfilment and the unapplied payment raced, so their order is free).
	seq := map[string]int64{}
	rows, err := pool.Query(context.Background(), `SELECT id, sequence FROM events WHERE player_id = $1`, player)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var s int64
		require.NoError(t, rows.Scan(&id, &s))
		seq[id] = s
	}
	require.NoError(t, rows.Err())
	require.Len(t, seq, 4, "fulfilled, unapplied, refunded, reversal applied")
	require.Less(t, seq[fulfilled], seq[appliedID], "the reversal came after the fulfilment")
	require.Less(t, seq[unapplied], seq[refundedID], "the refund came after the payment was unapplied")

	// The audit's events check, planted the other way: the unapplied
	// payment's event gone is reported.
	_, err = pool.Exec(context.Background(), `DELETE FROM events WHERE id = $1`,
		events.ID(events.PaymentUnapplied, fulfillment.UnappliedKey(second.ID)))
	require.NoError(t, err)
	report, err := audit.Run(context.Background(), pool, audit.Options{})
	require.NoError(t, err)
	require.Contains(t, report.String(), "unapplied_without_event", report.String())
}

// The audit's events check, planted: a fulfilment whose event is gone,
// and an order.fulfilled naming no credit, are both reported.
func TestAuditFindsAFulfilmentWithoutItsEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	client := startRiver(t, pool)
	o := checkout(t, pool, newPlayer(t, pool), "mana_1000", "stripe")
	pay(t, pool, client, "evt_plant", o.ID, 999, "usd")
	waitJobs(t, pool, 1)
	requireClean(t, pool)

	id := events.ID(events.OrderFulfilled, wallet.FulfilmentKey(o.ID).String())
	_, err := pool.Exec(ctx, `DELETE FROM events WHERE id = $1`, id)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = events.EmitTx(ctx, tx, events.Event{Type: events.OrderFulfilled, Key: "order:999999:fulfilment", PlayerID: 1,
		Data: events.OrderFulfilledData{OrderID: 999999, WalletTransactionID: 999999}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	report, err := audit.Run(ctx, pool, audit.Options{})
	require.NoError(t, err)
	require.False(t, report.Clean())
	text := report.String()
	require.Contains(t, text, "fulfilment_without_event")
	require.Contains(t, text, id)
	require.Contains(t, text, "event_without_effect")
	require.Equal(t, 2, strings.Count(text, "invariant 12"), text)
}
