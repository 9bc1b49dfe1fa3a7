package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fibe-dev/billing/internal/web/strictjson"
)

// ErrMalformedPayload is returned for a body a driver cannot read: not
// JSON, no event id or type, or a completed payment, refund or dispute
// without a usable id, amount or currency. Parse returns it only for what
// is wrong with the envelope (no event to claim); an object it cannot apply
// is an Event with Refused set (see Events.Parse).
var ErrMalformedPayload = errors.New("provider: malformed payload")

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
	// Refused says why an event of a type we act on cannot be applied (its
	// object is malformed: a negative amount, no id, an unknown state);
	// Payment and Reversal are nil then. The event is still claimed, and
	// its refusal recorded as its outcome (invariant 11).
	Refused string
	// PaymentRef is the provider payment id a refused refund or dispute
	// names, when it could be read: the payment's timeline shows it.
	PaymentRef string
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
	Kind       string // ReversalRefund or ReversalDispute
	State      string // StateSucceeded, StateOpen, StateWon or StateLost
	Amount     int64  // minor units; for Stripe's charge.refunded the cumulative amount_refunded
	Currency   string
	// OtherRef is a second id of the payment the event names: Stripe's
	// charge beside the PaymentIntent, Creem's checkout beside the order.
	OtherRef string
}

// Reversal kinds and states, as drivers report them and fulfilment
// stores them.
const (
	ReversalRefund  = "refund"
	ReversalDispute = "dispute"

	StateSucceeded = "succeeded" // a refund that went through
	StateOpen      = "open"      // a dispute whose funds the provider withdrew
	StateWon       = "won"       // a dispute closed in our favour: funds back
	StateLost      = "lost"      // a dispute closed against us
)

const (
	maxIDLength    = 255
	currencyLength = 3
)

// Envelope is the part every provider event shares: its id, its type and
// the object it carries (a session, a transaction, a charge...).
type Envelope struct {
	ID, Type string
	Object   []byte
}

// EnvelopeOf reads body as a driver's envelope type T, with the strict
// reader.
func EnvelopeOf[T interface{ Envelope() Envelope }](body []byte) (Envelope, error) {
	var e T
	if err := Unmarshal(body, &e); err != nil {
		return Envelope{}, err
	}
	return e.Envelope(), nil
}

// Events reads one provider's events: the envelope, then the object of
// each event type the provider's driver acts on, as a completed payment
// or as a refund or dispute; every other type is only acknowledged.
type Events struct {
	Provider  string
	Envelope  func(body []byte) (Envelope, error)
	Payments  map[string]func(typ string, object []byte) (*Payment, error)
	Reversals map[string]func(typ string, object []byte) (*Reversal, error)
}

// Parse implements Provider.Parse. An envelope it cannot read (not JSON, a
// member twice, no usable event id or type) is an error: there is no event
// to claim. An object it cannot apply is not: the event is returned with
// Refused saying why, to be claimed and recorded refused (a provider whose
// event we answer 400 retries it for days, and nobody sees why).
func (e Events) Parse(body []byte) (*Event, error) {
	env, err := e.Envelope(body)
	if err != nil {
		return nil, err
	}
	ev, err := Checked(e.Provider, &Event{ID: env.ID, Type: env.Type}, nil)
	if err != nil {
		return nil, err
	}
	if err := e.object(ev, env); err != nil {
		if !errors.Is(err, ErrMalformedPayload) {
			return nil, err
		}
		ev.Payment, ev.Reversal, ev.Refused = nil, nil, err.Error()
	}
	return ev, nil
}

// object reads env's object into ev, as its type calls for.
func (e Events) object(ev *Event, env Envelope) error {
	var err error
	if f := e.Payments[env.Type]; f != nil {
		ev.Payment, err = f(env.Type, env.Object)
	} else if f := e.Reversals[env.Type]; f != nil {
		var r *Reversal
		r, err = f(env.Type, env.Object)
		if err == nil {
			ev.Reversal = r
		} else if r != nil && CheckText("payment id", r.PaymentID) == nil {
			ev.PaymentRef = r.PaymentID
		}
	}
	return err
}

