package stripe_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/stripe"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
)

var parser = stripe.New(provider.Options{})

// The payment is the Checkout Session; its PaymentIntent an alias.
func TestParseCompletedPayments(t *testing.T) {
	t.Parallel()
	fixture, err := os.ReadFile("testdata/stripe_checkout_session_completed.json")
	require.NoError(t, err)
	stripeFixture := strings.NewReplacer("{{EVENT_ID}}", "evt_fx", "{{API_VERSION}}", stripeevents.APIVersion,
		"{{ORDER_ID}}", "42").Replace(string(fixture))
	at := time.Unix(1_700_000_000, 0)
	providertest.RequireParse(t, parser, []providertest.Case{
		{Name: "fixture", Body: stripeFixture, Payment: &provider.Payment{OrderID: 42, Amount: 999, Currency: "usd", PaymentID: "cs_test_a1b2c3d4e5f6g7h8i9j0", Aliases: []string{"pi_3Q0aBcDeFgHiJkLm0aBcDeFg"}}},
		{Name: "built", Body: string(providerevents.CompletedEventAt("stripe", "evt_b", 42, 999, "usd", at)), Payment: &provider.Payment{OrderID: 42, Amount: 999, Currency: "usd", PaymentID: "cs_test_order_42", Aliases: []string{"pi_order_42"}}},
		{Name: "client_reference_id only", Body: `{"id":"e","type":"checkout.session.completed","data":{"object":{"amount_total":5,"currency":"eur","payment_status":"paid","client_reference_id":"7"}}}`, Payment: &provider.Payment{OrderID: 7, Amount: 5, Currency: "eur", PaymentID: ""}},
		{Name: "async succeeded", Body: `{"id":"e","type":"checkout.session.async_payment_succeeded","data":{"object":{"amount_total":5,"currency":"eur","payment_status":"paid","metadata":{"order_id":"8"}}}}`, Payment: &provider.Payment{OrderID: 8, Amount: 5, Currency: "eur", PaymentID: ""}},
		{Name: "other type", Body: `{"id":"evt_1","type":"invoice.paid","data":{"object":[]}}`, ID: "evt_1"},
		{Name: "unpaid session", Body: `{"id":"evt_2","type":"checkout.session.completed","data":{"object":{"payment_status":"unpaid"}}}`, ID: "evt_2"},
	})
}

func TestParseMalformed(t *testing.T) {
	t.Parallel()
	providertest.RequireParse(t, parser, providertest.Malformed(map[string]string{
		"not json":             `{"id":`,
		"no id":                `{"type":"x"}`,
		"NUL in id":            `{"id":"e\u0000","type":"x"}`,
		"long id":              `{"id":"` + strings.Repeat("e", 256) + `","type":"x"}`,
		"no amount":            `{"id":"e","type":"checkout.session.completed","data":{"object":{"currency":"usd","payment_status":"paid","metadata":{"order_id":"1"}}}}`,
		"negative amount":      `{"id":"e","type":"checkout.session.completed","data":{"object":{"amount_total":-1,"currency":"usd","payment_status":"paid","metadata":{"order_id":"1"}}}}`,
		"order id zero":        `{"id":"e","type":"checkout.session.completed","data":{"object":{"amount_total":1,"currency":"usd","payment_status":"paid","metadata":{"order_id":"0"}}}}`,
		"bad currency":         `{"id":"e","type":"checkout.session.completed","data":{"object":{"amount_total":1,"currency":"us1","payment_status":"paid","metadata":{"order_id":"1"}}}}`,
		"negative refund":      `{"id":"e","type":"charge.refunded","data":{"object":{"id":"ch","amount_refunded":-1,"currency":"usd","payment_intent":"pi"}}}`,
		"refund no amount":     `{"id":"e","type":"charge.refunded","data":{"object":{"id":"ch","currency":"usd","payment_intent":"pi"}}}`,
		"refund no charge id":  `{"id":"e","type":"charge.refunded","data":{"object":{"amount_refunded":1,"currency":"usd","payment_intent":"pi"}}}`,
		"refund empty charge":  `{"id":"e","type":"charge.refunded","data":{"object":{"id":"","amount_refunded":1,"currency":"usd","payment_intent":"pi"}}}`,
		"dispute bad currency": `{"id":"e","type":"charge.dispute.created","data":{"object":{"id":"dp","amount":1,"currency":"u$d","payment_intent":"pi"}}}`,
		"dispute no payment":   `{"id":"e","type":"charge.dispute.created","data":{"object":{"id":"dp","amount":1,"currency":"usd"}}}`,
		"dispute no id":        `{"id":"e","type":"charge.dispute.created","data":{"object":{"amount":1,"currency":"usd","payment_intent":"pi"}}}`,
	}))
}

