package timeline_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/wallet"
)

// What nothing is known about is ErrNotFound, naming what was asked.
func TestNotFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	_, err := timeline.Order(ctx, e.pool, registry, 424242)
	require.ErrorIs(t, err, timeline.ErrNotFound)
	require.ErrorContains(t, err, "no order 424242")
	_, err = timeline.Payment(ctx, e.pool, registry, "stripe", "pi_nobody")
	require.ErrorIs(t, err, timeline.ErrNotFound)
	require.ErrorContains(t, err, `no stripe payment, refund, dispute, event or checkout is known as "pi_nobody"`)
	_, err = timeline.Player(ctx, e.pool, registry, 424242, time.Time{})
	require.ErrorIs(t, err, timeline.ErrNotFound)

	// An order opened and never paid is found by its checkout too.
	o := e.open(provider.Paddle, "")
	tl, err := timeline.Payment(ctx, e.pool, registry, "paddle", o.CheckoutID)
	require.NoError(t, err)
	require.Equal(t, "Not paid", tl.Headline)
	require.Regexp(t, fmt.Sprintf(`^Not paid: order %d was opened on [^ ]+ [^ ]+ UTC with paddle checkout %s and no payment has arrived\.$`,
		o.ID, o.CheckoutID), tl.Verdict)
	_, err = timeline.Payment(ctx, e.pool, registry, "stripe", o.CheckoutID)
	require.ErrorIs(t, err, timeline.ErrNotFound, "a provider id belongs to its provider")
}

