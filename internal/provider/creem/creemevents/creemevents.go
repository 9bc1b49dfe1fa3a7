// Package creemevents plays Creem in development and tests: it builds
// Creem's checkout.completed, refund and dispute events (from Creem's
// documented objects: it has no Go library) and signs them as Creem does.
// `billing dev`, the lab and the tests reach it through package
// providerevents; the intake must not (a test checks).
//
// It restates Creem's wire names instead of importing the driver's: a
// fixture that shared the parser's constants could not catch a typo.
package creemevents

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	"github.com/fibe-dev/billing/internal/platform/hmacsig"
	"github.com/fibe-dev/billing/internal/provider"
)

// Creem's event types.
const (
	checkoutCompleted = "checkout.completed"
	refundCreated     = "refund.created"
	disputeCreated    = "dispute.created"
)

type obj = map[string]any

// OrderPaymentID is the Creem order Completed gives our order's payment
// (order is the decimal order id).
func OrderPaymentID(order string) string { return "ord_order_" + order }

// Completed is the body of Creem's checkout.completed for our order,
// created at at.
func Completed(eventID string, orderID, amount int64, currency string, at time.Time) []byte {
	return Payment(eventID, OrderPaymentID(strconv.FormatInt(orderID, 10)), orderID, amount, currency, at)
}

// Payment is Completed for Creem order paymentID: another checkout when
// paymentID is not OrderPaymentID's.
func Payment(eventID, paymentID string, orderID, amount int64, currency string, at time.Time) []byte {
	order := strconv.FormatInt(orderID, 10)
	checkout := "ch_order_" + order
	if paymentID != OrderPaymentID(order) {
		checkout = "ch_" + paymentID
	}
	return marshal(obj{
		"id":         eventID,
		"eventType":  checkoutCompleted,
		"created_at": at.UnixMilli(),
		"object": obj{
			"id":       checkout,
			"object":   "checkout",
			"status":   "completed",
			"metadata": obj{"order_id": order},
			"order": obj{
				"id":       paymentID,
				"amount":   amount,
				"currency": currency,
				"status":   "paid",
			},
			"mode": "test",
		},
	})
}

// Reversal is Creem's refund.created or dispute.created of order
// paymentID. It is nil for a closed dispute, which Creem does not send.
func Reversal(eventID, paymentID, id, kind, state string, amount int64, currency string, at time.Time) []byte {
	o := obj{"id": id, "order": obj{"id": paymentID, "object": "order"}, "mode": "test"}
	typ := refundCreated
	switch {
	case kind == provider.ReversalRefund:
		o["object"], o["status"], o["refund_amount"], o["refund_currency"] = "refund", "succeeded", amount, currency
	case state != provider.StateOpen:
		return nil
	default:
		typ = disputeCreated
		o["object"], o["amount"], o["currency"] = "dispute", amount, currency
	}
	return marshal(obj{"id": eventID, "eventType": typ, "created_at": at.UnixMilli(), "object": o})
}

// Sign signs body as Creem does (Creem signs no timestamp: ts is ignored)
// and returns the header to send.
func Sign(secret string, body []byte, _ time.Time) (header, value string) {
	return "creem-signature", hex.EncodeToString(hmacsig.Sum(secret, "", body))
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return nil // maps of strings and numbers always marshal
	}
	return b
}
