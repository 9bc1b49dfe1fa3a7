package stripeevents_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
)

const secret = "whsec_test"

// The builder's events are what stripe-go reads as a paid Checkout
// Session, under stripe-go's API version.
func TestCompletedReadByStripeGo(t *testing.T) {
	t.Parallel()
	require.Equal(t, stripeapi.APIVersion, stripeevents.APIVersion)
	body := stripeevents.Completed("evt_built", 42, 999, "usd", time.Now())
	_, header := stripeevents.Sign(secret, body, time.Now())
	ev, err := stripewebhook.ConstructEvent(body, header, secret)
	require.NoError(t, err)
	require.Equal(t, stripeapi.EventTypeCheckoutSessionCompleted, ev.Type)
	var s stripeapi.CheckoutSession
	require.NoError(t, json.Unmarshal(ev.Data.Raw, &s))
	require.Equal(t, int64(999), s.AmountTotal)
	require.Equal(t, stripeapi.CurrencyUSD, s.Currency)
	require.Equal(t, "42", s.Metadata["order_id"])
	require.Equal(t, stripeapi.CheckoutSessionPaymentStatusPaid, s.PaymentStatus)
	require.Equal(t, stripeevents.OrderSessionID("42"), s.ID)
}

// Our signer and stripe-go's agree, and stripe-go accepts the full
// fixture of a real checkout.session.completed under its own signature.
func TestSignAgreesWithStripeGo(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../testdata/stripe_checkout_session_completed.json")
	require.NoError(t, err)
	body := []byte(strings.NewReplacer("{{EVENT_ID}}", "evt_fx", "{{API_VERSION}}", stripeapi.APIVersion,
		"{{ORDER_ID}}", "42").Replace(string(b)))
	at := time.Now()
	h, ours := stripeevents.Sign(secret, body, at)
	h2, theirs := stripeevents.SignByStripeGo(secret, body, at)
	require.Equal(t, h, h2)
	require.Equal(t, theirs, ours)
	ev, err := stripewebhook.ConstructEvent(body, theirs, secret)
	require.NoError(t, err)
	require.Equal(t, stripeapi.EventTypeCheckoutSessionCompleted, ev.Type)
}
