package paddle_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/paddle"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

var parser = paddle.New(provider.Options{})

// The payment is the transaction.
func TestParseCompletedPayments(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	providertest.RequireParse(t, parser, []providertest.Case{
		{Name: "built", Body: string(providerevents.CompletedEventAt("paddle", "evt_p", 42, 3999, "USD", at)), Payment: &provider.Payment{OrderID: 42, Amount: 3999, Currency: "USD", PaymentID: "txn_order_42"}},
		{Name: "numeric order id, total only", Body: `{"event_id":"e","event_type":"transaction.completed","data":{"currency_code":"GBP","custom_data":{"order_id":9},"details":{"totals":{"total":"120"}}}}`, Payment: &provider.Payment{OrderID: 9, Amount: 120, Currency: "GBP", PaymentID: ""}},
		{Name: "other type", Body: `{"event_id":"evt_3","event_type":"price.created","data":null}`, ID: "evt_3"},
	})
}

func TestParseMalformed(t *testing.T) {
	t.Parallel()
	providertest.RequireParse(t, parser, providertest.Malformed(map[string]string{
		"array":                          `[]`,
		"total not integer":              `{"event_id":"e","event_type":"transaction.completed","data":{"currency_code":"USD","custom_data":{"order_id":"1"},"details":{"totals":{"grand_total":"9.99"}}}}`,
		"no data":                        `{"event_id":"e","event_type":"transaction.completed"}`,
		"adjustment total not integer":   `{"event_id":"e","event_type":"adjustment.updated","data":{"id":"adj","action":"refund","transaction_id":"txn","status":"approved","totals":{"total":"1.5","currency_code":"USD"}}}`,
		"adjustment without transaction": `{"event_id":"e","event_type":"adjustment.updated","data":{"id":"adj","action":"refund","status":"approved","totals":{"total":"1","currency_code":"USD"}}}`,
	}))
}

// A chargeback and its reversal are one dispute, keyed by the
// transaction; adjustments are acted on once approved, credits and
// warnings never.
func TestParseReversals(t *testing.T) {
	t.Parallel()
	providertest.RequireParse(t, parser, []providertest.Case{
		{Name: "refund", Body: string(providerevents.ReversalEvent("paddle", "e", "txn_1", "adj_1", "refund", "succeeded", 120, "USD")),
			Reversal: &provider.Reversal{PaymentID: "txn_1", ReversalID: "adj_1", Kind: "refund", State: "succeeded", Amount: 120, Currency: "USD"}},
		{Name: "chargeback", Body: string(providerevents.ReversalEvent("paddle", "e", "txn_1", "adj_2", "dispute", "lost", 120, "USD")),
			Reversal: &provider.Reversal{PaymentID: "txn_1", ReversalID: "chargeback:txn_1", Kind: "dispute", State: "lost", Amount: 120, Currency: "USD"}},
		{Name: "chargeback reversed", Body: string(providerevents.ReversalEvent("paddle", "e", "txn_1", "adj_3", "dispute", "won", 120, "USD")),
			Reversal: &provider.Reversal{PaymentID: "txn_1", ReversalID: "chargeback:txn_1", Kind: "dispute", State: "won", Amount: 120, Currency: "USD"}},
		{Name: "pending refund", Body: `{"event_id":"e","event_type":"adjustment.created","data":{"id":"adj_1","action":"refund","transaction_id":"txn_1","status":"pending_approval","totals":{"total":"5","currency_code":"USD"}}}`},
		{Name: "rejected refund", Body: `{"event_id":"e","event_type":"adjustment.updated","data":{"id":"adj_1","action":"refund","transaction_id":"txn_1","status":"rejected","totals":{"total":"5","currency_code":"USD"}}}`},
		{Name: "credit", Body: `{"event_id":"e","event_type":"adjustment.created","data":{"id":"adj_2","action":"credit","transaction_id":"txn_1","status":"approved","totals":{"total":"5","currency_code":"USD"}}}`},
		{Name: "chargeback warning", Body: `{"event_id":"e","event_type":"adjustment.created","data":{"id":"adj_3","action":"chargeback_warning","transaction_id":"txn_1","status":"approved","totals":{"total":"5","currency_code":"USD"}}}`},
	})
	require.Equal(t, "chargeback:txn_1", paddle.ChargebackID("txn_1"))
}

// Issue 28, finding 3: every documented action and status of an
// adjustment is mapped; anything else is refused with its reason.
func TestAdjustmentStatesEnumerated(t *testing.T) {
	t.Parallel()
	body := func(action, status string) []byte {
		return []byte(`{"event_id":"e","event_type":"adjustment.updated","data":{"id":"adj_1","action":"` + action +
			`","transaction_id":"txn_1","status":"` + status + `","totals":{"total":"5","currency_code":"USD"}}}`)
	}
	const ignored, refused = "ignored", "refused"
	for _, c := range []struct{ action, status, want string }{
		{"refund", "approved", "succeeded"}, {"refund", "pending_approval", ignored}, {"refund", "rejected", ignored},
		{"refund", "reversed", refused},
		{"chargeback", "approved", "lost"}, {"chargeback", "pending_approval", ignored}, {"chargeback", "reversed", refused},
		{"chargeback_reverse", "approved", "won"}, {"chargeback_reverse", "rejected", ignored},
		{"chargeback_warning", "approved", ignored}, {"credit", "approved", ignored}, {"credit_reverse", "approved", ignored},
		{"refund", "approvedd", refused}, {"refund", "", refused}, {"giveaway", "approved", refused}, {"", "approved", refused},
	} {
		ev, err := parser.Parse(body(c.action, c.status))
		switch c.want {
		case refused:
			// Signed and JSON: an event to claim and record refused.
			require.NoError(t, err, "%s/%s", c.action, c.status)
			require.Nil(t, ev.Reversal, "%s/%s", c.action, c.status)
			require.Contains(t, ev.Refused, c.action+"/"+c.status)
		case ignored:
			require.NoError(t, err, "%s/%s", c.action, c.status)
			require.Nil(t, ev.Reversal, "%s/%s", c.action, c.status)
		default:
			require.NoError(t, err, "%s/%s", c.action, c.status)
			require.Equal(t, c.want, ev.Reversal.State, "%s/%s", c.action, c.status)
		}
	}
}
