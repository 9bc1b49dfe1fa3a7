package creem_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/creem"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

var parser = creem.New(provider.Options{})

// The payment is Creem's order; its checkout is an alias.
func TestParseCompletedPayments(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	providertest.RequireParse(t, parser, []providertest.Case{
		{Name: "built", Body: string(providerevents.CompletedEventAt("creem", "evt_c", 42, 999, "EUR", at)),
			Payment: &provider.Payment{OrderID: 42, Amount: 999, Currency: "EUR", PaymentID: "ord_order_42", Aliases: []string{"ch_order_42"}}},
		{Name: "other type", Body: `{"id":"evt_4","eventType":"subscription.active","object":{}}`, ID: "evt_4"},
	})
}

func TestParseMalformed(t *testing.T) {
	t.Parallel()
	providertest.RequireParse(t, parser, providertest.Malformed(map[string]string{
		"no type":          `{"id":"e"}`,
		"order id float":   `{"id":"e","eventType":"checkout.completed","object":{"order":{"amount":1,"currency":"usd"},"metadata":{"order_id":1.5}}}`,
		"no order":         `{"id":"e","eventType":"checkout.completed","object":{"metadata":{"order_id":"1"}}}`,
		"empty refund":     `{"id":"e","eventType":"refund.created","object":{}}`,
		"negative dispute": `{"id":"e","eventType":"dispute.created","object":{"id":"d","amount":-5,"currency":"EUR","order":{"id":"ord"}}}`,
	}))
}

// Refunds and disputes name Creem's order, with its checkout as the other
// reference.
func TestParseReversals(t *testing.T) {
	t.Parallel()
	providertest.RequireParse(t, parser, []providertest.Case{
		{Name: "refund", Body: string(providerevents.ReversalEvent("creem", "e", "ord_1", "ref_1", "refund", "succeeded", 10, "EUR")),
			Reversal: &provider.Reversal{PaymentID: "ord_1", ReversalID: "ref_1", Kind: "refund", State: "succeeded", Amount: 10, Currency: "EUR"}},
		{Name: "dispute", Body: string(providerevents.ReversalEvent("creem", "e", "ord_1", "disp_1", "dispute", "open", 10, "EUR")),
			Reversal: &provider.Reversal{PaymentID: "ord_1", ReversalID: "disp_1", Kind: "dispute", State: "open", Amount: 10, Currency: "EUR"}},
		{Name: "refund naming order and checkout", Body: `{"id":"e","eventType":"refund.created","object":{"id":"ref_2","refund_amount":5,"refund_currency":"EUR","order":{"id":"ord_2"},"checkout":{"id":"ch_2"}}}`,
			Reversal: &provider.Reversal{PaymentID: "ord_2", ReversalID: "ref_2", Kind: "refund", State: "succeeded", Amount: 5, Currency: "EUR", OtherRef: "ch_2"}},
	})
}

// Issue 28, finding 3: a refund whose status is not a made refund is
// refused with its reason, not counted.
func TestRefundStatesEnumerated(t *testing.T) {
	t.Parallel()
	for status, ok := range map[string]bool{"succeeded": true, "": true, "pending": false, "failed": false, "canceled": false} {
		body := `{"id":"e","eventType":"refund.created","object":{"id":"ref_1","status":"` + status +
			`","refund_amount":5,"refund_currency":"EUR","order":{"id":"ord_1"}}}`
		ev, err := parser.Parse([]byte(body))
		if ok {
			require.NoError(t, err, status)
			require.Equal(t, provider.StateSucceeded, ev.Reversal.State)
			continue
		}
		// Signed and JSON: an event to claim and record refused.
		require.NoError(t, err, status)
		require.Nil(t, ev.Reversal, status)
		require.Contains(t, ev.Refused, `unknown refund.created status "`+status+`"`)
	}
}
