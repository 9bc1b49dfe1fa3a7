package webhook

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/strictjson"
)

// ErrMalformedPayload is returned for a verified body we cannot read: not
// JSON, no event id or type, or a completed payment without a usable order
// id, amount or currency.
var ErrMalformedPayload = errors.New("webhook: malformed payload")

// Event is what intake needs from a provider event.
type Event struct {
	Provider string
	ID       string
	Type     string
	// Payment is set when the event is a completed payment for one of our
	// orders; nil for every event type we only acknowledge.
	Payment *Payment
	// Reversal is set when the event refunds or disputes a payment.
	Reversal *Reversal
}

// Payment is a completed payment as the provider reports it.
type Payment struct {
	OrderID  int64
	Amount   int64  // minor units
	Currency string // as sent; compared case-insensitively
	// PaymentID is the provider object that is the payment: Stripe's
	// Checkout Session (whatever its events carry), Paddle's transaction,
	// Creem's order (its checkout's id when it has none).
	PaymentID string
	// Aliases are other ids of the same payment: Stripe's PaymentIntent,
	// Creem's checkout. Refunds and disputes name the payment by them.
	Aliases []string
}

// Reversal is a refund or dispute as the provider reports it.
type Reversal struct {
	PaymentID  string
	ReversalID string // the provider's refund, dispute or adjustment id
	Kind       string // fulfillment.ReversalRefund or ReversalDispute
	State      string // fulfillment.StateSucceeded, StateOpen, StateWon or StateLost
	Amount     int64  // minor units; for Stripe's charge.refunded the cumulative amount_refunded
	Currency   string
	// OtherRef is a second id of the payment the event names: Stripe's
	// charge beside the PaymentIntent, Creem's checkout beside the order.
	OtherRef string
}

// Completed-payment event types.
const (
	StripeCheckoutCompleted     = "checkout.session.completed"
	StripeAsyncPaymentSucceeded = "checkout.session.async_payment_succeeded"
	PaddleTransactionCompleted  = "transaction.completed"
	CreemCheckoutCompleted      = "checkout.completed"
	stripePaymentStatusPaid     = "paid"

	// Refund and dispute event types.
	StripeChargeRefunded    = "charge.refunded"
	StripeDisputeCreated    = "charge.dispute.created"
	StripeDisputeClosed     = "charge.dispute.closed"
	PaddleAdjustmentCreated = "adjustment.created"
	PaddleAdjustmentUpdated = "adjustment.updated"
	CreemRefundCreated      = "refund.created"
	CreemDisputeCreated     = "dispute.created"
	maxIDLength             = 255
	maxCurrencyLength       = 3
)

// ParseEvent reads provider's event from a verified body.
func ParseEvent(provider string, body []byte) (*Event, error) {
	var (
		ev  *Event
		err error
	)
	switch provider {
	case fulfillment.ProviderStripe:
		ev, err = parseStripe(body)
	case fulfillment.ProviderPaddle:
		ev, err = parsePaddle(body)
	case fulfillment.ProviderCreem:
		ev, err = parseCreem(body)
	default:
		return nil, fmt.Errorf("%w %q", fulfillment.ErrUnknownProvider, provider)
	}
	if err != nil {
		return nil, err
	}
	ev.Provider = provider
	if err := checkText("event id", ev.ID); err != nil {
		return nil, err
	}
	if err := checkText("event type", ev.Type); err != nil {
		return nil, err
	}
	return ev, nil
}

type stripeEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

type stripeSession struct {
	ID                string `json:"id"`
	PaymentIntent     ref    `json:"payment_intent"`
	AmountTotal       *int64 `json:"amount_total"`
	Currency          string `json:"currency"`
	ClientReferenceID string `json:"client_reference_id"`
	PaymentStatus     string `json:"payment_status"`
	Metadata          struct {
		OrderID orderRef `json:"order_id"`
	} `json:"metadata"`
}

func parseStripe(body []byte) (*Event, error) {
	var e stripeEvent
	if err := unmarshal(body, &e); err != nil {
		return nil, err
	}
	ev := &Event{ID: e.ID, Type: e.Type}
	switch e.Type {
	case StripeChargeRefunded, StripeDisputeCreated, StripeDisputeClosed:
		r, err := parseStripeReversal(e.Type, e.Data.Object)
		ev.Reversal = r
		return ev, err
	case StripeCheckoutCompleted, StripeAsyncPaymentSucceeded:
	default:
		return ev, nil
	}
	var s stripeSession
	if err := unmarshal(e.Data.Object, &s); err != nil {
		return nil, err
	}
	// A delayed payment method completes the session unpaid; the money
	// arrives with async_payment_succeeded, a separate event we fulfil on.
	if e.Type == StripeCheckoutCompleted && s.PaymentStatus != stripePaymentStatusPaid {
		return ev, nil
	}
	order := s.Metadata.OrderID
	if order == 0 && s.ClientReferenceID != "" {
		if err := order.parse(s.ClientReferenceID); err != nil {
			return nil, err
		}
	}
	p, err := payment(int64(order), s.AmountTotal, s.Currency, s.ID, string(s.PaymentIntent))
	if err != nil {
		return nil, err
	}
	ev.Payment = p
	return ev, nil
}

type paddleEvent struct {
	EventID   string          `json:"event_id"`
	EventType string          `json:"event_type"`
	Data      json.RawMessage `json:"data"`
}