// A refund that arrives before its payment waits: its own id finds it,
// and the verdict says it waits; once the payment is recorded the refund
// is decided and the order's timeline shows it, clawed back at once.
func TestRefundBeforeItsPayment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	o := e.open(provider.Stripe, "")
	pi := providerevents.OrderPaymentID("stripe", strconv.FormatInt(o.ID, 10))
	require.Equal(t, "completed", e.deliverAndWait("stripe", "evt_early", providerevents.ReversalEvent("stripe", "evt_early", pi,
		"ch_early", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd")))
	for _, id := range []string{pi, "charge:ch_early", "evt_early"} {
		tl, err := timeline.Payment(ctx, e.pool, registry, "stripe", id)
		require.NoError(t, err, id)
		require.Equal(t, "Waiting for its payment", tl.Headline, id)
		require.True(t, tl.Attention)
		require.Contains(t, tl.Verdict, "Waiting for its payment: 1 refund or dispute event names stripe payment "+pi+" (also known as ch_early), which is not recorded yet")
		require.Equal(t, timeline.FlagPending, ofType(tl, "reversal_pending")[0].Flag)
		require.Len(t, ofType(tl, "delivery_claimed"), 1, id)
		require.Len(t, ofType(tl, "job"), 1, id)
	}

	require.Equal(t, "completed", e.pay(o, "evt_pay"))
	e.requireClean()
	tl := e.order(o.ID)
	require.Contains(t, tl.Verdict, "Refunded in full: 9.99 USD of 9.99 USD went back (charge:ch_early). Clawed back: 1000 Mana")
	accepted := ofType(tl, "reversal_accepted")
	require.Len(t, accepted, 1)
	require.Contains(t, accepted[0].Details[len(accepted[0].Details)-1], "decided at")
	require.Len(t, ofType(tl, "delivery_claimed"), 2, "the payment's and the refund's")
	requireOrdered(t, tl)
}

// Every delivery after the one that claimed an event is counted on the
// claim's row by the intake; the delivery line says how many and when the
// last came, and the verdict counts them.
func TestDuplicateDeliveriesCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	o := e.open(provider.Stripe, "")
	require.Equal(t, "completed", e.pay(o, "evt_pay"))
	claimed := ofType(e.order(o.ID), "delivery_claimed")
	require.Len(t, claimed, 1)
	require.Contains(t, claimed[0].Text, "; delivered once")
	require.Zero(t, claimed[0].Duplicates)
	require.Nil(t, claimed[0].LastDelivery)

	body := providerevents.CompletedEvent(provider.Stripe, "evt_pay", o.ID, o.Amount, o.Currency)
	require.Equal(t, "duplicate", e.deliver(provider.Stripe, body))
	require.Equal(t, "duplicate", e.deliver(provider.Stripe, body))
	var last time.Time
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT last_delivery_at FROM webhook_events WHERE event_id = 'evt_pay'`).Scan(&last))

	tl := e.order(o.ID)
	claimed = ofType(tl, "delivery_claimed")
	require.Len(t, claimed, 1, "one claim, however often it is delivered")
	require.Contains(t, claimed[0].Text, "; 2 duplicate deliveries followed, the last at "+
		last.UTC().Format("2006-01-02 15:04:05.000")+", each answered as a duplicate")
	require.Equal(t, int64(2), claimed[0].Duplicates)
	require.True(t, last.Equal(*claimed[0].LastDelivery))
	require.Contains(t, tl.Verdict, "The providers delivered 1 event 3 times; each was claimed once and the 2 duplicates answered without effect.")
	require.Len(t, ofType(tl, "wallet"), 1, "one Mana credit")
}

// A player's timeline since a moment shows only what happened since, an
// older order included when it moved money since (its refund).
func TestPlayerSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	old := e.open(provider.Stripe, "")
	require.Equal(t, "completed", e.pay(old, "evt_pay_old"))
	since := time.Now()
	fresh := e.open(provider.Paddle, "")
	require.Equal(t, "completed", e.pay(fresh, "evt_pay_new"))
	require.Equal(t, "completed", e.reverse(old, "evt_refund", "ch_old", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd"))

	all, err := timeline.Player(ctx, e.pool, registry, e.player, time.Time{})
	require.NoError(t, err)
	require.Equal(t, []int64{old.ID, fresh.ID}, all.Orders)
	require.Len(t, ofType(all, "order_opened"), 2)
	require.Nil(t, all.Subject.Since)

	tl, err := timeline.Player(ctx, e.pool, registry, e.player, since)
	require.NoError(t, err)
	require.Equal(t, []int64{old.ID, fresh.ID}, tl.Orders, "the old order moved money since")
	require.Len(t, ofType(tl, "order_opened"), 1, "only the new order was opened since")
	require.Len(t, ofType(tl, "reversal_accepted"), 1)
	for _, l := range tl.Lines {
		require.False(t, l.At.Before(since), "%s is before --since", l.Text)
	}
	require.Contains(t, tl.Verdict, fmt.Sprintf("Player %d (buyer) holds 1000 Mana.", e.player))
	require.Contains(t, tl.Verdict, "2 orders since "+since.UTC().Format("2006-01-02 15:04")+" UTC: 1 paid once and refunded, 1 paid once.",
		"the counts say what went back, not only how often each order was paid")
	require.Equal(t, since.UTC(), *tl.Subject.Since)
}

// The player's verdict after two orders refunded in full and a forgiven
// debt says so, where it once read "2 paid once".
func TestPlayerVerdictTellsRefundsAndForgiveness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	ws := wallet.New(e.pool, wallet.Options{SparksPerMana: 100})
	a, b := e.open(provider.Stripe, ""), e.open(provider.Stripe, "")
	require.Equal(t, "completed", e.pay(a, "evt_pay_a"))
	require.Equal(t, "completed", e.pay(b, "evt_pay_b"))
	_, err := ws.Adjust(ctx, wallet.AdjustParams{PlayerID: e.player, Currency: wallet.Mana, Amount: -1500,
		Reason: "spent in a test", Key: "spend-1"})
	require.NoError(t, err)
	require.Equal(t, "completed", e.reverse(a, "evt_refund_a", "ch_a", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd"))
	require.Equal(t, "completed", e.reverse(b, "evt_refund_b", "ch_b", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd"))
	_, err = fulfillment.ForgiveDebt(ctx, e.pool, ws, e.player, "ticket-7", "goodwill")
	require.NoError(t, err)
	e.requireClean()
	tl, err := timeline.Player(ctx, e.pool, registry, e.player, time.Time{})
	require.NoError(t, err)
	require.Contains(t, tl.Verdict, "2 orders: 2 paid once and refunded.")
	require.Contains(t, tl.Verdict, "1500 Mana of debt forgiven by an operator (1 write-off).")
	require.NotContains(t, tl.Verdict, "2 paid once.")
}

// An id no text column can hold (NUL, invalid UTF-8) is ErrInvalidID,
// refused before any query: not a database error, not "not found".
func TestInvalidID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	for _, c := range []struct{ provider, id string }{
		{"stripe", "\xff"}, {"stripe", "pi_\x00"}, {"stripe", "\x00"}, {"str\xffipe", "pi_1"}, {"stripe\x00", "pi_1"},
	} {
		_, err := timeline.Payment(ctx, e.pool, registry, c.provider, c.id)
		require.ErrorIs(t, err, timeline.ErrInvalidID, "%q %q", c.provider, c.id)
		require.NotErrorIs(t, err, timeline.ErrNotFound)
		require.ErrorContains(t, err, "must be valid UTF-8 without NUL")
	}
}
