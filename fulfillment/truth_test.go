package fulfillment_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

// The provider's truth at the job level: each finding of a refused or
// oversized event that once undid, blocked or skipped a clawback.

func (e *reversalEnv) order(id int64) *fulfillment.Order {
	e.t.Helper()
	o, err := fulfillment.GetOrder(context.Background(), e.pool, e.player, id)
	require.NoError(e.t, err)
	return o
}

func (e *reversalEnv) refund(event, pi string, amount int64, currency string) jobRow {
	e.t.Helper()
	return e.reverse(event, pi, "charge:ch_"+pi, fulfillment.ReversalRefund, fulfillment.StateSucceeded, amount, currency)
}

// eventStatus is the decision recorded for a reversal event.
func (e *reversalEnv) eventStatus(event string) (status, reason string) {
	e.t.Helper()
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `SELECT status, coalesce(reason, '')
		FROM reversal_events WHERE event_id = $1`, event).Scan(&status, &reason))
	return status, reason
}

// Finding 1: a second cumulative refund above what was paid must not give
// back what the first took: it is the provider's word that everything went
// back, so everything the payment minted is clawed back, and counted.
func TestRefundAbovePaidClawsBackEverything(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	o := e.buy("pi_1")
	waitJobs(t, e.pool, 1)
	require.Equal(t, "completed", e.refund("r1", "pi_1", 500, "usd").State)
	require.Equal(t, int64(499), e.balances()[wallet.Mana])
	j := e.refund("r2", "pi_1", 5000, "usd")
	require.Equal(t, "completed", j.State, j.Errors)
	require.Zero(t, e.balances()[wallet.Mana])
	got := e.order(o.ID)
	require.Equal(t, fulfillment.StatusRefunded, got.Status)
	require.Equal(t, int64(999), got.RefundedAmount)
	require.Equal(t, int64(1000), got.ClawedBackMana)
	require.Equal(t, 5000, count(t, e.pool, `SELECT amount FROM payment_reversals WHERE reversal_id = 'charge:ch_pi_1'`),
		"the fact keeps the provider's amount")
	// An older, smaller cumulative amount redelivered afterwards changes nothing.
	require.Equal(t, "completed", e.refund("r3", "pi_1", 500, "usd").State)
	require.Zero(t, e.balances()[wallet.Mana])
	requireClean(t, e.pool)
}

// Finding 1, disputes: a lost dispute whose closing amount is above the
// charge must not give the Mana back.
func TestLostDisputeAboveChargeKeepsClawback(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	o := e.buy("pi_2")
	waitJobs(t, e.pool, 1)
	require.Equal(t, "completed", e.reverse("d1", "pi_2", "dp_2", fulfillment.ReversalDispute, fulfillment.StateOpen, 999, "usd").State)
	require.Zero(t, e.balances()[wallet.Mana])
	j := e.reverse("d2", "pi_2", "dp_2", fulfillment.ReversalDispute, fulfillment.StateLost, 1005, "usd")
	require.Equal(t, "completed", j.State, j.Errors)
	require.Zero(t, e.balances()[wallet.Mana])
	require.Equal(t, int64(1000), e.order(o.ID).ClawedBackMana)
	require.Equal(t, fulfillment.StatusDisputed, e.order(o.ID).Status)
	requireClean(t, e.pool)
}

// Finding 2: a dispute above the charge (currency movement) is clawed back
// in full, not refused.
func TestDisputeAboveChargeIsClawedBack(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	o := e.buy("pi_3")
	waitJobs(t, e.pool, 1)
	j := e.reverse("d1", "pi_3", "dp_3", fulfillment.ReversalDispute, fulfillment.StateOpen, 1001, "usd")
	require.Equal(t, "completed", j.State, j.Errors)
	require.Zero(t, e.balances()[wallet.Mana])
	require.Equal(t, int64(1000), e.order(o.ID).ClawedBackMana)
	status, _ := e.eventStatus("d1")
	require.Equal(t, fulfillment.EventAccepted, status)
	requireClean(t, e.pool)
}

