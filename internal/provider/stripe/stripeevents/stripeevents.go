// Package stripeevents plays Stripe in development and tests: it builds
// Stripe's completed-payment, refund and dispute events (the refund and
// dispute ones with stripe-go's own Charge and Dispute types) and signs
// them as Stripe does. `billing dev`, the lab and the tests reach it
// through package providerevents; the intake must not (a test checks).
//
// It restates Stripe's wire names (event types, the signature header)
// instead of importing the driver's: a fixture that shared the parser's
// constants could not catch a typo in them.
package stripeevents

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/fibe-dev/billing/internal/platform/hmacsig"
	"github.com/fibe-dev/billing/internal/provider"
)

// APIVersion is the api_version Completed writes: stripe-go v82's
// APIVersion, so its ConstructEvent accepts the events too (a test keeps
// the two equal).
const APIVersion = "2025-08-27.basil"

// Stripe's event types.
const (
	checkoutCompleted = "checkout.session.completed"
	chargeRefunded    = "charge.refunded"
	disputeCreated    = "charge.dispute.created"
	disputeClosed     = "charge.dispute.closed"
)

type obj = map[string]any

// OrderPaymentID is the PaymentIntent Completed gives order's payment
// (order is the decimal order id): every completed event of one order is
// about one payment, as Stripe's redeliveries are.
func OrderPaymentID(order string) string { return "pi_order_" + order }

// OrderSessionID is the Checkout Session Completed gives the order: the
// payment's identity, which every event about it carries.
func OrderSessionID(order string) string { return "cs_test_order_" + order }

// Completed is the body of Stripe's checkout.session.completed for our
// order, created at at: only the fields intake reads, plus the envelope.
func Completed(eventID string, orderID, amount int64, currency string, at time.Time) []byte {
	return Payment(eventID, OrderPaymentID(strconv.FormatInt(orderID, 10)), orderID, amount, currency, at)
}

// Payment is Completed paid with PaymentIntent paymentID: a second,
// distinct payment (another Checkout Session) when paymentID is not
// OrderPaymentID's.
func Payment(eventID, paymentID string, orderID, amount int64, currency string, at time.Time) []byte {
	order := strconv.FormatInt(orderID, 10)
	session := OrderSessionID(order)
	if paymentID != OrderPaymentID(order) {
		session = "cs_test_" + paymentID
	}
	return marshal(obj{
		"id":          eventID,
		"object":      "event",
		"api_version": APIVersion,
		"created":     at.Unix(),
		"livemode":    false,
		"type":        checkoutCompleted,
		"data": obj{"object": obj{
			"id":                  session,
			"object":              "checkout.session",
			"payment_intent":      paymentID,
			"amount_total":        amount,
			"currency":            currency,
			"client_reference_id": order,
			"metadata":            obj{"order_id": order},
			"mode":                "payment",
			"payment_status":      "paid",
			"status":              "complete",
		}},
		"pending_webhooks": 1,
		"request":          obj{"id": nil, "idempotency_key": nil},
	})
}

// Reversal is Stripe's charge.refunded (kind provider.ReversalRefund; id
// is the charge's, amount the cumulative amount_refunded) or
// charge.dispute.created / closed (state provider.StateOpen, or the
// closed dispute's status) of PaymentIntent paymentID, built from
// stripe-go's types. Stripe sends every combination.
func Reversal(eventID, paymentID, id, kind, state string, amount int64, currency string, at time.Time) []byte {
	pi := &stripeapi.PaymentIntent{ID: paymentID}
	var o any
	typ := chargeRefunded
	switch {
	case kind == provider.ReversalRefund:
		o = &stripeapi.Charge{ID: id, Object: "charge", Amount: amount, AmountRefunded: amount, Currency: stripeapi.Currency(currency),
			PaymentIntent: pi, Refunded: true, Paid: true, Status: stripeapi.ChargeStatusSucceeded}
	case state == provider.StateOpen:
		typ = disputeCreated
		o = &stripeapi.Dispute{ID: id, Object: "dispute", Amount: amount, Currency: stripeapi.Currency(currency),
			PaymentIntent: pi, Charge: &stripeapi.Charge{ID: "ch_" + paymentID}, Status: stripeapi.DisputeStatusNeedsResponse}
	default:
		typ = disputeClosed
		o = &stripeapi.Dispute{ID: id, Object: "dispute", Amount: amount, Currency: stripeapi.Currency(currency),
			PaymentIntent: pi, Charge: &stripeapi.Charge{ID: "ch_" + paymentID}, Status: stripeapi.DisputeStatus(state)}
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return nil
	}
	return marshal(&stripeapi.Event{ID: eventID, Object: "event", APIVersion: APIVersion, Created: at.Unix(),
		Type: stripeapi.EventType(typ), Data: &stripeapi.EventData{Raw: raw}})
}

// Sign signs body as Stripe does at ts and returns the header to send.
func Sign(secret string, body []byte, ts time.Time) (header, value string) {
	t := strconv.FormatInt(ts.Unix(), 10)
	return "Stripe-Signature", "t=" + t + ",v1=" + hex.EncodeToString(hmacsig.Sum(secret, t+".", body))
}

// SignByStripeGo signs body at ts with stripe-go's own test signer: the
// independent signature a test checks billing's verifier against.
func SignByStripeGo(secret string, body []byte, ts time.Time) (header, value string) {
	sp := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: ts})
	return "Stripe-Signature", sp.Header
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return nil // maps of strings and numbers, and stripe-go's types, always marshal
	}
	return b
}
