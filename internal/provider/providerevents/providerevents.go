// Package providerevents plays every payment provider in development and
// tests, by name: it builds a provider's signed completed-payment,
// payment, refund and dispute events through that provider's own builder
// (stripeevents, paddleevents, creemevents, each in its provider's
// folder). `billing dev` (its demo seed, its simulated checkout and `billing
// dev send-webhook`), the lab and the tests use it; the intake, the HTTP
// API and the drivers must not, which a test checks.
package providerevents

import (
	"fmt"
	"time"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/creem/creemevents"
	"github.com/fibe-dev/billing/internal/provider/paddle/paddleevents"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
)

// Builder is one provider's event builder: the functions every
// <provider>events package has.
type Builder struct {
	// Completed is the provider's completed-payment event of our order.
	Completed func(eventID string, orderID, amount int64, currency string, at time.Time) []byte
	// Payment is Completed for a given provider payment id.
	Payment func(eventID, paymentID string, orderID, amount int64, currency string, at time.Time) []byte
	// Reversal is a refund or dispute event; nil for one the provider
	// does not send.
	Reversal func(eventID, paymentID, id, kind, state string, amount int64, currency string, at time.Time) []byte
	// Sign signs a body as the provider does and returns the header.
	Sign func(secret string, body []byte, ts time.Time) (header, value string)
	// OrderPaymentID is the payment id Completed gives an order.
	OrderPaymentID func(order string) string
}

// builders are every provider's builder, by name: one line a provider.
var builders = map[string]Builder{
	provider.Stripe: {stripeevents.Completed, stripeevents.Payment, stripeevents.Reversal, stripeevents.Sign, stripeevents.OrderPaymentID},
	provider.Paddle: {paddleevents.Completed, paddleevents.Payment, paddleevents.Reversal, paddleevents.Sign, paddleevents.OrderPaymentID},
	provider.Creem:  {creemevents.Completed, creemevents.Payment, creemevents.Reversal, creemevents.Sign, creemevents.OrderPaymentID},
}

// Of returns name's builder.
func Of(name string) (Builder, bool) {
	b, ok := builders[name]
	return b, ok
}

// CompletedEvent builds the body of provider name's completed-payment
// event for our order, shaped like the provider's own (the fields intake
// reads, plus the usual envelope). It returns nil for an unknown provider.
// Sign it with Sign.
func CompletedEvent(name, eventID string, orderID, amount int64, currency string) []byte {
	return CompletedEventAt(name, eventID, orderID, amount, currency, time.Now())
}

// CompletedEventAt is CompletedEvent created at at.
func CompletedEventAt(name, eventID string, orderID, amount int64, currency string, at time.Time) []byte {
	b, ok := builders[name]
	if !ok {
		return nil
	}
	return b.Completed(eventID, orderID, amount, currency, at)
}

// OrderPaymentID is the provider payment id CompletedEvent gives order's
// payment ("" for an unknown provider): every CompletedEvent of one order
// is about one payment (one Checkout Session, transaction or Creem
// order), as a real provider's redeliveries and follow-up events are.
// order is the decimal order id.
func OrderPaymentID(name, order string) string {
	b, ok := builders[name]
	if !ok {
		return ""
	}
	return b.OrderPaymentID(order)
}

// PaymentEvent is CompletedEvent for a given provider payment id: a
// second, distinct payment for an order when paymentID differs from
// OrderPaymentID's (for Stripe, another Checkout Session paid with
// PaymentIntent paymentID; for Creem, another checkout).
func PaymentEvent(name, eventID, paymentID string, orderID, amount int64, currency string) []byte {
	b, ok := builders[name]
	if !ok {
		return nil
	}
	return b.Payment(eventID, paymentID, orderID, amount, currency, time.Now())
}

// ReversalEvent builds provider name's refund or dispute event (kind
// fulfillment.ReversalRefund or ReversalDispute, state as in
// fulfillment.ReversePaymentArgs) of paymentID, shaped like the
// provider's. For a Stripe refund, id is the charge's and amount the
// cumulative amount_refunded. It returns nil for an unknown provider or a
// combination the provider does not send (Creem has no closed dispute; a
// Paddle dispute is a chargeback, already lost, or its reversal, won:
// never open).
func ReversalEvent(name, eventID, paymentID, id, kind, state string, amount int64, currency string) []byte {
	b, ok := builders[name]
	if !ok {
		return nil
	}
	return b.Reversal(eventID, paymentID, id, kind, state, amount, currency, time.Now())
}

// Sign signs body for provider name as it does and returns the header to
// send; ts is ignored for a provider that signs no timestamp (Creem). An
// unknown provider is provider.ErrUnknown.
func Sign(name, secret string, body []byte, ts time.Time) (header, value string, err error) {
	b, ok := builders[name]
	if !ok {
		return "", "", fmt.Errorf("%w %q", provider.ErrUnknown, name)
	}
	header, value = b.Sign(secret, body, ts)
	return header, value, nil
}
