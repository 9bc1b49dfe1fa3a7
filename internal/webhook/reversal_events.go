package webhook

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/fibe-dev/billing/fulfillment"
)

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

// stripeMoney is the part of a Charge or Dispute that intake reads.
type stripeMoney struct {
	ID             string `json:"id"`
	Amount         *int64 `json:"amount"`
	AmountRefunded *int64 `json:"amount_refunded"`
	Currency       string `json:"currency"`
	Charge         ref    `json:"charge"`
	PaymentIntent  ref    `json:"payment_intent"`
	Status         string `json:"status"`
}

// parseStripeReversal reads charge.refunded (a Charge: its cumulative
// amount_refunded, keyed by the charge id, since the Charge carries no
// refund list without expansion) and charge.dispute.created/closed (a
// Dispute). The payment is the PaymentIntent, as for the checkout.
func parseStripeReversal(typ string, obj []byte) (*Reversal, error) {
	var m stripeMoney
	if err := unmarshal(obj, &m); err != nil {
		return nil, err
	}
	r := &Reversal{ReversalID: m.ID, Currency: m.Currency, PaymentID: string(m.PaymentIntent)}
	switch typ {
	case StripeChargeRefunded:
		r.Kind, r.State, r.ReversalID = fulfillment.ReversalRefund, fulfillment.StateSucceeded, "charge:"+m.ID
		return checkReversal(r, m.AmountRefunded, cmp.Or(r.PaymentID, m.ID), m.ID)
	case StripeDisputeCreated:
		r.Kind, r.State = fulfillment.ReversalDispute, fulfillment.StateOpen
	default:
		r.Kind, r.State = fulfillment.ReversalDispute, stripeDisputeOutcome(m.Status)
	}
	return checkReversal(r, m.Amount, cmp.Or(r.PaymentID, string(m.Charge)), string(m.Charge))
}

// stripeDisputeOutcome maps a closed dispute's status: lost keeps the
// money gone; won and warning_closed (an inquiry that never withdrew
// funds) give it back.
func stripeDisputeOutcome(status string) string {
	if status == "lost" {
		return fulfillment.StateLost
	}
	return fulfillment.StateWon
}

// paddleAdjustment is the part of Paddle's AdjustmentNotification intake reads.
type paddleAdjustment struct {
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

// parsePaddleAdjustment acts on approved refunds, chargebacks (a
// chargeback is a dispute already lost) and chargeback reversals (the
// dispute won after all: the money came back); pending, rejected and every
// other action (credits, warnings) are only acknowledged.
//
// A chargeback and its reversal are two adjustments with ids of their own
// that name only the transaction, so both are keyed by the transaction
// (one dispute per Paddle transaction): the reversal then closes the same
// dispute as won, whichever of the two arrives first.
func parsePaddleAdjustment(data []byte) (*Reversal, error) {
	var a paddleAdjustment
	if err := unmarshal(data, &a); err != nil {
		return nil, err
	}
	r := &Reversal{ReversalID: a.ID, PaymentID: a.TransactionID, Currency: cmp.Or(a.Totals.CurrencyCode, a.CurrencyCode)}
	switch {
	case a.Status != "approved":
		return nil, nil
	case a.Action == "refund":
		r.Kind, r.State = fulfillment.ReversalRefund, fulfillment.StateSucceeded
	case a.Action == "chargeback":
		r.Kind, r.State, r.ReversalID = fulfillment.ReversalDispute, fulfillment.StateLost, PaddleChargebackID(a.TransactionID)
	case a.Action == "chargeback_reverse":
		r.Kind, r.State, r.ReversalID = fulfillment.ReversalDispute, fulfillment.StateWon, PaddleChargebackID(a.TransactionID)
	default:
		return nil, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(a.Totals.Total), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: adjustment total %q is not an integer", ErrMalformedPayload, truncate(a.Totals.Total))
	}
	return checkReversal(r, &n, r.PaymentID, "")
}

// PaddleChargebackID is the reversal id of the chargeback of Paddle
// transaction txn, and of its reversal.
func PaddleChargebackID(txn string) string { return "chargeback:" + txn }

// creemReversal is the part of Creem's refund and dispute objects intake reads.
type creemReversal struct {
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

// parseCreemReversal reads refund.created and dispute.created; the payment
// is Creem's order, as for checkout.completed. Creem withdraws a disputed
// amount when the dispute opens.
func parseCreemReversal(typ string, obj []byte) (*Reversal, error) {
	var c creemReversal
	if err := unmarshal(obj, &c); err != nil {
		return nil, err
	}
	r := &Reversal{ReversalID: c.ID, PaymentID: cmp.Or(c.Order.ID, c.Checkout.ID)}
	if typ == CreemRefundCreated {
		r.Kind, r.State, r.Currency = fulfillment.ReversalRefund, fulfillment.StateSucceeded, c.RefundCurrency
		return checkReversal(r, c.RefundAmount, r.PaymentID, c.Checkout.ID)
	}
	r.Kind, r.State, r.Currency = fulfillment.ReversalDispute, fulfillment.StateOpen, c.Currency
	return checkReversal(r, c.Amount, r.PaymentID, c.Checkout.ID)
}

// checkReversal checks r, naming its payment paymentID and, when it is
// another id, otherRef.
func checkReversal(r *Reversal, amount *int64, paymentID, otherRef string) (*Reversal, error) {
	r.PaymentID = paymentID
	if otherRef != paymentID && otherRef != "" {
		if err := checkText("payment reference", otherRef); err != nil {
			return nil, err
		}
		r.OtherRef = otherRef
	}
	switch {
	case amount == nil || *amount < 0:
		return nil, fmt.Errorf("%w: %s without a non-negative amount", ErrMalformedPayload, r.Kind)
	case len(r.Currency) != maxCurrencyLength || strings.ContainsFunc(r.Currency, notLetter):
		return nil, fmt.Errorf("%w: currency %q is not a 3-letter code", ErrMalformedPayload, truncate(r.Currency))
	}
	if err := checkText("payment id", r.PaymentID); err != nil {
		return nil, err
	}
	if err := checkText(r.Kind+" id", r.ReversalID); err != nil {
		return nil, err
	}
	r.Amount = *amount
	return r, nil
}
