package webhook

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/fibe-dev/billing/fulfillment"
)

// StripeAPIVersion is the api_version CompletedEvent writes into Stripe
// events: stripe-go v82's stripe.APIVersion, so its ConstructEvent accepts
// them too (a test keeps the two equal).
const StripeAPIVersion = stripeAPIVersionOfOurFixture

// CompletedEvent builds the body of provider's completed-payment event for
// our order, shaped like the provider's own (only the fields intake reads,
// plus the usual envelope). It returns nil for an unknown provider. Sign it
// with Sign, SignStripe, SignPaddle or SignCreem.
func CompletedEvent(provider, eventID string, orderID, amount int64, currency string) []byte {
	return completedEventAt(provider, eventID, orderID, amount, currency, time.Now())
}

func completedEventAt(provider, eventID string, orderID, amount int64, currency string, at time.Time) []byte {
	order := strconv.FormatInt(orderID, 10)
	var v any
	switch provider {
	case fulfillment.ProviderStripe:
		v = stripeCompleted(eventID, order, amount, currency, at)
	case fulfillment.ProviderPaddle:
		v = paddleCompleted(eventID, order, amount, currency, at)
	case fulfillment.ProviderCreem:
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
		"type":        StripeCheckoutCompleted,
		"data": obj{"object": obj{
			"id":                  "cs_test_" + eventID,
			"object":              "checkout.session",
			"payment_intent":      OrderPaymentID(fulfillment.ProviderStripe, order),
			"amount_total":        amount,
			"currency":            currency,
			"client_reference_id": order,
			"metadata":            obj{"order_id": order},
			"mode":                "payment",
			"payment_status":      stripePaymentStatusPaid,
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
		"event_type":      PaddleTransactionCompleted,
		"occurred_at":     at.UTC().Format(time.RFC3339Nano),
		"notification_id": "ntf_" + eventID,
		"data": obj{
			"id":            OrderPaymentID(fulfillment.ProviderPaddle, order),
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
		"eventType":  CreemCheckoutCompleted,
		"created_at": at.UnixMilli(),
		"object": obj{
			"id":       "ch_" + eventID,
			"object":   "checkout",
			"status":   "completed",
			"metadata": obj{"order_id": order},
			"order": obj{
				"id":       OrderPaymentID(fulfillment.ProviderCreem, order),
				"amount":   amount,
				"currency": currency,
				"status":   "paid",
			},
			"mode": "test",
		},
	}
}
