package timeline_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/stripemock"
	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
	"github.com/fibe-dev/billing/wallet"
)

// A customer paid one order twice (a second Checkout Session): the first
// minted, the second minted nothing and was refunded through Stripe
// (stripe-mock) under the key derived from its row. The order's timeline
// says so on top and shows each step with the key that made it once; the
// second payment's PaymentIntent, its refund and its event id all find
// the same story.
func TestDoubleCharge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, stripemock.Start(t))
	o := e.open(provider.Stripe, "checkout-key-1")
	require.Equal(t, "completed", e.pay(o, "evt_first"))
	first := providerevents.CompletedEvent("stripe", "evt_first", o.ID, 999, "usd")
	require.Equal(t, "duplicate", e.deliver("stripe", first), "a redelivery of the same event")
	second := providerevents.PaymentEvent("stripe", "evt_second", "pi_second", o.ID, 999, "usd")
	require.Equal(t, "cancelled", e.deliverAndWait("stripe", "evt_second", second))
	e.requireClean()

	tl := e.order(o.ID)
	session := stripeevents.OrderSessionID(strconv.FormatInt(o.ID, 10))
	require.Equal(t, "Paid twice", tl.Headline, text(t, tl))
	require.Regexp(t, regexp.MustCompile(`^Paid twice: payment `+session+` \(9\.99 USD\) minted 1000 Mana on \d{4}-\d\d-\d\d \d\d:\d\d UTC; `+
		`payment cs_test_pi_second \(9\.99 USD\) for the same order minted nothing and was refunded \((re_\w+)\) on \d{4}-\d\d-\d\d \d\d:\d\d UTC\.`),
		tl.Verdict)
	require.False(t, tl.Attention, "nothing is left to do: %s", tl.Verdict)
	require.Equal(t, []int64{o.ID}, tl.Orders)
	require.Equal(t, e.player, tl.PlayerID)
	requireOrdered(t, tl)

	opened := keyed(t, tl, "checkout-key-1")
	require.Equal(t, timeline.LayerCheckout, opened.Layer)
	require.Equal(t, []timeline.Key{{Kind: timeline.KeyAPI, Value: "checkout-key-1"},
		{Kind: timeline.KeyProvider, Value: fmt.Sprintf("billing-checkout-order-%d", o.ID)}}, opened.Keys)
	require.Contains(t, opened.Text, "checkout "+o.CheckoutID)

	keyedOfLayer(t, tl, "evt_second", timeline.LayerDelivery)
	require.Len(t, ofType(tl, "delivery_claimed"), 2, "two events, each claimed once")
	require.Contains(t, keyedOfLayer(t, tl, "evt_first", timeline.LayerDelivery).Text, "; 1 duplicate delivery followed")
	jobs := ofType(tl, "job")
	require.Len(t, jobs, 2)
	require.Equal(t, "", jobs[0].Flag)
	require.Contains(t, jobs[0].Text, "fulfill_order job")
	require.Contains(t, jobs[0].Text, "completed")
	require.Equal(t, timeline.FlagCancelled, jobs[1].Flag)
	require.Equal(t, timeline.RiverUIPath(jobs[1].Refs.JobID), jobs[1].RiverUI)
	require.Len(t, jobs[1].Attempts, 1)
	require.Contains(t, jobs[1].Attempts[0].Error, "payment recorded unapplied")

	applied := keyed(t, tl, session)
	require.Equal(t, "payment_applied", applied.Type)
	require.Contains(t, applied.Details, "also known as "+providerevents.OrderPaymentID("stripe", strconv.FormatInt(o.ID, 10)))
	unapplied := keyed(t, tl, "cs_test_pi_second")
	require.Equal(t, "payment_unapplied", unapplied.Type)
	require.Contains(t, unapplied.Text, "already paid (a second, distinct payment)")
	require.Empty(t, unapplied.Flag, "refunded: nothing to do")
	refunded := keyed(t, tl, fulfillment.RefundKey(unapplied.Refs.Payment))
	require.Equal(t, "payment_refunded", refunded.Type)
	require.Regexp(t, `refunded automatically through stripe as re_\w+$`, refunded.Text)
	walletLine(t, tl, wallet.FulfilmentKey(o.ID).String(), 1000, 1000)
	require.Len(t, ofType(tl, "wallet"), 1, "one Mana credit for the order")

	// Every id of the second payment finds the same story, naming the
	// payment by the id the operator searched.
	refundID := regexp.MustCompile(`\((re_\w+)\)`).FindStringSubmatch(tl.Verdict)[1]
	for _, id := range []string{"pi_second", "cs_test_pi_second", refundID, "evt_second", session} {
		byID, err := timeline.Payment(ctx, e.pool, registry, "stripe", id)
		require.NoError(t, err, id)
		require.Equal(t, []int64{o.ID}, byID.Orders, id)
		require.Equal(t, "Paid twice", byID.Headline, id)
		require.Equal(t, timeline.Subject{Kind: timeline.SubjectPayment, Provider: "stripe", ID: id}, byID.Subject)
		require.Len(t, byID.Lines, len(tl.Lines), id)
	}
	byPI, err := timeline.Payment(ctx, e.pool, registry, "stripe", "pi_second")
	require.NoError(t, err)
	require.Contains(t, byPI.Verdict, "payment cs_test_pi_second (pi_second) (9.99 USD) for the same order")
}