type paddleTransaction struct {
	ID           string `json:"id"`
	CurrencyCode string `json:"currency_code"`
	CustomData   struct {
		OrderID orderRef `json:"order_id"`
	} `json:"custom_data"`
	Details struct {
		Totals struct {
			GrandTotal string `json:"grand_total"`
			Total      string `json:"total"`
		} `json:"totals"`
	} `json:"details"`
}

func parsePaddle(body []byte) (*Event, error) {
	var e paddleEvent
	if err := unmarshal(body, &e); err != nil {
		return nil, err
	}
	ev := &Event{ID: e.EventID, Type: e.EventType}
	switch e.EventType {
	case PaddleAdjustmentCreated, PaddleAdjustmentUpdated:
		r, err := parsePaddleAdjustment(e.Data)
		ev.Reversal = r
		return ev, err
	case PaddleTransactionCompleted:
	default:
		return ev, nil
	}
	var t paddleTransaction
	if err := unmarshal(e.Data, &t); err != nil {
		return nil, err
	}
	// Paddle totals are strings in minor units; grand_total is what was charged.
	total := t.Details.Totals.GrandTotal
	if total == "" {
		total = t.Details.Totals.Total
	}
	var amount *int64
	if total != "" {
		n, err := strconv.ParseInt(total, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: total %q is not an integer", ErrMalformedPayload, truncate(total))
		}
		amount = &n
	}
	p, err := payment(int64(t.CustomData.OrderID), amount, t.CurrencyCode, t.ID)
	if err != nil {
		return nil, err
	}
	ev.Payment = p
	return ev, nil
}

type creemEvent struct {
	ID        string          `json:"id"`
	EventType string          `json:"eventType"`
	Object    json.RawMessage `json:"object"`
}

type creemCheckout struct {
	ID    string `json:"id"`
	Order struct {
		ID       string `json:"id"`
		Amount   *int64 `json:"amount"`
		Currency string `json:"currency"`
	} `json:"order"`
	Metadata struct {
		OrderID orderRef `json:"order_id"`
	} `json:"metadata"`
}

func parseCreem(body []byte) (*Event, error) {
	var e creemEvent
	if err := unmarshal(body, &e); err != nil {
		return nil, err
	}
	ev := &Event{ID: e.ID, Type: e.EventType}
	switch e.EventType {
	case CreemRefundCreated, CreemDisputeCreated:
		r, err := parseCreemReversal(e.EventType, e.Object)
		ev.Reversal = r
		return ev, err
	case CreemCheckoutCompleted:
	default:
		return ev, nil
	}
	var c creemCheckout
	if err := unmarshal(e.Object, &c); err != nil {
		return nil, err
	}
	p, err := payment(int64(c.Metadata.OrderID), c.Order.Amount, c.Order.Currency, cmp.Or(c.Order.ID, c.ID), c.ID)
	if err != nil {
		return nil, err
	}
	ev.Payment = p
	return ev, nil
}

// payment checks a completed payment; aliases equal to paymentID or empty
// are dropped.
func payment(orderID int64, amount *int64, currency, paymentID string, aliases ...string) (*Payment, error) {
	switch {
	case orderID <= 0:
		return nil, fmt.Errorf("%w: completed payment without our order id", ErrMalformedPayload)
	case amount == nil || *amount < 0:
		return nil, fmt.Errorf("%w: completed payment without a paid amount", ErrMalformedPayload)
	case len(currency) != maxCurrencyLength || strings.ContainsFunc(currency, notLetter):
		return nil, fmt.Errorf("%w: currency %q is not a 3-letter code", ErrMalformedPayload, truncate(currency))
	}
	if paymentID != "" {
		// Without one, fulfilment takes the event to be about the order's
		// one payment (as before payments had ids).
		if err := checkText("payment id", paymentID); err != nil {
			return nil, err
		}
	}
	p := &Payment{OrderID: orderID, Amount: *amount, Currency: currency, PaymentID: paymentID}
	for _, a := range aliases {
		if a == "" || a == paymentID || paymentID == "" {
			continue
		}
		if err := checkText("payment alias", a); err != nil {
			return nil, err
		}
		p.Aliases = append(p.Aliases, a)
	}
	return p, nil
}

func notLetter(r rune) bool { return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') }

// orderRef is our order id inside provider metadata: a decimal string (the
// usual case, metadata values are strings) or a JSON number.
type orderRef int64

func (o *orderRef) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	return o.parse(s)
}

func (o *orderRef) parse(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("%w: order id %q is not a positive integer", ErrMalformedPayload, truncate(s))
	}
	*o = orderRef(n)
	return nil
}

// unmarshal reads a provider object with the one strict reader (as API
// bodies are read, but skipping members we do not use): a body with a
// member twice, or a name that differs from ours only by case, could be
// read differently elsewhere, and is refused.
func unmarshal(b []byte, v any) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty object", ErrMalformedPayload)
	}
	if err := strictjson.Unmarshal(b, v, strictjson.Options{}); err != nil {
		if errors.Is(err, ErrMalformedPayload) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrMalformedPayload, err)
	}
	return nil
}

// checkText refuses what PostgreSQL text cannot store (NUL) and what would
// bloat the claim index; encoding/json already made the string valid UTF-8.
func checkText(what, s string) error {
	if s == "" || len(s) > maxIDLength || strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s must be 1 to %d bytes of text", ErrMalformedPayload, what, maxIDLength)
	}
	return nil
}