// Finding 3: a refund in the wrong currency is refused and recorded with
// its reason; the real refund of the same charge is then applied, and so
// is a later, larger cumulative one.
func TestRefusedRefundDoesNotBlockTheRealOne(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	o := e.buy("pi_4")
	waitJobs(t, e.pool, 1)
	j := e.refund("r_eur", "pi_4", 999, "eur")
	require.Equal(t, "cancelled", j.State)
	require.Contains(t, j.Errors[0], "refund in eur, the payment was in usd")
	status, reason := e.eventStatus("r_eur")
	require.Equal(t, fulfillment.EventRefused, status)
	require.Contains(t, reason, "eur")
	require.Equal(t, int64(1000), e.balances()[wallet.Mana])
	require.Equal(t, "completed", e.refund("r_usd", "pi_4", 300, "usd").State)
	require.Equal(t, int64(1000-301), e.balances()[wallet.Mana])
	require.Equal(t, "completed", e.refund("r_usd2", "pi_4", 999, "usd").State)
	require.Zero(t, e.balances()[wallet.Mana])
	require.Equal(t, "usd", e.order(o.ID).Currency)
	requireClean(t, e.pool)
}

// A wrong-currency event that arrives before its payment waits, pending,
// and is refused when the payment is recorded; the valid one is applied.
func TestRefusalDecidedWhenPaymentArrives(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	require.Equal(t, "completed", e.refund("r_eur", "pi_5", 999, "eur").State)
	require.Equal(t, "completed", e.refund("r_usd", "pi_5", 500, "usd").State)
	status, _ := e.eventStatus("r_eur")
	require.Equal(t, fulfillment.EventPending, status)
	e.buy("pi_5")
	require.Equal(t, "completed", waitJobs(t, e.pool, 1)[0].State)
	require.Equal(t, int64(1000-501), e.balances()[wallet.Mana])
	status, _ = e.eventStatus("r_eur")
	require.Equal(t, fulfillment.EventRefused, status)
	status, _ = e.eventStatus("r_usd")
	require.Equal(t, fulfillment.EventAccepted, status)
	requireClean(t, e.pool)
}