// A second payment with no refund API configured stays unapplied: the
// verdict says to refund it and how, the line is flagged, and it is on
// the unapplied list.
func TestUnappliedNotRefunded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	o := e.open(provider.Creem, "")
	require.Equal(t, "completed", e.pay(o, "evt_a"))
	second := providerevents.PaymentEvent("creem", "evt_b", "ord_other", o.ID, 999, "usd")
	require.Equal(t, "cancelled", e.deliverAndWait("creem", "evt_b", second))

	tl := e.order(o.ID)
	require.Equal(t, "Paid twice", tl.Headline)
	require.True(t, tl.Attention)
	l := keyed(t, tl, "ord_other")
	require.Equal(t, timeline.FlagUnapplied, l.Flag)
	require.Regexp(t, fmt.Sprintf(`payment ord_other \(9\.99 USD\) for the same order minted nothing and is NOT refunded yet: `+
		`refund it at creem, then run billing payments mark-refunded --payment %d --refund-id <refund id>\.`, l.Refs.Payment), tl.Verdict)
	require.Empty(t, ofType(tl, "payment_refunded"))
	require.Contains(t, ofType(tl, "order_opened")[0].Details, "a simulated checkout page (billing dev): no provider was called")

	list, err := timeline.Unapplied(ctx, e.pool, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "ord_other", list[0].PaymentID)
	require.Equal(t, o.ID, list[0].OrderID)
	require.Equal(t, "9.99 USD", list[0].Money())

	_, _, err = fulfillment.MarkRefunded(ctx, e.pool, l.Refs.Payment, "rf_by_hand")
	require.NoError(t, err)
	tl = e.order(o.ID)
	require.False(t, tl.Attention, tl.Verdict)
	require.Contains(t, tl.Verdict, "was refunded (rf_by_hand)")
	require.Contains(t, ofType(tl, "payment_refunded")[0].Text, "refunded by hand and marked (billing payments mark-refunded) as rf_by_hand")
	list, err = timeline.Unapplied(ctx, e.pool, 10)
	require.NoError(t, err)
	require.Empty(t, list)
}

