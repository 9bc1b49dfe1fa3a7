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
// all: the money came back), as States maps each action and status;
// pending and rejected adjustments, credits and warnings are only
// acknowledged, and an undocumented action or status is refused.
//
// A chargeback and its reversal are two adjustments with ids of their own
// that name only the transaction, so both are keyed by the transaction
// (one dispute per Paddle transaction): the reversal then closes the same
// dispute as won, whichever of the two arrives first.
func parseAdjustment(typ string, data []byte) (*provider.Reversal, error) {
	var a adjustment
	if err := provider.Unmarshal(data, &a); err != nil {
		return nil, err
	}
	m, err := States.Decide(typ, provider.Status(a.Action, a.Status))
	if err != nil || m.State == provider.StateIgnored {
		return nil, err
	}
	r := &provider.Reversal{ReversalID: a.ID, PaymentID: a.TransactionID, Currency: cmp.Or(a.Totals.CurrencyCode, a.CurrencyCode),
		Kind: m.Kind, State: m.State}
	if m.Kind == provider.ReversalDispute {
		r.ReversalID = ChargebackID(a.TransactionID)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(a.Totals.Total), 10, 64)
	if err != nil {
		return r, fmt.Errorf("%w: adjustment total %q is not an integer", provider.ErrMalformedPayload, provider.Truncate(a.Totals.Total))
	}
	return provider.CheckReversal(r, &n, r.PaymentID, "")
}

// Paddle's adjustment actions and statuses.
const (
	actionRefund            = "refund"
	actionChargeback        = "chargeback"
	actionChargebackReverse = "chargeback_reverse"
	actionChargebackWarning = "chargeback_warning"
	actionCredit            = "credit"
	actionCreditReverse     = "credit_reverse"

	statusPendingApproval = "pending_approval"
	statusApproved        = "approved"
	statusRejected        = "rejected"
	statusReversed        = "reversed"
)

// adjustmentStates maps every documented action/status of an adjustment.
func adjustmentStates() map[string]provider.Meaning {
	ignored := provider.Meaning{State: provider.StateIgnored}
	reversed := provider.Meaning{State: provider.StateRefused, Why: "a reversed adjustment is not read: correct it by hand"}
	acted := map[string]provider.Meaning{
		actionRefund:            {Kind: provider.ReversalRefund, State: provider.StateSucceeded},
		actionChargeback:        {Kind: provider.ReversalDispute, State: provider.StateLost},
		actionChargebackReverse: {Kind: provider.ReversalDispute, State: provider.StateWon},
	}
	out := map[string]provider.Meaning{}
	for action, approved := range acted {
		out[provider.Status(action, statusApproved)] = approved
		out[provider.Status(action, statusPendingApproval)] = ignored
		out[provider.Status(action, statusRejected)] = ignored
		out[provider.Status(action, statusReversed)] = reversed
	}
	for _, action := range []string{actionChargebackWarning, actionCredit, actionCreditReverse} {
		for _, status := range []string{statusPendingApproval, statusApproved, statusRejected, statusReversed} {
			out[provider.Status(action, status)] = ignored
		}
	}
	return out
}

// adjustmentStatusAt is where an adjustment's action and status are.
var adjustmentStatusAt = [][]string{{"data", "action"}, {"data", "status"}}

// States is every documented action and status of the adjustment events
// Paddle's driver accepts ("action/status"), and what each means.
var States = provider.StateTable{Provider: Name, Events: []provider.EventStates{
	{Type: EventAdjustmentCreated, Fields: adjustmentStatusAt, States: adjustmentStates()},
	{Type: EventAdjustmentUpdated, Fields: adjustmentStatusAt, States: adjustmentStates()},
}}

// ChargebackID is the reversal id of the chargeback of Paddle transaction
// txn, and of its reversal.
func ChargebackID(txn string) string { return "chargeback:" + txn }
