package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/paddle"
	"github.com/fibe-dev/billing/internal/provider/stripe"
)

// Events.Parse refuses at the door only what has no event to claim (the
// envelope); an object it cannot apply is an event refused with its
// reason, naming the payment when it could be read, and applying nothing.
func TestParseRefusesObjectsNotEnvelopes(t *testing.T) {
	t.Parallel()
	s, p := stripe.New(provider.Options{}), paddle.New(provider.Options{})
	for name, body := range map[string]string{
		"not json":         `{"id":`,
		"no event id":      `{"type":"charge.refunded","data":{"object":{}}}`,
		"event id twice":   `{"id":"e1","id":"e2","type":"charge.refunded","data":{"object":{}}}`,
		"event id variant": `{"ID":"e1","id":"e2","type":"charge.refunded","data":{"object":{}}}`,
		// The strict reader reads the whole body: a member twice anywhere
		// in it is refused with the envelope.
		"member twice in the object": `{"id":"e","type":"charge.refunded","data":{"object":{"id":"ch","id":"ch2"}}}`,
	} {
		_, err := s.Parse([]byte(body))
		require.ErrorIs(t, err, provider.ErrMalformedPayload, name)
	}
	for _, c := range []struct {
		name, body, reason, paymentRef string
		p                              provider.Provider
	}{
		{"negative amount_refunded", `{"id":"e","type":"charge.refunded","data":{"object":{"id":"ch","amount_refunded":-1,"currency":"usd","payment_intent":"pi_1"}}}`,
			"non-negative amount", "pi_1", s},
		{"dispute without id", `{"id":"e","type":"charge.dispute.created","data":{"object":{"amount":1,"currency":"usd","payment_intent":"pi_1","status":"needs_response"}}}`,
			"dispute id", "pi_1", s},
		{"case variant of a member in the object", `{"id":"e","type":"charge.refunded","data":{"object":{"ID":"ch2","id":"ch","amount_refunded":1,"currency":"usd","payment_intent":"pi_1"}}}`,
			"malformed", "", s},
		{"paddle total not an integer", `{"event_id":"e","event_type":"adjustment.updated","data":{"id":"adj","action":"refund","transaction_id":"txn_1","status":"approved","currency_code":"USD","totals":{"total":"9.99","currency_code":"USD"}}}`,
			"not an integer", "txn_1", p},
	} {
		ev, err := c.p.Parse([]byte(c.body))
		require.NoError(t, err, c.name)
		require.Equal(t, "e", ev.ID, c.name)
		require.Contains(t, ev.Refused, c.reason, c.name)
		require.Equal(t, c.paymentRef, ev.PaymentRef, c.name)
		require.Nil(t, ev.Payment, c.name)
		require.Nil(t, ev.Reversal, c.name)
	}
}
