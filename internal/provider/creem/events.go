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
	Status         string `json:"status"`
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

// parseReversal reads refund.created and dispute.created, as States maps
// their status; the payment is Creem's order, as for checkout.completed.
// Creem withdraws a disputed amount when the dispute opens.
func parseReversal(typ string, obj []byte) (*provider.Reversal, error) {
	var c reversal
	if err := provider.Unmarshal(obj, &c); err != nil {
		return nil, err
	}
	status := c.Status
	if typ == EventDisputeCreated {
		status = "" // Creem's dispute has no status we read: it opened
	}
	m, err := States.Decide(typ, status)
	if err != nil {
		return nil, err
	}
	r := &provider.Reversal{ReversalID: c.ID, PaymentID: cmp.Or(c.Order.ID, c.Checkout.ID), Kind: m.Kind, State: m.State}
	if typ == EventRefundCreated {
		r.Currency = c.RefundCurrency
		return provider.CheckReversal(r, c.RefundAmount, r.PaymentID, c.Checkout.ID)
	}
	r.Currency = c.Currency
	return provider.CheckReversal(r, c.Amount, r.PaymentID, c.Checkout.ID)
}

// States is every documented status of the refund and dispute events
// Creem's driver accepts, and what each means: refund.created is a refund
// made (status succeeded, or none sent); dispute.created a dispute opened,
// whose funds Creem withdrew. Creem sends no closing event.
var States = provider.StateTable{Provider: Name, Events: []provider.EventStates{
	{Type: EventRefundCreated, Fields: [][]string{{"object", "status"}}, States: map[string]provider.Meaning{
		"":          {Kind: provider.ReversalRefund, State: provider.StateSucceeded},
		"succeeded": {Kind: provider.ReversalRefund, State: provider.StateSucceeded},
	}},
	{Type: EventDisputeCreated, States: map[string]provider.Meaning{
		"": {Kind: provider.ReversalDispute, State: provider.StateOpen},
	}},
}}
