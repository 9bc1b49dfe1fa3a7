package devwebhook

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/PaddleHQ/paddle-go-sdk/v4/pkg/paddlenotification"
	"github.com/stripe/stripe-go/v82"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider"
)

// The providers' event types of refunds and disputes.
const (
	stripeChargeRefunded    = "charge.refunded"
	stripeDisputeCreated    = "charge.dispute.created"
	stripeDisputeClosed     = "charge.dispute.closed"
	paddleAdjustmentUpdated = "adjustment.updated"
	creemRefundCreated      = "refund.created"
	creemDisputeCreated     = "dispute.created"
)

// OrderPaymentID is the provider payment id CompletedEvent gives order's
// payment: every CompletedEvent of one order is about one payment (one
// Checkout Session, transaction or Creem order), as a real provider's
// redeliveries and follow-up events are. order is the decimal order id.
func OrderPaymentID(name, order string) string {
	switch name {
	case provider.Stripe:
		return "pi_order_" + order
	case provider.Paddle:
		return "txn_order_" + order
	}
	return "ord_order_" + order
}

// OrderSessionID is the Stripe Checkout Session CompletedEvent gives the
// order: the payment's identity, which every event about it carries.
func OrderSessionID(order string) string { return "cs_test_order_" + order }

// PaymentEvent is CompletedEvent for a given provider payment id: a second,
// distinct payment for an order when paymentID differs from
// OrderPaymentID's (for Stripe, another Checkout Session, paid with
// PaymentIntent paymentID; for Creem, another checkout).
func PaymentEvent(name, eventID, paymentID string, orderID, amount int64, currency string) []byte {
	var v map[string]any
	if err := json.Unmarshal(CompletedEvent(name, eventID, orderID, amount, currency), &v); err != nil {
		return nil
	}
	switch name {
	case provider.Stripe:
		session := v["data"].(map[string]any)["object"].(map[string]any)
		session["payment_intent"] = paymentID
		if paymentID != OrderPaymentID(name, strconv.FormatInt(orderID, 10)) {
			session["id"] = "cs_test_" + paymentID
		}
	case provider.Paddle:
		v["data"].(map[string]any)["id"] = paymentID
	default:
		v["object"].(map[string]any)["order"].(map[string]any)["id"] = paymentID
		if paymentID != OrderPaymentID(name, strconv.FormatInt(orderID, 10)) {
			v["object"].(map[string]any)["id"] = "ch_" + paymentID
		}
	}
	b, _ := json.Marshal(v)
	return b
}

// ReversalEvent builds provider's refund or dispute event (kind
// fulfillment.ReversalRefund or ReversalDispute, state as in
// fulfillment.ReversePaymentArgs) of paymentID, shaped like the
// provider's: Stripe's with stripe-go's Charge and Dispute types, Paddle's
// with paddle-go-sdk's AdjustmentNotification, Creem's from its documented
// refund and dispute objects. For a Stripe refund, id is the charge's and
// amount the cumulative amount_refunded. It returns nil for a combination
// the provider does not send (Creem has no closed dispute; a Paddle
// dispute is a chargeback, already lost, or its reversal, won: never open).
func ReversalEvent(name, eventID, paymentID, id, kind, state string, amount int64, currency string) []byte {
	at := time.Now()
	switch name {
	case provider.Stripe:
		return stripeReversalEvent(eventID, paymentID, id, kind, state, amount, currency, at)
	case provider.Paddle:
		if kind == fulfillment.ReversalDispute && state == fulfillment.StateOpen {
			return nil
		}
		return paddleReversalEvent(eventID, paymentID, id, kind, state, amount, currency, at)
	case provider.Creem:
		return creemReversalEvent(eventID, paymentID, id, kind, state, amount, currency, at)
	}
	return nil
}

func stripeReversalEvent(eventID, paymentID, id, kind, state string, amount int64, currency string, at time.Time) []byte {
	pi := &stripe.PaymentIntent{ID: paymentID}
	var obj any
	typ := stripeChargeRefunded
	switch {
	case kind == fulfillment.ReversalRefund:
		obj = &stripe.Charge{ID: id, Object: "charge", Amount: amount, AmountRefunded: amount, Currency: stripe.Currency(currency),
			PaymentIntent: pi, Refunded: true, Paid: true, Status: stripe.ChargeStatusSucceeded}
	case state == fulfillment.StateOpen:
		typ = stripeDisputeCreated
		obj = &stripe.Dispute{ID: id, Object: "dispute", Amount: amount, Currency: stripe.Currency(currency),
			PaymentIntent: pi, Charge: &stripe.Charge{ID: "ch_" + paymentID}, Status: stripe.DisputeStatusNeedsResponse}
	default:
		typ = stripeDisputeClosed
		obj = &stripe.Dispute{ID: id, Object: "dispute", Amount: amount, Currency: stripe.Currency(currency),
			PaymentIntent: pi, Charge: &stripe.Charge{ID: "ch_" + paymentID}, Status: stripe.DisputeStatus(state)}
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	b, err := json.Marshal(&stripe.Event{ID: eventID, Object: "event", APIVersion: StripeAPIVersion, Created: at.Unix(),
		Type: stripe.EventType(typ), Data: &stripe.EventData{Raw: raw}})
	if err != nil {
		return nil
	}
	return b
}

func paddleReversalEvent(eventID, paymentID, id, kind, state string, amount int64, currency string, at time.Time) []byte {
	action := paddlenotification.AdjustmentActionRefund
	switch {
	case kind == fulfillment.ReversalDispute && state == fulfillment.StateWon:
		action = paddlenotification.AdjustmentActionChargebackReverse
	case kind == fulfillment.ReversalDispute:
		action = paddlenotification.AdjustmentActionChargeback
	}
	total := strconv.FormatInt(amount, 10)
	ev := paddlenotification.AdjustmentUpdated{
		GenericNotificationEvent: paddlenotification.GenericNotificationEvent{EventID: eventID,
			EventType: paddleAdjustmentUpdated, OccurredAt: at.UTC().Format(time.RFC3339Nano), NotificationID: "ntf_" + eventID},
		Data: paddlenotification.AdjustmentNotification{ID: id, Action: action, TransactionID: paymentID,
			Status: paddlenotification.AdjustmentStatusApproved, CurrencyCode: paddlenotification.CurrencyCode(currency),
			Totals: paddlenotification.AdjustmentTotals{Subtotal: total, Tax: "0", Total: total,
				CurrencyCode: paddlenotification.CurrencyCode(currency)},
			CreatedAt: at.UTC().Format(time.RFC3339Nano), UpdatedAt: at.UTC().Format(time.RFC3339Nano)},
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil
	}
	return b
}

func creemReversalEvent(eventID, paymentID, id, kind, state string, amount int64, currency string, at time.Time) []byte {
	o := obj{"id": id, "order": obj{"id": paymentID, "object": "order"}, "mode": "test"}
	typ := creemRefundCreated
	if kind == fulfillment.ReversalRefund {
		o["object"], o["status"], o["refund_amount"], o["refund_currency"] = "refund", "succeeded", amount, currency
	} else {
		if state != fulfillment.StateOpen {
			return nil
		}
		typ = creemDisputeCreated
		o["object"], o["amount"], o["currency"] = "dispute", amount, currency
	}
	b, err := json.Marshal(obj{"id": eventID, "eventType": typ, "created_at": at.UnixMilli(), "object": o})
	if err != nil {
		return nil
	}
	return b
}
