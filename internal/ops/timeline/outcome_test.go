package timeline_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// A refund refused as it was read (a negative amount) has no reversal
// event: its claim names the payment, and the payment's timeline shows it,
// refused with its reason; each delivery line says its outcome. Looking up
// the refused event's id finds the payment too.
func TestRefusedEventInPaymentTimeline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	o := e.open(provider.Stripe, "")
	require.Equal(t, "completed", e.pay(o, "evt_pay"))
	pi := providerevents.OrderPaymentID(provider.Stripe, strconv.FormatInt(o.ID, 10))
	bad := []byte(`{"id":"evt_neg","type":"charge.refunded","data":{"object":{"id":"ch_1","amount_refunded":-5,` +
		`"currency":"usd","payment_intent":"` + pi + `"}}}`)
	require.Equal(t, "claimed", e.deliver(provider.Stripe, bad))

	for _, id := range []string{pi, "evt_neg"} {
		tl, err := timeline.Payment(ctx, e.pool, registry, provider.Stripe, id)
		require.NoError(t, err, id)
		details := map[string]string{}
		for _, l := range ofType(tl, "delivery_claimed") {
			details[l.Keys[0].Value] = strings.Join(l.Details, "; ")
		}
		require.Contains(t, details["evt_neg"], "outcome: refused: ", id)
		require.Contains(t, details["evt_neg"], "non-negative amount", id)
		require.Contains(t, details["evt_pay"], "outcome: applied, made wallet_transaction:", id)
	}
	e.requireClean()
}