// Finding 4: one Checkout Session is one payment. Its completed event
// without a PaymentIntent and its async_payment_succeeded with one are two
// events about the same payment: one mint, nothing unapplied, no refund;
// a refund naming only the PaymentIntent then finds the payment.
func TestOneCheckoutSessionIsOnePayment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refunder := &flakyRefunder{}
	pool := testdb.New(t)
	client := startRiverWith(t, pool, fulfillment.WorkerOptions{Refunders: map[string]fulfillment.Refunder{"stripe": refunder}})
	e := &reversalEnv{t: t, pool: pool, client: client, player: newPlayer(t, pool)}
	o := checkout(t, pool, e.player, "mana_1000", "stripe")
	require.NoError(t, tryPayArgs(pool, client, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_completed",
		Provider: "stripe", PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_1"}))
	require.NoError(t, tryPayArgs(pool, client, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_async",
		Provider: "stripe", PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_1", Aliases: []string{"pi_x"}}))
	for _, j := range waitJobs(t, pool, 2) {
		require.Equal(t, "completed", j.State, j.Errors)
	}
	require.Equal(t, int64(1000), e.balances()[wallet.Mana])
	require.Empty(t, refunder.keys, "the customer's only charge is not refunded")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM payments`))
	ps, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
	require.NoError(t, err)
	aliases, err := fulfillment.PaymentAliases(ctx, pool, ps[0].ID)
	require.NoError(t, err)
	require.Equal(t, []string{"cs_1", "pi_x"}, aliases)

	j := e.reverse("r1", "pi_x", "charge:ch_x", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd")
	require.Equal(t, "completed", j.State, j.Errors)
	require.Zero(t, e.balances()[wallet.Mana])
	requireClean(t, pool)
}

// A refund naming only the PaymentIntent, delivered before the event that
// makes the PaymentIntent an alias, is applied when that event arrives.
func TestRefundByAliasBeforeAliasIsKnown(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	o := checkout(t, e.pool, e.player, "mana_1000", "stripe")
	require.NoError(t, tryPayArgs(e.pool, e.client, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_completed",
		Provider: "stripe", PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_2"}))
	waitJobs(t, e.pool, 1)
	require.Equal(t, "completed", e.reverse("r1", "pi_y", "charge:ch_y", fulfillment.ReversalRefund,
		fulfillment.StateSucceeded, 999, "usd").State)
	require.Equal(t, int64(1000), e.balances()[wallet.Mana], "pi_y is not known yet")
	require.NoError(t, tryPayArgs(e.pool, e.client, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_async",
		Provider: "stripe", PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_2", Aliases: []string{"pi_y"}}))
	require.Equal(t, "completed", waitJobs(t, e.pool, 2)[1].State)
	require.Zero(t, e.balances()[wallet.Mana])
	requireClean(t, e.pool)
}

// An event left pending for a known payment (as the upgrade to provider
// facts leaves a refund the old code refused for exceeding its payment) is
// decided by DecidePending: accepted, clawed back in full, once.
func TestDecidePending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newReversalEnv(t)
	o := e.buy("pi_6")
	waitJobs(t, e.pool, 1)
	_, err := e.pool.Exec(ctx, `INSERT INTO reversal_events (provider, event_id, reversal_id, payment_ref, kind, state,
		amount, currency) VALUES ('stripe', 'migrated:1', 'charge:ch_6', 'pi_6', 'refund', 'succeeded', 5000, 'usd')`)
	require.NoError(t, err)
	w := fulfillment.NewReverseWorker(fulfillment.WorkerOptions{Pool: e.pool, Wallet: wallet.New(e.pool, wallet.Options{})})
	for range 2 { // the second run finds nothing left to decide
		_, err := w.DecidePending(ctx)
		require.NoError(t, err)
	}
	status, _ := e.eventStatus("migrated:1")
	require.Equal(t, fulfillment.EventAccepted, status)
	require.Zero(t, e.balances()[wallet.Mana])
	require.Equal(t, int64(1000), e.order(o.ID).ClawedBackMana)
	n, err := w.DecidePending(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	requireClean(t, e.pool)
}

// Issue 28, finding 2: a payment's facts are each capped at what it paid
// before anything is added, so no sum wraps. A refund of the largest
// amount the provider can send, then a 1-cent dispute on the same
// payment, keeps everything clawed back (the sum once wrapped to a
// negative loss and gave all 1000 Mana back).
func TestHugeRefundThenDisputeDoesNotWrap(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	o := e.buy("pi_w")
	waitJobs(t, e.pool, 1)
	j := e.refund("r_max", "pi_w", math.MaxInt64, "usd")
	require.Equal(t, "completed", j.State, j.Errors)
	require.Zero(t, e.balances()[wallet.Mana])
	j = e.reverse("d_cent", "pi_w", "dp_w", fulfillment.ReversalDispute, fulfillment.StateOpen, 1, "usd")
	require.Equal(t, "completed", j.State, j.Errors)
	require.Zero(t, e.balances()[wallet.Mana], "a 1-cent dispute gives nothing back")
	got := e.order(o.ID)
	require.Equal(t, int64(1000), got.ClawedBackMana)
	require.Equal(t, int64(999), got.RefundedAmount)
	requireClean(t, e.pool)
}

// Finding 2, two refunds whose sum wraps: the order's refunded_amount once
// went negative, its CHECK failed and the job was retried until discarded.
func TestTwoHugeRefundsDoNotWrap(t *testing.T) {
	t.Parallel()
	e := newReversalEnv(t)
	o := e.buy("pi_v")
	waitJobs(t, e.pool, 1)
	half := int64(math.MaxInt64/2 + 1)
	for _, id := range []string{"re_v1", "re_v2"} {
		j := e.reverse("evt_"+id, "pi_v", id, fulfillment.ReversalRefund, fulfillment.StateSucceeded, half, "usd")
		require.Equal(t, "completed", j.State, j.Errors)
		require.Zero(t, e.balances()[wallet.Mana])
	}
	got := e.order(o.ID)
	require.Equal(t, fulfillment.StatusRefunded, got.Status)
	require.Equal(t, int64(999), got.RefundedAmount)
	require.Equal(t, int64(1000), got.ClawedBackMana)
	requireClean(t, e.pool)
}