// Two partial refunds of one charge (Stripe's cumulative amount_refunded,
// 3.00 then 5.00 USD) claw back twice, once per step, to ceil(1000 x
// 500 / 999) = 501 Mana.
func TestPartialRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	o := e.open(provider.Stripe, "")
	require.Equal(t, "completed", e.pay(o, "evt_pay"))
	charge := "ch_order_" + strconv.FormatInt(o.ID, 10)
	require.Equal(t, "completed", e.reverse(o, "evt_refund_1", charge, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 300, "usd"))
	require.Equal(t, "completed", e.reverse(o, "evt_refund_2", charge, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 500, "usd"))
	e.requireClean()

	tl := e.order(o.ID)
	require.Equal(t, "Paid once", tl.Headline, text(t, tl))
	require.Contains(t, tl.Verdict, "Refunded in part: 5.00 USD of 9.99 USD went back (charge:"+charge+"). Clawed back: 501 Mana of the 1000 Mana it minted.")
	require.False(t, tl.Attention, tl.Verdict)
	requireOrdered(t, tl)
	require.Len(t, ofType(tl, "reversal_accepted"), 2)
	for _, evt := range []string{"evt_refund_1", "evt_refund_2"} {
		require.Equal(t, "job", keyedOfLayer(t, tl, evt, timeline.LayerJob).Type)
		require.Contains(t, keyedOfLayer(t, tl, evt, timeline.LayerReversal).Text, "accepted")
	}
	fact := keyed(t, tl, "charge:"+charge)
	require.Equal(t, timeline.LayerFact, fact.Layer)
	require.Contains(t, fact.Text, "stands at 5.00 USD, succeeded")
	payment := ofType(tl, "payment_applied")[0].Refs.Payment
	step := func(n int) string { return fmt.Sprintf("payment:%d:%d:charge:%s:mana", payment, n, charge) }
	walletLine(t, tl, step(1), -301, 699)
	walletLine(t, tl, step(2), -200, 499)

	for _, id := range []string{charge, "charge:" + charge, "evt_refund_2"} {
		byID, err := timeline.Payment(ctx, e.pool, registry, "stripe", id)
		require.NoError(t, err, id)
		require.Equal(t, []int64{o.ID}, byID.Orders, id)
	}
}

// keyedOfLayer is keyed among the lines of one layer.
func keyedOfLayer(t *testing.T, tl *timeline.Timeline, value, layer string) timeline.Line {
	t.Helper()
	for _, l := range tl.Lines {
		for _, k := range l.Keys {
			if k.Value == value && l.Layer == layer {
				return l
			}
		}
	}
	t.Fatalf("no %s line keyed %q in\n%s", layer, value, text(t, tl))
	return timeline.Line{}
}

// A Paddle chargeback (a dispute already lost) takes the Mana back; its
// reversal (the dispute won after all) gives it back, once.
func TestDisputeLostThenWon(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	o := e.open(provider.Paddle, "")
	require.Equal(t, "completed", e.pay(o, "evt_pay"))
	require.Equal(t, "completed", e.reverse(o, "evt_cb", "adj_cb", fulfillment.ReversalDispute, fulfillment.StateLost, 999, "usd"))
	require.Equal(t, "completed", e.reverse(o, "evt_cbr", "adj_cbr", fulfillment.ReversalDispute, fulfillment.StateWon, 999, "usd"))
	e.requireClean()

	tl := e.order(o.ID)
	txn := providerevents.OrderPaymentID("paddle", strconv.FormatInt(o.ID, 10))
	dispute := "chargeback:" + txn
	require.Equal(t, "Paid once", tl.Headline)
	require.Regexp(t, `Dispute `+dispute+` \(9\.99 USD\) opened on [^.]+ UTC and was won on [^.]+ UTC: what it took back was given back\. `+
		`Clawed back: 0 Mana of the 1000 Mana it minted\.`, tl.Verdict)
	require.Contains(t, keyed(t, tl, dispute).Text, "stands at 9.99 USD, won")
	require.Len(t, ofType(tl, "reversal_accepted"), 2)
	payment := ofType(tl, "payment_applied")[0].Refs.Payment
	walletLine(t, tl, fmt.Sprintf("payment:%d:1:%s:mana", payment, dispute), -1000, 0)
	back := walletLine(t, tl, fmt.Sprintf("payment:%d:2:%s:back", payment, dispute), 1000, 1000)
	require.Contains(t, back.Text, "+1000 Mana given back")
	requireOrdered(t, tl)
}

