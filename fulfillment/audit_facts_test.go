package fulfillment_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
)

// Invariant 10's one payment per provider object reads each payload where
// its driver's facts say the object lies, not where the audit would guess:
// the planted double payment (two Stripe payments of one Checkout
// Session) is found through the drivers' facts, and moving Stripe's
// PaymentObject (or leaving Stripe out) changes what the audit sees.
func TestAuditReadsPaymentObjectsWhereTheFactsSay(t *testing.T) {
	t.Parallel()
	b := newAuditBase(t)
	auditBreaks["payments_per_provider_object"](b)
	checks := func(facts []provider.Facts) []string {
		vs, err := fulfillment.AuditPayments(context.Background(), b.pool, facts...)
		require.NoError(t, err)
		var found []string
		for _, v := range vs {
			found = append(found, v.Check)
		}
		return found
	}
	facts := drivers.Facts()
	require.Contains(t, checks(facts), "payments_per_provider_object", "the drivers' facts find the double payment")

	var moved, withoutStripe []provider.Facts
	for _, f := range facts {
		if f.Name == provider.Stripe {
			require.Equal(t, []string{"data", "object", "id"}, f.PaymentObject)
			f.PaymentObject = []string{"data", "object", "payment_intent"} // only the second payload has one
			moved = append(moved, f)
			continue
		}
		moved, withoutStripe = append(moved, f), append(withoutStripe, f)
	}
	require.NotContains(t, checks(moved), "payments_per_provider_object", "the audit read a path no fact gave")
	require.NotContains(t, checks(withoutStripe), "payments_per_provider_object", "the audit knew Stripe without its facts")
}