// Checked finishes a driver's Parse: it names ev's provider and refuses an
// event id or type that is not text intake can store.
func Checked(provider string, ev *Event, err error) (*Event, error) {
	if err != nil {
		return nil, err
	}
	ev.Provider = provider
	if err := CheckText("event id", ev.ID); err != nil {
		return nil, err
	}
	if err := CheckText("event type", ev.Type); err != nil {
		return nil, err
	}
	return ev, nil
}

// NewPayment checks a completed payment; aliases equal to paymentID or
// empty are dropped.
func NewPayment(orderID int64, amount *int64, currency, paymentID string, aliases ...string) (*Payment, error) {
	switch {
	case orderID <= 0:
		return nil, fmt.Errorf("%w: completed payment without our order id", ErrMalformedPayload)
	case amount == nil || *amount < 0:
		return nil, fmt.Errorf("%w: completed payment without a paid amount", ErrMalformedPayload)
	}
	if err := checkCurrency(currency); err != nil {
		return nil, err
	}
	if paymentID != "" {
		// Without one, fulfilment takes the event to be about the order's
		// one payment (as before payments had ids).
		if err := CheckText("payment id", paymentID); err != nil {
			return nil, err
		}
	}
	p := &Payment{OrderID: orderID, Amount: *amount, Currency: currency, PaymentID: paymentID}
	for _, a := range aliases {
		if a == "" || a == paymentID || paymentID == "" {
			continue
		}
		if err := CheckText("payment alias", a); err != nil {
			return nil, err
		}
		p.Aliases = append(p.Aliases, a)
	}
	return p, nil
}

// CheckReversal checks r, naming its payment paymentID and, when it is
// another id, otherRef; it sets r's amount. On error it still returns r,
// whose PaymentID tells which payment the refused event named.
func CheckReversal(r *Reversal, amount *int64, paymentID, otherRef string) (*Reversal, error) {
	r.PaymentID = paymentID
	if otherRef != paymentID && otherRef != "" {
		if err := CheckText("payment reference", otherRef); err != nil {
			return r, err
		}
		r.OtherRef = otherRef
	}
	if amount == nil || *amount < 0 {
		return r, fmt.Errorf("%w: %s without a non-negative amount", ErrMalformedPayload, r.Kind)
	}
	if err := checkCurrency(r.Currency); err != nil {
		return r, err
	}
	if err := CheckText("payment id", r.PaymentID); err != nil {
		return r, err
	}
	if err := CheckText(r.Kind+" id", r.ReversalID); err != nil {
		return r, err
	}
	r.Amount = *amount
	return r, nil
}

func checkCurrency(c string) error {
	if len(c) != currencyLength || strings.ContainsFunc(c, notLetter) {
		return fmt.Errorf("%w: currency %q is not a 3-letter code", ErrMalformedPayload, Truncate(c))
	}
	return nil
}

func notLetter(r rune) bool { return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') }

// OrderRef is our order id inside provider metadata: a decimal string (the
// usual case, metadata values are strings) or a JSON number.
type OrderRef int64

// UnmarshalJSON implements json.Unmarshaler.
func (o *OrderRef) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	return o.Parse(s)
}

// Parse reads s, a positive decimal order id.
func (o *OrderRef) Parse(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("%w: order id %q is not a positive integer", ErrMalformedPayload, Truncate(s))
	}
	*o = OrderRef(n)
	return nil
}

// Unmarshal reads a provider object with the one strict reader (as API
// bodies are read, but skipping members we do not use): a body with a
// member twice, or a name that differs from ours only by case, could be
// read differently elsewhere, and is refused.
func Unmarshal(b []byte, v any) error {
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

// CheckText refuses what PostgreSQL text cannot store (NUL) and what would
// bloat the claim index; encoding/json already made the string valid UTF-8.
func CheckText(what, s string) error {
	if s == "" || len(s) > maxIDLength || strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s must be 1 to %d bytes of text", ErrMalformedPayload, what, maxIDLength)
	}
	return nil
}

// Truncate shortens s for an error message.
func Truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