// A refund in another currency than its payment's is refused, changes
// nothing, and is shown flagged with its reason; the real refund that
// follows under the same refund id is applied.
func TestRefusedRefund(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	o := e.open(provider.Stripe, "")
	require.Equal(t, "completed", e.pay(o, "evt_pay"))
	charge := "ch_order_" + strconv.FormatInt(o.ID, 10)
	require.Equal(t, "cancelled", e.reverse(o, "evt_eur", charge, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "eur"))
	tl := e.order(o.ID)
	require.Equal(t, "Paid once", tl.Headline)
	require.True(t, tl.Attention)
	require.Contains(t, tl.Verdict, "A refund event (evt_eur, 9.99 EUR) was refused: refund in eur, the payment was in usd; it changed nothing")
	require.NotContains(t, tl.Verdict, "Clawed back")
	refused := keyedOfLayer(t, tl, "evt_eur", timeline.LayerReversal)
	require.Equal(t, "reversal_refused", refused.Type)
	require.Equal(t, timeline.FlagRefused, refused.Flag)
	job := keyedOfLayer(t, tl, "evt_eur", timeline.LayerJob)
	require.Equal(t, timeline.FlagCancelled, job.Flag)
	require.Contains(t, job.Attempts[0].Error, "refund in eur, the payment was in usd")
	require.Empty(t, ofType(tl, "fact"))

	require.Equal(t, "completed", e.reverse(o, "evt_usd", charge, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd"))
	e.requireClean()
	tl = e.order(o.ID)
	require.Contains(t, tl.Verdict, "Refunded in full: 9.99 USD of 9.99 USD went back (charge:"+charge+"). Clawed back: 1000 Mana of the 1000 Mana it minted.")
	require.Contains(t, tl.Verdict, "was refused")
	require.Equal(t, "reversal_accepted", keyedOfLayer(t, tl, "evt_usd", timeline.LayerReversal).Type)
}

// Mana spent (an operator's debit), then a full refund: the clawback
// takes what is left and the rest becomes debt; an operator forgives it.
// The order's and the player's timelines show the debt opened and
// written off, with the operator's key and reason.
func TestDebtForgiven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	ws := wallet.New(e.pool, wallet.Options{SparksPerMana: 100})
	o := e.open(provider.Creem, "")
	require.Equal(t, "completed", e.pay(o, "evt_pay"))
	_, err := ws.Adjust(ctx, wallet.AdjustParams{PlayerID: e.player, Currency: wallet.Mana, Amount: -600,
		Reason: "spent in a test", Key: "spend-1"})
	require.NoError(t, err)
	require.Equal(t, "completed", e.reverse(o, "evt_refund", "rf_1", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd"))

	tl := e.order(o.ID)
	require.True(t, tl.Attention)
	require.Contains(t, tl.Verdict, "The clawback left 600 Mana of debt; the player still owes 600 Mana.")
	payment := ofType(tl, "payment_applied")[0].Refs.Payment
	opened := walletLine(t, tl, fmt.Sprintf("payment:%d:1:rf_1:debt", payment), 600, 1000)
	require.Equal(t, timeline.LayerDebt, opened.Layer)
	walletLine(t, tl, fmt.Sprintf("payment:%d:1:rf_1:mana", payment), -1000, 0)
	debts, err := timeline.OpenDebts(ctx, e.pool, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{e.player}, []int64{debts[0].PlayerID})
	require.Equal(t, int64(600), debts[0].Mana)

	_, err = fulfillment.ForgiveDebt(ctx, e.pool, ws, e.player, "ticket-42", "goodwill, ticket 42")
	require.NoError(t, err)
	e.requireClean()
	tl = e.order(o.ID)
	require.False(t, tl.Attention, tl.Verdict)
	require.Regexp(t, `The clawback left 600 Mana of debt; 600 Mana forgiven on [^(]+ \(key \S*ticket-42: goodwill, ticket 42\); nothing is owed now\.`, tl.Verdict)
	require.Len(t, ofType(tl, "debt_written_off"), 2, "the write-off's two legs")
	forgiven := ofType(tl, "debt_forgiven")
	require.Len(t, forgiven, 1)
	require.Equal(t, timeline.LayerOperator, forgiven[0].Layer)
	require.Contains(t, forgiven[0].Text, "Operator forgave 600 Mana of debt: goodwill, ticket 42")
	requireOrdered(t, tl)

	pl, err := timeline.Player(ctx, e.pool, registry, e.player, time.Time{})
	require.NoError(t, err)
	require.Equal(t, "Nothing open", pl.Headline, pl.Verdict)
	require.Contains(t, pl.Verdict, fmt.Sprintf("Player %d (buyer) holds 0 Mana.", e.player))
	adjust := ofType(pl, "adjustment")
	require.Len(t, adjust, 1)
	require.Contains(t, adjust[0].Text, "Operator adjustment -600 Mana: spent in a test")
	require.Len(t, ofType(pl, "debt_opened"), 1)
	require.Len(t, ofType(pl, "debt_forgiven"), 1)
	require.Len(t, ofType(pl, "order_opened"), 1)
	requireOrdered(t, pl)
}

// A debt a clawback opened is settled by the player's next purchase: the
// new order's timeline shows the settlement leg and says its Mana paid
// the debt first; the first order's says later credits settled it.
func TestDebtSettled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	ws := wallet.New(e.pool, wallet.Options{SparksPerMana: 100})
	first := e.open(provider.Creem, "")
	require.Equal(t, "completed", e.pay(first, "evt_pay_1"))
	_, err := ws.Adjust(ctx, wallet.AdjustParams{PlayerID: e.player, Currency: wallet.Mana, Amount: -600,
		Reason: "spent in a test", Key: "spend-1"})
	require.NoError(t, err)
	require.Equal(t, "completed", e.reverse(first, "evt_refund", "rf_1", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd"))
	require.Contains(t, e.order(first.ID).Verdict, "the player still owes 600 Mana.")

	second := e.open(provider.Creem, "")
	require.Equal(t, "completed", e.pay(second, "evt_pay_2"))
	e.requireClean()

	tl := e.order(second.ID)
	require.Contains(t, tl.Verdict, "Its Mana first paid 600 Mana of the player's earlier debt.")
	settled := ofType(tl, "debt_settled")
	require.Len(t, settled, 1, text(t, tl))
	require.Equal(t, timeline.LayerDebt, settled[0].Layer)
	require.Contains(t, settled[0].Text, "Debt settled: 600 Mana of a later credit paid towards it")
	require.NotEmpty(t, settled[0].Keys)
	requireOrdered(t, tl)

	tl = e.order(first.ID)
	require.False(t, tl.Attention, tl.Verdict)
	require.Contains(t, tl.Verdict, "The clawback left 600 Mana of debt; later credits settled 600 Mana of the player's debt; nothing is owed now.")
	pl, err := timeline.Player(ctx, e.pool, registry, e.player, time.Time{})
	require.NoError(t, err)
	require.Equal(t, "Nothing open", pl.Headline, pl.Verdict)
	require.Len(t, ofType(pl, "debt_settled"), 1)
}

// Issue 28, finding 6: a duplicate payment the provider refunds itself is
// refunded: the verdict says one thing, in part (what is left to refund)
// and then in full (nothing to do), and it leaves the unapplied list.
func TestUnappliedRefundedByProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	o := e.open(provider.Creem, "")
	require.Equal(t, "completed", e.pay(o, "evt_a"))
	second := providerevents.PaymentEvent("creem", "evt_b", "ord_other", o.ID, 999, "usd")
	require.Equal(t, "cancelled", e.deliverAndWait("creem", "evt_b", second))
	refund := func(eventID, id string, amount int64) {
		t.Helper()
		body := providerevents.ReversalEvent("creem", eventID, "ord_other", id, fulfillment.ReversalRefund,
			fulfillment.StateSucceeded, amount, "usd")
		require.Equal(t, "completed", e.deliverAndWait("creem", eventID, body))
	}

	refund("evt_r1", "rf_1", 300)
	tl := e.order(o.ID)
	require.True(t, tl.Attention)
	require.Contains(t, tl.Verdict, "minted nothing and was refunded 3.00 USD by creem (rf_1); the other 6.99 USD is NOT refunded yet: refund it at creem")
	list, err := timeline.Unapplied(ctx, e.pool, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)

	refund("evt_r2", "rf_2", 699)
	tl = e.order(o.ID)
	require.False(t, tl.Attention, tl.Verdict)
	require.NotContains(t, tl.Verdict, "NOT refunded")
	require.Contains(t, tl.Verdict, "minted nothing and was refunded (rf_1, rf_2)")
	list, err = timeline.Unapplied(ctx, e.pool, 10)
	require.NoError(t, err)
	require.Empty(t, list)
	e.requireClean()
}
