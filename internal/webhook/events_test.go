package webhook

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/devwebhook"
)

func TestParseEventCompletedPayments(t *testing.T) {
	t.Parallel()
	fixture, err := os.ReadFile("testdata/stripe_checkout_session_completed.json")
	require.NoError(t, err)
	stripeFixture := strings.NewReplacer("{{EVENT_ID}}", "evt_fx", "{{API_VERSION}}", devwebhook.StripeAPIVersion,
		"{{ORDER_ID}}", "42").Replace(string(fixture))
	at := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		name, provider, body string
		want                 Payment
	}{
		{"stripe fixture", "stripe", stripeFixture, Payment{OrderID: 42, Amount: 999, Currency: "usd", PaymentID: "cs_test_a1b2c3d4e5f6g7h8i9j0", Aliases: []string{"pi_3Q0aBcDeFgHiJkLm0aBcDeFg"}}},
		{"stripe built", "stripe", string(devwebhook.CompletedEventAt("stripe", "evt_b", 42, 999, "usd", at)), Payment{OrderID: 42, Amount: 999, Currency: "usd", PaymentID: "cs_test_order_42", Aliases: []string{"pi_order_42"}}},
		{"stripe client_reference_id only", "stripe", `{"id":"e","type":"checkout.session.completed","data":{"object":{"amount_total":5,"currency":"eur","payment_status":"paid","client_reference_id":"7"}}}`, Payment{OrderID: 7, Amount: 5, Currency: "eur", PaymentID: ""}},
		{"stripe async succeeded", "stripe", `{"id":"e","type":"checkout.session.async_payment_succeeded","data":{"object":{"amount_total":5,"currency":"eur","payment_status":"paid","metadata":{"order_id":"8"}}}}`, Payment{OrderID: 8, Amount: 5, Currency: "eur", PaymentID: ""}},
		{"paddle built", "paddle", string(devwebhook.CompletedEventAt("paddle", "evt_p", 42, 3999, "USD", at)), Payment{OrderID: 42, Amount: 3999, Currency: "USD", PaymentID: "txn_order_42"}},
		{"paddle numeric order id, total only", "paddle", `{"event_id":"e","event_type":"transaction.completed","data":{"currency_code":"GBP","custom_data":{"order_id":9},"details":{"totals":{"total":"120"}}}}`, Payment{OrderID: 9, Amount: 120, Currency: "GBP", PaymentID: ""}},
		{"creem built", "creem", string(devwebhook.CompletedEventAt("creem", "evt_c", 42, 999, "EUR", at)), Payment{OrderID: 42, Amount: 999, Currency: "EUR", PaymentID: "ord_order_42", Aliases: []string{"ch_order_42"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, err := ParseEvent(c.provider, []byte(c.body))
			require.NoError(t, err)
			require.NotNil(t, ev.Payment)
			require.Equal(t, c.want, *ev.Payment)
			require.Equal(t, c.provider, ev.Provider)
		})
	}
}

func TestParseEventWithoutPayment(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, provider, body, id string }{
		{"stripe other type", "stripe", `{"id":"evt_1","type":"invoice.paid","data":{"object":[]}}`, "evt_1"},
		{"stripe unpaid session", "stripe", `{"id":"evt_2","type":"checkout.session.completed","data":{"object":{"payment_status":"unpaid"}}}`, "evt_2"},
		{"paddle other type", "paddle", `{"event_id":"evt_3","event_type":"price.created","data":null}`, "evt_3"},
		{"creem other type", "creem", `{"id":"evt_4","eventType":"subscription.active","object":{}}`, "evt_4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, err := ParseEvent(c.provider, []byte(c.body))
			require.NoError(t, err)
			require.Nil(t, ev.Payment)
			require.Equal(t, c.id, ev.ID)
		})
	}
}

