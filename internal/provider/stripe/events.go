package stripe

import (
	"bytes"
	"cmp"
	"encoding/json"

	"github.com/fibe-dev/billing/internal/provider"
)

// Event types intake acts on.
const (
	// Completed payments.
	EventCheckoutCompleted     = "checkout.session.completed"
	EventAsyncPaymentSucceeded = "checkout.session.async_payment_succeeded"
	// Refunds and disputes.
	EventChargeRefunded = "charge.refunded"
	EventDisputeCreated = "charge.dispute.created"
	EventDisputeClosed  = "charge.dispute.closed"

	paymentStatusPaid = "paid"
)

type event struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

func (e event) Envelope() provider.Envelope {
	return provider.Envelope{ID: e.ID, Type: e.Type, Object: e.Data.Object}
}

type session struct {
	ID                string `json:"id"`
	PaymentIntent     ref    `json:"payment_intent"`
	AmountTotal       *int64 `json:"amount_total"`
	Currency          string `json:"currency"`
	ClientReferenceID string `json:"client_reference_id"`
	PaymentStatus     string `json:"payment_status"`
	Metadata          struct {
		OrderID provider.OrderRef `json:"order_id"`
	} `json:"metadata"`
}

// events are the event types intake acts on, and how each is read.
var events = provider.Events{
	Provider: Name,
	Envelope: provider.EnvelopeOf[event],
	Payments: map[string]func(string, []byte) (*provider.Payment, error){
		EventCheckoutCompleted: parseSession, EventAsyncPaymentSucceeded: parseSession,
	},
	Reversals: map[string]func(string, []byte) (*provider.Reversal, error){
		EventChargeRefunded: parseReversal, EventDisputeCreated: parseReversal, EventDisputeClosed: parseReversal,
	},
}

// Parse implements provider.Provider.
func (d *Driver) Parse(body []byte) (*provider.Event, error) { return events.Parse(body) }

// parseSession reads a completed session's payment: nil when it is not
// paid yet. The payment is the session; its PaymentIntent an alias.
func parseSession(typ string, obj []byte) (*provider.Payment, error) {
	var s session
	if err := provider.Unmarshal(obj, &s); err != nil {
		return nil, err
	}
	// A delayed payment method completes the session unpaid; the money
	// arrives with async_payment_succeeded, a separate event we fulfil on.
	if typ == EventCheckoutCompleted && s.PaymentStatus != paymentStatusPaid {
		return nil, nil
	}
	order := s.Metadata.OrderID
	if order == 0 && s.ClientReferenceID != "" {
		if err := order.Parse(s.ClientReferenceID); err != nil {
			return nil, err
		}
	}
	return provider.NewPayment(int64(order), s.AmountTotal, s.Currency, s.ID, string(s.PaymentIntent))
}

// ref is a Stripe reference field: an id string, or the expanded object
// whose "id" it takes.
type ref string

func (r *ref) UnmarshalJSON(b []byte) error {
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '{':
		var o struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		*r = ref(o.ID)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*r = ref(s)
	return nil
}

// money is the part of a Charge or Dispute that intake reads.
type money struct {
	ID             string `json:"id"`
	Amount         *int64 `json:"amount"`
	AmountRefunded *int64 `json:"amount_refunded"`
	Currency       string `json:"currency"`
	Charge         ref    `json:"charge"`
	PaymentIntent  ref    `json:"payment_intent"`
	Status         string `json:"status"`
}

// parseReversal reads charge.refunded (a Charge: its cumulative
// amount_refunded, keyed by the charge id, since the Charge carries no
// refund list without expansion) and charge.dispute.created/closed (a
// Dispute, whose status States maps). The payment is named by its
// PaymentIntent.
func parseReversal(typ string, obj []byte) (*provider.Reversal, error) {
	var m money
	if err := provider.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	r := &provider.Reversal{ReversalID: m.ID, Currency: m.Currency, PaymentID: string(m.PaymentIntent)}
	if typ == EventChargeRefunded {
		// The refund's key is built from the charge id: check that id
		// first, or an event without one would be the fact "charge:".
		if err := provider.CheckText("charge id", m.ID); err != nil {
			return nil, err
		}
		r.Kind, r.State, r.ReversalID = provider.ReversalRefund, provider.StateSucceeded, "charge:"+m.ID
		return provider.CheckReversal(r, m.AmountRefunded, cmp.Or(r.PaymentID, m.ID), m.ID)
	}
	meaning, err := States.Decide(typ, m.Status)
	if err != nil {
		return nil, err
	}
	r.Kind, r.State = meaning.Kind, meaning.State
	return provider.CheckReversal(r, m.Amount, cmp.Or(r.PaymentID, string(m.Charge)), string(m.Charge))
}

// Stripe's dispute statuses.
const (
	disputeWarningNeedsResponse = "warning_needs_response"
	disputeWarningUnderReview   = "warning_under_review"
	disputeWarningClosed        = "warning_closed"
	disputeNeedsResponse        = "needs_response"
	disputeUnderReview          = "under_review"
	disputeWon                  = "won"
	disputeLost                 = "lost"
	disputePrevented            = "prevented"
	disputeChargeRefunded       = "charge_refunded" // legacy: the dispute ended in a refund
)

var (
	disputeOpen = provider.Meaning{Kind: provider.ReversalDispute, State: provider.StateOpen}
	disputeWonM = provider.Meaning{Kind: provider.ReversalDispute, State: provider.StateWon}
	// disputeGone: the money stays with the customer, whether the bank
	// decided it (lost) or a refund settled it (prevented by the card
	// network's rapid resolution, or the legacy charge_refunded); a refund
	// counted besides is not taken twice.
	disputeGone      = provider.Meaning{Kind: provider.ReversalDispute, State: provider.StateLost}
	closedButOpen    = provider.Meaning{State: provider.StateRefused, Why: "a closed dispute in an open status"}
	disputeStatusAt  = [][]string{{"data", "object", "status"}}
	closedStatuses   = map[string]provider.Meaning{disputeWon: disputeWonM, disputeWarningClosed: disputeWonM, disputeLost: disputeGone, disputePrevented: disputeGone, disputeChargeRefunded: disputeGone}
	openStatuses     = []string{disputeWarningNeedsResponse, disputeWarningUnderReview, disputeNeedsResponse, disputeUnderReview}
	createdStatuses  = with(closedStatuses, openStatuses, disputeOpen)
	closingStatuses  = with(closedStatuses, openStatuses, closedButOpen)
	refundedByCharge = map[string]provider.Meaning{"": {Kind: provider.ReversalRefund, State: provider.StateSucceeded}}
)

// States is every documented status of the refund and dispute events
// Stripe's driver accepts, and what each means: a dispute opens (funds
// withdrawn; an inquiry's warning_* too, given back when it closes as
// warning_closed), is won, or is lost; charge.refunded reads no status.
var States = provider.StateTable{Provider: Name, Events: []provider.EventStates{
	{Type: EventChargeRefunded, States: refundedByCharge},
	{Type: EventDisputeCreated, Fields: disputeStatusAt, States: createdStatuses},
	{Type: EventDisputeClosed, Fields: disputeStatusAt, States: closingStatuses},
}}

// with is base plus each of statuses meaning m.
func with(base map[string]provider.Meaning, statuses []string, m provider.Meaning) map[string]provider.Meaning {
	out := make(map[string]provider.Meaning, len(base)+len(statuses))
	for k, v := range base {
		out[k] = v
	}
	for _, s := range statuses {
		out[s] = m
	}
	return out
}
