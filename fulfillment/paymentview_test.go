package fulfillment_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
)

// A double charge as the read model shows it: the order's first payment
// applied, the second unapplied; a partial refund makes the first
// partially_refunded, refunds at the provider covering the second (each
// far above what it paid, whose sum would overflow int64) make it refunded
// and take it off the unapplied list, and a dispute is listed with its
// state.
func TestPaymentViewsDoubleChargeRefundsAndDispute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newReversalEnv(t)
	o := e.buy("pi_a")
	waitJobs(t, e.pool, 1) // pi_a applies: the second payment is the double charge
	payWith(t, e.pool, e.client, "stripe", "evt_pi_b", "pi_b", o.ID, 999, "usd")
	waitJobs(t, e.pool, 2)
	views, err := fulfillment.OrderPayments(ctx, e.pool, o.ID)
	require.NoError(t, err)
	require.Len(t, views, 2)
	require.Equal(t, []string{fulfillment.PaymentApplied, fulfillment.PaymentUnapplied}, shown(views))

	e.reverse("r1", "pi_a", "charge:ch_a", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 333, "usd")
	e.reverse("d1", "pi_a", "dp_a", fulfillment.ReversalDispute, fulfillment.StateOpen, 100, "usd")
	views, err = fulfillment.OrderPayments(ctx, e.pool, o.ID)
	require.NoError(t, err)
	require.Equal(t, []string{fulfillment.PaymentPartiallyRefunded, fulfillment.PaymentUnapplied}, shown(views))
	require.Equal(t, int64(333), views[0].RefundedAmount, "a dispute is not a refund")
	require.Len(t, views[0].Reversals, 2)
	require.Equal(t, fulfillment.ReversalView{ReversalID: "charge:ch_a", Kind: fulfillment.ReversalRefund,
		State: fulfillment.StateSucceeded, Amount: 333, Currency: "usd",
		CreatedAt: views[0].Reversals[0].CreatedAt, UpdatedAt: views[0].Reversals[0].UpdatedAt}, views[0].Reversals[0])
	require.Equal(t, "dp_a", views[0].Reversals[1].ReversalID)
	require.Equal(t, fulfillment.StateOpen, views[0].Reversals[1].State)
	unapplied, err := fulfillment.PaymentViews(ctx, e.pool, fulfillment.PaymentViewParams{UnappliedOnly: true})
	require.NoError(t, err)
	require.Len(t, unapplied, 1)
	require.Equal(t, "pi_b", unapplied[0].Payment.PaymentID)

	for _, ch := range []string{"charge:ch_b1", "charge:ch_b2"} {
		e.reverse("r_"+ch, "pi_b", ch, fulfillment.ReversalRefund, fulfillment.StateSucceeded, math.MaxInt64, "usd")
	}
	views, err = fulfillment.OrderPayments(ctx, e.pool, o.ID)
	require.NoError(t, err)
	require.Equal(t, []string{fulfillment.PaymentPartiallyRefunded, fulfillment.PaymentRefunded}, shown(views))
	require.Equal(t, int64(999), views[1].RefundedAmount, "capped at what it paid, without overflow")
	require.Equal(t, fulfillment.PaymentRefunded, views[1].Payment.Status, "refunded in full by the provider: recorded refunded, nothing asked of the refund API")
	unapplied, err = fulfillment.PaymentViews(ctx, e.pool, fulfillment.PaymentViewParams{UnappliedOnly: true})
	require.NoError(t, err)
	require.Empty(t, unapplied, "refunded by the provider: nothing left to refund")

	e.reverse("r2", "pi_a", "charge:ch_a", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd")
	views, err = fulfillment.OrderPayments(ctx, e.pool, o.ID)
	require.NoError(t, err)
	require.Equal(t, []string{fulfillment.PaymentRefunded, fulfillment.PaymentRefunded}, shown(views))
	none, err := fulfillment.OrderPayments(ctx, e.pool, o.ID+1000)
	require.NoError(t, err)
	require.Empty(t, none)
	requireClean(t, e.pool)
}

// An unapplied payment we refunded (its refund id recorded) shows refunded
// with all of its amount back, before any provider fact arrives.
func TestPaymentViewsRefundedByUs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newReversalEnv(t)
	o := e.buy("pi_a")
	waitJobs(t, e.pool, 1) // pi_a applies: the second payment is the double charge
	payWith(t, e.pool, e.client, "stripe", "evt_pi_b", "pi_b", o.ID, 999, "usd")
	waitJobs(t, e.pool, 2)
	views, err := fulfillment.OrderPayments(ctx, e.pool, o.ID)
	require.NoError(t, err)
	_, _, err = fulfillment.MarkRefunded(ctx, e.pool, views[1].Payment.ID, "re_by_hand")
	require.NoError(t, err)
	views, err = fulfillment.OrderPayments(ctx, e.pool, o.ID)
	require.NoError(t, err)
	require.Equal(t, []string{fulfillment.PaymentApplied, fulfillment.PaymentRefunded}, shown(views))
	require.Equal(t, int64(999), views[1].RefundedAmount)
	require.Equal(t, "re_by_hand", views[1].Payment.RefundID)
	requireClean(t, e.pool)
}

func shown(views []fulfillment.PaymentView) []string {
	out := make([]string, len(views))
	for i, v := range views {
		out[i] = v.Status
	}
	return out
}