func TestParseEventMalformed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, provider, body string }{
		{"not json", "stripe", `{"id":`},
		{"array", "paddle", `[]`},
		{"no id", "stripe", `{"type":"x"}`},
		{"no type", "creem", `{"id":"e"}`},
		{"NUL in id", "stripe", `{"id":"e\u0000","type":"x"}`},
		{"long id", "stripe", `{"id":"` + strings.Repeat("e", 256) + `","type":"x"}`},
		{"stripe no amount", "stripe", `{"id":"e","type":"checkout.session.completed","data":{"object":{"currency":"usd","payment_status":"paid","metadata":{"order_id":"1"}}}}`},
		{"stripe negative amount", "stripe", `{"id":"e","type":"checkout.session.completed","data":{"object":{"amount_total":-1,"currency":"usd","payment_status":"paid","metadata":{"order_id":"1"}}}}`},
		{"stripe order id zero", "stripe", `{"id":"e","type":"checkout.session.completed","data":{"object":{"amount_total":1,"currency":"usd","payment_status":"paid","metadata":{"order_id":"0"}}}}`},
		{"stripe bad currency", "stripe", `{"id":"e","type":"checkout.session.completed","data":{"object":{"amount_total":1,"currency":"us1","payment_status":"paid","metadata":{"order_id":"1"}}}}`},
		{"paddle total not integer", "paddle", `{"event_id":"e","event_type":"transaction.completed","data":{"currency_code":"USD","custom_data":{"order_id":"1"},"details":{"totals":{"grand_total":"9.99"}}}}`},
		{"paddle no data", "paddle", `{"event_id":"e","event_type":"transaction.completed"}`},
		{"creem order id float", "creem", `{"id":"e","eventType":"checkout.completed","object":{"order":{"amount":1,"currency":"usd"},"metadata":{"order_id":1.5}}}`},
		{"creem no order", "creem", `{"id":"e","eventType":"checkout.completed","object":{"metadata":{"order_id":"1"}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseEvent(c.provider, []byte(c.body))
			require.ErrorIs(t, err, ErrMalformedPayload)
		})
	}
}

func TestParseEventReversals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, provider, body string
		want                 Reversal
	}{
		{"stripe refund built", "stripe", string(devwebhook.ReversalEvent("stripe", "e", "pi_1", "ch_1", "refund", "succeeded", 300, "usd")),
			Reversal{PaymentID: "pi_1", ReversalID: "charge:ch_1", Kind: "refund", State: "succeeded", Amount: 300, Currency: "usd", OtherRef: "ch_1"}},
		{"stripe charge without payment intent", "stripe", `{"id":"e","type":"charge.refunded","data":{"object":{"id":"ch_2","amount":999,"amount_refunded":999,"currency":"usd","payment_intent":null}}}`,
			Reversal{PaymentID: "ch_2", ReversalID: "charge:ch_2", Kind: "refund", State: "succeeded", Amount: 999, Currency: "usd"}},
		{"stripe dispute created", "stripe", string(devwebhook.ReversalEvent("stripe", "e", "pi_1", "dp_1", "dispute", "open", 999, "usd")),
			Reversal{PaymentID: "pi_1", ReversalID: "dp_1", Kind: "dispute", State: "open", Amount: 999, Currency: "usd", OtherRef: "ch_pi_1"}},
		{"stripe dispute won", "stripe", `{"id":"e","type":"charge.dispute.closed","data":{"object":{"id":"dp_1","amount":5,"currency":"eur","charge":"ch_9","payment_intent":{"id":"pi_9"},"status":"won"}}}`,
			Reversal{PaymentID: "pi_9", ReversalID: "dp_1", Kind: "dispute", State: "won", Amount: 5, Currency: "eur", OtherRef: "ch_9"}},
		{"stripe inquiry closed", "stripe", `{"id":"e","type":"charge.dispute.closed","data":{"object":{"id":"dp_2","amount":5,"currency":"eur","charge":"ch_9","status":"warning_closed"}}}`,
			Reversal{PaymentID: "ch_9", ReversalID: "dp_2", Kind: "dispute", State: "won", Amount: 5, Currency: "eur"}},
		{"paddle refund", "paddle", string(devwebhook.ReversalEvent("paddle", "e", "txn_1", "adj_1", "refund", "succeeded", 120, "USD")),
			Reversal{PaymentID: "txn_1", ReversalID: "adj_1", Kind: "refund", State: "succeeded", Amount: 120, Currency: "USD"}},
		{"paddle chargeback", "paddle", string(devwebhook.ReversalEvent("paddle", "e", "txn_1", "adj_2", "dispute", "lost", 120, "USD")),
			Reversal{PaymentID: "txn_1", ReversalID: "chargeback:txn_1", Kind: "dispute", State: "lost", Amount: 120, Currency: "USD"}},
		{"paddle chargeback reversed", "paddle", string(devwebhook.ReversalEvent("paddle", "e", "txn_1", "adj_3", "dispute", "won", 120, "USD")),
			Reversal{PaymentID: "txn_1", ReversalID: "chargeback:txn_1", Kind: "dispute", State: "won", Amount: 120, Currency: "USD"}},
		{"creem refund", "creem", string(devwebhook.ReversalEvent("creem", "e", "ord_1", "ref_1", "refund", "succeeded", 10, "EUR")),
			Reversal{PaymentID: "ord_1", ReversalID: "ref_1", Kind: "refund", State: "succeeded", Amount: 10, Currency: "EUR"}},
		{"creem dispute", "creem", string(devwebhook.ReversalEvent("creem", "e", "ord_1", "disp_1", "dispute", "open", 10, "EUR")),
			Reversal{PaymentID: "ord_1", ReversalID: "disp_1", Kind: "dispute", State: "open", Amount: 10, Currency: "EUR"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, err := ParseEvent(c.provider, []byte(c.body))
			require.NoError(t, err)
			require.Nil(t, ev.Payment)
			require.NotNil(t, ev.Reversal)
			require.Equal(t, c.want, *ev.Reversal)
		})
	}
}

// Paddle adjustments are acted on once approved; credits and warnings never.
func TestParseEventPaddleAdjustmentsAcknowledgedOnly(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"event_id":"e","event_type":"adjustment.created","data":{"id":"adj_1","action":"refund","transaction_id":"txn_1","status":"pending_approval","totals":{"total":"5","currency_code":"USD"}}}`,
		`{"event_id":"e","event_type":"adjustment.updated","data":{"id":"adj_1","action":"refund","transaction_id":"txn_1","status":"rejected","totals":{"total":"5","currency_code":"USD"}}}`,
		`{"event_id":"e","event_type":"adjustment.created","data":{"id":"adj_2","action":"credit","transaction_id":"txn_1","status":"approved","totals":{"total":"5","currency_code":"USD"}}}`,
		`{"event_id":"e","event_type":"adjustment.created","data":{"id":"adj_3","action":"chargeback_warning","transaction_id":"txn_1","status":"approved","totals":{"total":"5","currency_code":"USD"}}}`,
	} {
		ev, err := ParseEvent("paddle", []byte(body))
		require.NoError(t, err)
		require.Nil(t, ev.Reversal, body)
	}
}

