// Package devwebhook plays the payment providers in development and tests:
// it builds completed-payment events shaped like Stripe's, Paddle's and
// Creem's, and signs them as each provider does. `billing dev` (its demo
// seed and `billing dev send-webhook`) and the tests use it; the intake
// (package webhook) must not, which a test checks.
//
// It restates the providers' wire names (event types, signature headers)
// instead of importing the intake's: a fixture that shared the parser's
// constants could not catch a typo in them.
package devwebhook

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/platform/hmacsig"
	"github.com/fibe-dev/billing/internal/provider"
)

// StripeAPIVersion is the api_version CompletedEvent writes into Stripe
// events: stripe-go v82's stripe.APIVersion, so its ConstructEvent accepts
// them too (a test keeps the two equal).
const StripeAPIVersion = "2025-08-27.basil"

// The providers' event types of a completed payment.
const (
	stripeCheckoutCompleted    = "checkout.session.completed"
	paddleTransactionCompleted = "transaction.completed"
	creemCheckoutCompleted     = "checkout.completed"
)

// CompletedEvent builds the body of provider's completed-payment event for
// our order, shaped like the provider's own (only the fields intake reads,
// plus the usual envelope). It returns nil for an unknown provider. Sign it
// with Sign, SignStripe, SignPaddle or SignCreem.
func CompletedEvent(name, eventID string, orderID, amount int64, currency string) []byte {
	return CompletedEventAt(name, eventID, orderID, amount, currency, time.Now())
}

// CompletedEventAt is CompletedEvent created at at.
func CompletedEventAt(name, eventID string, orderID, amount int64, currency string, at time.Time) []byte {
	order := strconv.FormatInt(orderID, 10)
	var v any
	switch name {
	case provider.Stripe:
		v = stripeCompleted(eventID, order, amount, currency, at)
	case provider.Paddle:
		v = paddleCompleted(eventID, order, amount, currency, at)
	case provider.Creem:
		v = creemCompleted(eventID, order, amount, currency, at)
	default:
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil // maps of strings and numbers always marshal
	}
	return b
}

type obj = map[string]any

func stripeCompleted(eventID, order string, amount int64, currency string, at time.Time) obj {
	return obj{
		"id":          eventID,
		"object":      "event",
		"api_version": StripeAPIVersion,
		"created":     at.Unix(),
		"livemode":    false,
		"type":        stripeCheckoutCompleted,
		"data": obj{"object": obj{
			"id":                  OrderSessionID(order),
			"object":              "checkout.session",
			"payment_intent":      OrderPaymentID(provider.Stripe, order),
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
	}
}

func paddleCompleted(eventID, order string, amount int64, currency string, at time.Time) obj {
	total := strconv.FormatInt(amount, 10)
	return obj{
		"event_id":        eventID,
		"event_type":      paddleTransactionCompleted,
		"occurred_at":     at.UTC().Format(time.RFC3339Nano),
		"notification_id": "ntf_" + eventID,
		"data": obj{
			"id":            OrderPaymentID(provider.Paddle, order),
			"status":        "completed",
			"currency_code": currency,
			"custom_data":   obj{"order_id": order},
			"details": obj{"totals": obj{
				"subtotal": total, "tax": "0", "discount": "0",
				"total": total, "grand_total": total, "currency_code": currency,
			}},
		},
	}
}

func creemCompleted(eventID, order string, amount int64, currency string, at time.Time) obj {
	return obj{
		"id":         eventID,
		"eventType":  creemCheckoutCompleted,
		"created_at": at.UnixMilli(),
		"object": obj{
			"id":       "ch_order_" + order,
			"object":   "checkout",
			"status":   "completed",
			"metadata": obj{"order_id": order},
			"order": obj{
				"id":       OrderPaymentID(provider.Creem, order),
				"amount":   amount,
				"currency": currency,
				"status":   "paid",
			},
			"mode": "test",
		},
	}
}

// SignStripe signs body as Stripe does and returns the header to send.
func SignStripe(secret string, body []byte, ts time.Time) (header, value string) {
	t := strconv.FormatInt(ts.Unix(), 10)
	return "Stripe-Signature", "t=" + t + ",v1=" + hex.EncodeToString(hmacsig.Sum(secret, t+".", body))
}

// SignPaddle signs body as Paddle Billing does and returns the header to send.
func SignPaddle(secret string, body []byte, ts time.Time) (header, value string) {
	t := strconv.FormatInt(ts.Unix(), 10)
	return "Paddle-Signature", "ts=" + t + ";h1=" + hex.EncodeToString(hmacsig.Sum(secret, t+":", body))
}

// SignCreem signs body as Creem does and returns the header to send.
func SignCreem(secret string, body []byte) (header, value string) {
	return "creem-signature", hex.EncodeToString(hmacsig.Sum(secret, "", body))
}

// Sign signs body for provider; ts is ignored for Creem.
func Sign(name, secret string, body []byte, ts time.Time) (header, value string, err error) {
	switch name {
	case provider.Stripe:
		header, value = SignStripe(secret, body, ts)
	case provider.Paddle:
		header, value = SignPaddle(secret, body, ts)
	case provider.Creem:
		header, value = SignCreem(secret, body)
	default:
		return "", "", fmt.Errorf("%w %q", fulfillment.ErrUnknownProvider, name)
	}
	return header, value, nil
}
