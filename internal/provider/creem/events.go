package creem

import (
	"cmp"
	"encoding/json"

	"github.com/fibe-dev/billing/internal/provider"
)

// Event types intake acts on.
const (
	EventCheckoutCompleted = "checkout.completed"
	EventRefundCreated     = "refund.created"
	EventDisputeCreated    = "dispute.created"
)

type event struct {
	ID        string          `json:"id"`
	EventType string          `json:"eventType"`
	Object    json.RawMessage `json:"object"`
}

func (e event) Envelope() provider.Envelope {
	return provider.Envelope{ID: e.ID, Type: e.EventType, Object: e.Object}
}

type checkout struct {
	ID    string `json:"id"`
	Order struct {
		ID       string `json:"id"`
		Amount   *int64 `json:"amount"`
		Currency string `json:"currency"`
	} `json:"order"`
	Metadata struct {
		OrderID provider.OrderRef `json:"order_id"`
	} `json:"metadata"`
}

// events are the event types intake acts on, and how each is read.
var events = provider.Events{
	Provider: Name,
	Envelope: provider.EnvelopeOf[event],
	Payments: map[string]func(string, []byte) (*provider.Payment, error){EventCheckoutCompleted: parseCheckout},
	Reversals: map[string]func(string, []byte) (*provider.Reversal, error){
		EventRefundCreated: parseReversal, EventDisputeCreated: parseReversal,
	},
}

// Parse implements provider.Provider.
func (d *Driver) Parse(body []byte) (*provider.Event, error) { return events.Parse(body) }

// parseCheckout reads a completed checkout: the payment is its order.
func parseCheckout(_ string, obj []byte) (*provider.Payment, error) {
	var c checkout
	if err := provider.Unmarshal(obj, &c); err != nil {
		return nil, err
	}
	return provider.NewPayment(int64(c.Metadata.OrderID), c.Order.Amount, c.Order.Currency, cmp.Or(c.Order.ID, c.ID), c.ID)
}

// reversal is the part of Creem's refund and dispute objects intake reads.
type reversal struct {
	ID             string `json:"id"`
	RefundAmount   *int64 `json:"refund_amount"`
	RefundCurrency string `json:"refund_currency"`
	Amount         *int64 `json:"amount"`
	Currency       string `json:"currency"`
	Order          struct {
		ID string `json:"id"`
	} `json:"order"`
	Checkout struct {
		ID string `json:"id"`
	} `json:"checkout"`
}

// parseReversal reads refund.created and dispute.created; the payment is
// Creem's order, as for checkout.completed. Creem withdraws a disputed
// amount when the dispute opens.
func parseReversal(typ string, obj []byte) (*provider.Reversal, error) {
	var c reversal
	if err := provider.Unmarshal(obj, &c); err != nil {
		return nil, err
	}
	r := &provider.Reversal{ReversalID: c.ID, PaymentID: cmp.Or(c.Order.ID, c.Checkout.ID)}
	if typ == EventRefundCreated {
		r.Kind, r.State, r.Currency = provider.ReversalRefund, provider.StateSucceeded, c.RefundCurrency
		return provider.CheckReversal(r, c.RefundAmount, r.PaymentID, c.Checkout.ID)
	}
	r.Kind, r.State, r.Currency = provider.ReversalDispute, provider.StateOpen, c.Currency
	return provider.CheckReversal(r, c.Amount, r.PaymentID, c.Checkout.ID)
}