func TestParseEventReversalsMalformed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, provider, body string }{
		{"stripe negative refund", "stripe", `{"id":"e","type":"charge.refunded","data":{"object":{"id":"ch","amount_refunded":-1,"currency":"usd","payment_intent":"pi"}}}`},
		{"stripe refund no amount", "stripe", `{"id":"e","type":"charge.refunded","data":{"object":{"id":"ch","currency":"usd","payment_intent":"pi"}}}`},
		{"stripe dispute bad currency", "stripe", `{"id":"e","type":"charge.dispute.created","data":{"object":{"id":"dp","amount":1,"currency":"u$d","payment_intent":"pi"}}}`},
		{"stripe dispute no payment", "stripe", `{"id":"e","type":"charge.dispute.created","data":{"object":{"id":"dp","amount":1,"currency":"usd"}}}`},
		{"stripe dispute no id", "stripe", `{"id":"e","type":"charge.dispute.created","data":{"object":{"amount":1,"currency":"usd","payment_intent":"pi"}}}`},
		{"paddle total not integer", "paddle", `{"event_id":"e","event_type":"adjustment.updated","data":{"id":"adj","action":"refund","transaction_id":"txn","status":"approved","totals":{"total":"1.5","currency_code":"USD"}}}`},
		{"paddle no transaction", "paddle", `{"event_id":"e","event_type":"adjustment.updated","data":{"id":"adj","action":"refund","status":"approved","totals":{"total":"1","currency_code":"USD"}}}`},
		{"creem empty refund", "creem", `{"id":"e","eventType":"refund.created","object":{}}`},
		{"creem negative dispute", "creem", `{"id":"e","eventType":"dispute.created","object":{"id":"d","amount":-5,"currency":"EUR","order":{"id":"ord"}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseEvent(c.provider, []byte(c.body))
			require.ErrorIs(t, err, ErrMalformedPayload)
		})
	}
}
