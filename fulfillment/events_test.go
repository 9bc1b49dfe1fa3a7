package fulfillment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
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

// Every check of the events' invariant, planted: one player's history
// makes an effect of each type the payment path reports (a debt opened
// and forgiven, another opened and settled by a later fulfilment, a
// reversal applied and one refused, a payment unapplied and marked
// refunded), the audit is clean, and then, one type at a time in a
// transaction rolled back after, the type's events are deleted and the
// audit names exactly that type's check. An event of a forgiveness that
// does not exist is named too.
func TestAuditFindsEveryEffectWithoutItsEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newReversalEnv(t)
	ws := wallet.New(e.pool, wallet.Options{})
	spent := func(key string) {
		_, err := ws.Adjust(ctx, wallet.AdjustParams{PlayerID: e.player, Currency: wallet.Mana, Amount: -1000, Reason: "spent", Key: key})
		require.NoError(t, err)
	}
	e.buy("pi_a")
	require.Equal(t, "completed", waitJobs(t, e.pool, 1)[0].State)
	spent("spend-a")
	e.reverse("evt_refund_a", "pi_a", "re_a", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd")
	require.Equal(t, int64(1000), e.debt())
	_, err := fulfillment.ForgiveDebt(ctx, e.pool, ws, e.player, "plant", "support")
	require.NoError(t, err)
	e.buy("pi_b")
	waitJobs(t, e.pool, 2)
	spent("spend-b")
	e.reverse("evt_refund_b", "pi_b", "re_b", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd")
	require.Equal(t, int64(1000), e.debt())
	oc := e.buy("pi_c")
	waitJobs(t, e.pool, 3)
	require.Zero(t, e.debt(), "the third fulfilment settled the second debt")
	e.reverse("evt_eur", "pi_c", "re_eur", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "eur")
	payWith(t, e.pool, e.client, "stripe", "evt_pi_c2", "pi_c2", oc.ID, 999, "usd")
	waitJobs(t, e.pool, 4)
	ps, err := fulfillment.ListPayments(ctx, e.pool, fulfillment.ListPaymentsParams{OrderID: oc.ID})
	require.NoError(t, err)
	for _, p := range ps {
		if p.PaymentID == "pi_c2" {
			_, changed, err := fulfillment.MarkRefunded(ctx, e.pool, p.ID, "re_by_hand")
			require.NoError(t, err)
			require.True(t, changed)
		}
	}
	requireClean(t, e.pool)

	for typ, check := range map[string]string{
		events.OrderFulfilled:   "fulfilment_without_event",
		events.PaymentUnapplied: "unapplied_without_event",
		events.PaymentRefunded:  "refund_without_event",
		events.ReversalApplied:  "reversal_without_event",
		events.ReversalRefused:  "reversal_without_event",
		events.DebtOpened:       "debt_opened_without_event",
		events.DebtSettled:      "debt_settled_without_event",
		events.DebtForgiven:     "forgiveness_without_event",
	} {
		checks := auditWithout(t, e.pool, func(tx pgx.Tx) {
			tag, err := tx.Exec(ctx, `DELETE FROM events WHERE type = $1 AND player_id = $2`, typ, e.player)
			require.NoError(t, err)
			require.Positive(t, tag.RowsAffected(), "the history made no %s event", typ)
		})
		require.Equal(t, []string{check}, checks, "%s events deleted", typ)
	}
	checks := auditWithout(t, e.pool, func(tx pgx.Tx) {
		_, err := events.EmitTx(ctx, tx, events.Event{Type: events.DebtForgiven, Key: "no such forgiveness", PlayerID: e.player,
			Data: map[string]any{"mana_forgiven": 1}})
		require.NoError(t, err)
	})
	require.Equal(t, []string{"event_without_effect"}, checks)
	requireClean(t, e.pool)
}

// auditWithout runs plant in a transaction, the events' audit in it, and
// rolls it back; it returns the names of the checks that found something.
func auditWithout(t *testing.T, pool *pgxpool.Pool, plant func(tx pgx.Tx)) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(ctx)) }()
	plant(tx)
	vs, err := events.Audit(ctx, tx)
	require.NoError(t, err)
	var checks []string
	for _, v := range vs {
		if !slices.Contains(checks, v.Check) {
			checks = append(checks, v.Check)
		}
	}
	return checks
}
