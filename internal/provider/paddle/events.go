package paddle

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/fibe-dev/billing/internal/provider"
)

// Event types intake acts on.
const (
	EventTransactionCompleted = "transaction.completed"
	EventAdjustmentCreated    = "adjustment.created"
	EventAdjustmentUpdated    = "adjustment.updated"
)

type event struct {
	EventID   string          `json:"event_id"`
	EventType string          `json:"event_type"`
	Data      json.RawMessage `json:"data"`
}

func (e event) Envelope() provider.Envelope {
	return provider.Envelope{ID: e.EventID, Type: e.EventType, Object: e.Data}
}

type transaction struct {
	ID           string `json:"id"`
	CurrencyCode string `json:"currency_code"`
	CustomData   struct {
		OrderID provider.OrderRef `json:"order_id"`
	} `json:"custom_data"`
	Details struct {
		Totals struct {
			GrandTotal string `json:"grand_total"`
			Total      string `json:"total"`
		} `json:"totals"`
	} `json:"details"`
}

// events are the event types intake acts on, and how each is read.
var events = provider.Events{
	Provider: Name,
	Envelope: provider.EnvelopeOf[event],
	Payments: map[string]func(string, []byte) (*provider.Payment, error){EventTransactionCompleted: parseTransaction},
	Reversals: map[string]func(string, []byte) (*provider.Reversal, error){
		EventAdjustmentCreated: parseAdjustment, EventAdjustmentUpdated: parseAdjustment,
	},
}

// Parse implements provider.Provider.
func (d *Driver) Parse(body []byte) (*provider.Event, error) { return events.Parse(body) }

// parseTransaction reads a completed transaction: the payment.
func parseTransaction(_ string, data []byte) (*provider.Payment, error) {
	var t transaction
	if err := provider.Unmarshal(data, &t); err != nil {
		return nil, err
	}
	// Paddle totals are strings in minor units; grand_total is what was charged.
	total := cmp.Or(t.Details.Totals.GrandTotal, t.Details.Totals.Total)
	var amount *int64
	if total != "" {
		n, err := strconv.ParseInt(total, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: total %q is not an integer", provider.ErrMalformedPayload, provider.Truncate(total))
		}
		amount = &n
	}
	return provider.NewPayment(int64(t.CustomData.OrderID), amount, t.CurrencyCode, t.ID)
}

// adjustment is the part of Paddle's AdjustmentNotification intake reads.
type adjustment struct {
	ID            string `json:"id"`
	Action        string `json:"action"`
	TransactionID string `json:"transaction_id"`
	Status        string `json:"status"`
	CurrencyCode  string `json:"currency_code"`
	Totals        struct {
		Total        string `json:"total"`
		CurrencyCode string `json:"currency_code"`
	} `json:"totals"`
}

// parseAdjustment acts on approved refunds, chargebacks (a chargeback is a
// dispute already lost) and chargeback reversals (the dispute won after
// all: the money came back); pending, rejected and every other action
// (credits, warnings) are only acknowledged.
//
// A chargeback and its reversal are two adjustments with ids of their own
// that name only the transaction, so both are keyed by the transaction
// (one dispute per Paddle transaction): the reversal then closes the same
// dispute as won, whichever of the two arrives first.
func parseAdjustment(_ string, data []byte) (*provider.Reversal, error) {
	var a adjustment
	if err := provider.Unmarshal(data, &a); err != nil {
		return nil, err
	}
	r := &provider.Reversal{ReversalID: a.ID, PaymentID: a.TransactionID, Currency: cmp.Or(a.Totals.CurrencyCode, a.CurrencyCode)}
	switch {
	case a.Status != "approved":
		return nil, nil
	case a.Action == "refund":
		r.Kind, r.State = provider.ReversalRefund, provider.StateSucceeded
	case a.Action == "chargeback":
		r.Kind, r.State, r.ReversalID = provider.ReversalDispute, provider.StateLost, ChargebackID(a.TransactionID)
	case a.Action == "chargeback_reverse":
		r.Kind, r.State, r.ReversalID = provider.ReversalDispute, provider.StateWon, ChargebackID(a.TransactionID)
	default:
		return nil, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(a.Totals.Total), 10, 64)
	if err != nil {
		return r, fmt.Errorf("%w: adjustment total %q is not an integer", provider.ErrMalformedPayload, provider.Truncate(a.Totals.Total))
	}
	return provider.CheckReversal(r, &n, r.PaymentID, "")
}

// ChargebackID is the reversal id of the chargeback of Paddle transaction
// txn, and of its reversal.
func ChargebackID(txn string) string { return "chargeback:" + txn }
