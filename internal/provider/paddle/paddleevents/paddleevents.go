// Package paddleevents plays Paddle Billing in development and tests: it
// builds Paddle's completed-transaction and adjustment events (the
// adjustments with paddle-go-sdk's own notification types) and signs them
// as Paddle does. `billing dev`, the lab and the tests reach it through
// package providerevents; the intake must not (a test checks).
//
// It restates Paddle's wire names instead of importing the driver's: a
// fixture that shared the parser's constants could not catch a typo.
package paddleevents

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	"github.com/PaddleHQ/paddle-go-sdk/v4/pkg/paddlenotification"

	"github.com/fibe-dev/billing/internal/platform/hmacsig"
	"github.com/fibe-dev/billing/internal/provider"
)

// Paddle's event types.
const (
	transactionCompleted = "transaction.completed"
	adjustmentUpdated    = "adjustment.updated"
)

type obj = map[string]any

// OrderPaymentID is the transaction Completed gives order's payment
// (order is the decimal order id).
func OrderPaymentID(order string) string { return "txn_order_" + order }

// Completed is the body of Paddle's transaction.completed for our order,
// created at at.
func Completed(eventID string, orderID, amount int64, currency string, at time.Time) []byte {
	return Payment(eventID, OrderPaymentID(strconv.FormatInt(orderID, 10)), orderID, amount, currency, at)
}

// Payment is Completed for transaction paymentID.
func Payment(eventID, paymentID string, orderID, amount int64, currency string, at time.Time) []byte {
	total := strconv.FormatInt(amount, 10)
	return marshal(obj{
		"event_id":        eventID,
		"event_type":      transactionCompleted,
		"occurred_at":     at.UTC().Format(time.RFC3339Nano),
		"notification_id": "ntf_" + eventID,
		"data": obj{
			"id":            paymentID,
			"status":        "completed",
			"currency_code": currency,
			"custom_data":   obj{"order_id": strconv.FormatInt(orderID, 10)},
			"details": obj{"totals": obj{
				"subtotal": total, "tax": "0", "discount": "0",
				"total": total, "grand_total": total, "currency_code": currency,
			}},
		},
	})
}

// Reversal is Paddle's adjustment.updated (a refund, a chargeback: a
// dispute already lost, or a chargeback reversal: won) of transaction
// paymentID, built from paddle-go-sdk's types. It is nil for an open
// dispute, which Paddle never sends.
func Reversal(eventID, paymentID, id, kind, state string, amount int64, currency string, at time.Time) []byte {
	action := paddlenotification.AdjustmentActionRefund
	switch {
	case kind == provider.ReversalDispute && state == provider.StateOpen:
		return nil
	case kind == provider.ReversalDispute && state == provider.StateWon:
		action = paddlenotification.AdjustmentActionChargebackReverse
	case kind == provider.ReversalDispute:
		action = paddlenotification.AdjustmentActionChargeback
	}
	total := strconv.FormatInt(amount, 10)
	stamp := at.UTC().Format(time.RFC3339Nano)
	return marshal(paddlenotification.AdjustmentUpdated{
		GenericNotificationEvent: paddlenotification.GenericNotificationEvent{EventID: eventID,
			EventType: adjustmentUpdated, OccurredAt: stamp, NotificationID: "ntf_" + eventID},
		Data: paddlenotification.AdjustmentNotification{ID: id, Action: action, TransactionID: paymentID,
			Status: paddlenotification.AdjustmentStatusApproved, CurrencyCode: paddlenotification.CurrencyCode(currency),
			Totals: paddlenotification.AdjustmentTotals{Subtotal: total, Tax: "0", Total: total,
				CurrencyCode: paddlenotification.CurrencyCode(currency)},
			CreatedAt: stamp, UpdatedAt: stamp},
	})
}

// Sign signs body as Paddle Billing does at ts and returns the header to
// send.
func Sign(secret string, body []byte, ts time.Time) (header, value string) {
	t := strconv.FormatInt(ts.Unix(), 10)
	return "Paddle-Signature", "ts=" + t + ";h1=" + hex.EncodeToString(hmacsig.Sum(secret, t+":", body))
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return nil // maps of strings and numbers, and the SDK's types, always marshal
	}
	return b
}