// Refunds and disputes name the payment by its PaymentIntent, with the
// charge as the other reference; a refund is keyed by its charge.
func TestParseReversals(t *testing.T) {
	t.Parallel()
	providertest.RequireParse(t, parser, []providertest.Case{
		{Name: "refund built", Body: string(providerevents.ReversalEvent("stripe", "e", "pi_1", "ch_1", "refund", "succeeded", 300, "usd")),
			Reversal: &provider.Reversal{PaymentID: "pi_1", ReversalID: "charge:ch_1", Kind: "refund", State: "succeeded", Amount: 300, Currency: "usd", OtherRef: "ch_1"}},
		{Name: "charge without payment intent", Body: `{"id":"e","type":"charge.refunded","data":{"object":{"id":"ch_2","amount":999,"amount_refunded":999,"currency":"usd","payment_intent":null}}}`,
			Reversal: &provider.Reversal{PaymentID: "ch_2", ReversalID: "charge:ch_2", Kind: "refund", State: "succeeded", Amount: 999, Currency: "usd"}},
		{Name: "dispute created", Body: string(providerevents.ReversalEvent("stripe", "e", "pi_1", "dp_1", "dispute", "open", 999, "usd")),
			Reversal: &provider.Reversal{PaymentID: "pi_1", ReversalID: "dp_1", Kind: "dispute", State: "open", Amount: 999, Currency: "usd", OtherRef: "ch_pi_1"}},
		{Name: "dispute won", Body: `{"id":"e","type":"charge.dispute.closed","data":{"object":{"id":"dp_1","amount":5,"currency":"eur","charge":"ch_9","payment_intent":{"id":"pi_9"},"status":"won"}}}`,
			Reversal: &provider.Reversal{PaymentID: "pi_9", ReversalID: "dp_1", Kind: "dispute", State: "won", Amount: 5, Currency: "eur", OtherRef: "ch_9"}},
		{Name: "inquiry closed", Body: `{"id":"e","type":"charge.dispute.closed","data":{"object":{"id":"dp_2","amount":5,"currency":"eur","charge":"ch_9","status":"warning_closed"}}}`,
			Reversal: &provider.Reversal{PaymentID: "ch_9", ReversalID: "dp_2", Kind: "dispute", State: "won", Amount: 5, Currency: "eur"}},
	})
}

// Issue 28, finding 3: every documented dispute status is mapped, per
// event; a closing event in an open status, and any status not
// documented, is refused with its reason (a dispute closed under_review,
// prevented or charge_refunded once counted as won).
func TestDisputeStatesEnumerated(t *testing.T) {
	t.Parallel()
	body := func(typ, status string) []byte {
		return []byte(`{"id":"e","type":"` + typ + `","data":{"object":{"id":"dp_1","amount":5,"currency":"usd","charge":"ch_1","payment_intent":"pi_1","status":"` + status + `"}}}`)
	}
	refused := ""
	want := map[string][2]string{ // status: state on created, on closed
		"warning_needs_response": {"open", refused}, "warning_under_review": {"open", refused},
		"needs_response": {"open", refused}, "under_review": {"open", refused},
		"warning_closed": {"won", "won"}, "won": {"won", "won"},
		"lost": {"lost", "lost"}, "prevented": {"lost", "lost"}, "charge_refunded": {"lost", "lost"},
		"": {refused, refused}, "accepted": {refused, refused}, "WON": {refused, refused},
	}
	for status, states := range want {
		for i, typ := range []string{stripe.EventDisputeCreated, stripe.EventDisputeClosed} {
			ev, err := parser.Parse(body(typ, status))
			if states[i] == refused {
				// Signed and JSON: an event to claim and record refused.
				require.NoError(t, err, "%s %q", typ, status)
				require.Nil(t, ev.Reversal, "%s %q", typ, status)
				require.Contains(t, ev.Refused, "status", "%s %q", typ, status)
				continue
			}
			require.NoError(t, err, "%s %q", typ, status)
			require.Equal(t, states[i], ev.Reversal.State, "%s %q", typ, status)
		}
	}
	for _, e := range stripe.States.Events {
		for status, m := range e.States {
			if m.State != provider.StateRefused {
				require.Contains(t, []string{"succeeded", "open", "won", "lost"}, m.State, "%s %q", e.Type, status)
			}
		}
	}
}
