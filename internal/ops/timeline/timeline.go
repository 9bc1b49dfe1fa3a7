// Package timeline answers "what happened to my payment?": it assembles,
// from the rows every layer already keeps, one timeline of an order, a
// provider payment or a player. Each line says when, in which layer, what
// happened, and the key that made it happen once: the checkout's
// Idempotency-Key and provider key, each provider event id (with how many
// duplicate deliveries followed, the last when), the River jobs with
// their attempts, the payment and its aliases, each refund and dispute
// event as sent and what became of it, the facts they fold into, every
// wallet transaction (with its ledger entries) and the debt it opened,
// settled or wrote off. A verdict in plain words sits on top.
//
// It only reads. Every statement is an index lookup, so a timeline costs
// the same on a ledger of ten thousand transactions or of ten million; a
// test explains each statement's plan and refuses a sequential scan.
// `billing explain` prints it and the operator page renders it.
package timeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/provider"
)

// ErrNotFound is returned for an order, payment or player nothing is
// known about.
var ErrNotFound = errors.New("timeline: not found")

// ErrInvalidID is returned for a provider or payment id no provider can
// have sent: one holding NUL or invalid UTF-8, which PostgreSQL's text
// refuses (nothing is looked up).
var ErrInvalidID = errors.New("timeline: invalid id")

// Subject kinds.
const (
	SubjectOrder   = "order"
	SubjectPayment = "payment"
	SubjectPlayer  = "player"
)

// Layers, in the order a purchase passes through them.
const (
	LayerCheckout = "checkout" // the order and its provider checkout
	LayerDelivery = "delivery" // a provider's webhook, claimed once per event id
	LayerJob      = "job"      // a River job and its attempts
	LayerPayment  = "payment"  // a provider payment recorded (applied, unapplied, refunded)
	LayerReversal = "reversal" // a refund or dispute event as sent, and its decision
	LayerFact     = "fact"     // a refund or dispute as its accepted events add up
	LayerWallet   = "wallet"   // a wallet transaction and its ledger entries
	LayerDebt     = "debt"     // debt opened, settled or written off
	LayerOperator = "operator" // an operator's adjustment or forgiveness
)

// Flags mark the lines an operator must look at.
const (
	FlagUnapplied = "unapplied" // money received that minted nothing and is not refunded yet
	FlagRefused   = "refused"   // an event or payment refused; it changed nothing
	FlagPending   = "pending"   // waiting: a job not finished, an event waiting for its payment
	FlagRetrying  = "retrying"  // a job that failed and will run again
	FlagFailed    = "failed"    // a job that gave up (discarded)
	FlagCancelled = "cancelled" // a job cancelled on purpose; its error says why
	FlagOwed      = "owed"      // a debt still open
)

// Timeline is the story of one subject, oldest line first.
type Timeline struct {
	Subject Subject
	// Headline is the verdict's first words ("Paid twice", "Not paid").
	Headline string
	// Verdict says in one paragraph what happened and what is left to do.
	Verdict string
	// Attention is true when something waits for an operator (a payment
	// to refund, a refused event, a failing job, an open debt).
	Attention bool
	PlayerID  int64
	Orders    []int64
	Lines     []Line
	Notes     []string
	AsOf      time.Time
}

// Subject is what was asked about.
type Subject struct {
	Kind     string // order, payment or player
	ID       string
	Provider string     // payments only
	Since    *time.Time // players only
}

// Line is one thing that happened.
type Line struct {
	At    time.Time
	Layer string
	// Type names what happened, stable for scripts: order_opened,
	// delivery_claimed, job, payment_applied, payment_unapplied,
	// payment_refunded, reversal_accepted, reversal_refused,
	// reversal_pending, fact, wallet, debt_opened, debt_settled,
	// debt_written_off, debt_forgiven, adjustment.
	Type     string
	Text     string
	Keys     []Key
	Flag     string
	Details  []string
	Refs     Refs
	Entries  []Entry   // wallet lines
	Attempts []Attempt // job lines
	// Duplicates counts the deliveries of the event after the one that
	// claimed it, LastDelivery the latest of them (delivery lines).
	Duplicates   int64
	LastDelivery *time.Time
	// RiverUI is the job's page in the River UI (job lines).
	RiverUI string
}

// Key is one key that made a line happen once, and what kind of key it is.
type Key struct {
	Kind  string
	Value string
}

// Key kinds.
const (
	KeyAPI         = "Idempotency-Key"          // the client's key of POST /v1/checkouts
	KeyProvider    = "provider idempotency key" // sent with our call to the provider
	KeyEvent       = "provider event id"        // UNIQUE (provider, event_id) of the claim
	KeyPayment     = "provider payment"         // UNIQUE (provider, payment_id) of payments
	KeyReversal    = "provider reversal id"     // UNIQUE (provider, reversal_id) of a fact
	KeyWallet      = "wallet key"               // UNIQUE idempotency_key of the transaction
	KeyForgiveness = "forgiveness key"          // the operator's key, spent once
	// A provider that takes no idempotency key (Creem) has its checkout's
	// key kind named "<provider> <field>" ("creem request_id").
)

// Refs are the ids a line is about, for links and scripts.
type Refs struct {
	OrderID       int64
	Payment       int64 // payments row id
	JobID         int64
	TransactionID int64
	PlayerID      int64
	Provider      string
	ProviderID    string // the provider's payment, refund or dispute id
}

// Entry is one ledger entry of a wallet transaction.
type Entry struct {
	Account      string
	Amount       int64
	BalanceAfter *int64 // the wallet's entry only
}

// Attempt is one failed attempt of a job, as River recorded it.
type Attempt struct {
	Attempt int
	At      time.Time
	Error   string
}

// RiverUIPath is where the River UI shows job id.
func RiverUIPath(jobID int64) string { return fmt.Sprintf("/riverui/jobs/%d", jobID) }

// Order returns the timeline of order id: its checkout, every payment,
// delivery, job, refund, dispute and wallet transaction.
// reg is the provider drivers' registry, asked for their facts.
func Order(ctx context.Context, db dbtx.DB, reg *provider.Registry, id int64) (*Timeline, error) {
	return withFacts(reg)(inSnapshot(ctx, db, func(q dbtx.DB) (*Timeline, error) { return orderTimeline(ctx, q, id) }))
}

// Payment returns the timeline of the order a provider id belongs to: a
// payment (Checkout Session, PaymentIntent, charge, Paddle transaction,
// Creem order or checkout), a refund, dispute or adjustment, the refund of
// an unapplied payment, a provider event id or an unpaid checkout. A
// refund or dispute whose payment is not known yet gets a timeline of its
// own events.
func Payment(ctx context.Context, db dbtx.DB, reg *provider.Registry, name, id string) (*Timeline, error) {
	if err := checkText("provider", name); err != nil {
		return nil, err
	}
	if err := checkText("payment id", id); err != nil {
		return nil, err
	}
	return withFacts(reg)(inSnapshot(ctx, db, func(q dbtx.DB) (*Timeline, error) { return paymentTimeline(ctx, q, name, id) }))
}

// Player returns the timeline of player id since since (the zero time:
// all of it): every order and wallet transaction, newest MaxWalletLines
// per wallet at most.
func Player(ctx context.Context, db dbtx.DB, reg *provider.Registry, id int64, since time.Time) (*Timeline, error) {
	return withFacts(reg)(inSnapshot(ctx, db, func(q dbtx.DB) (*Timeline, error) { return playerTimeline(ctx, q, id, since) }))
}

// withFacts completes a timeline with what the drivers' facts say.
func withFacts(reg *provider.Registry) func(*Timeline, error) (*Timeline, error) {
	return func(t *Timeline, err error) (*Timeline, error) {
		if err != nil {
			return nil, err
		}
		return addCheckoutKeys(t, reg), nil
	}
}

// checkText refuses what a text column cannot hold, before it reaches a
// query (where it would be a database error, not the caller's).
func checkText(what, s string) error {
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return fmt.Errorf("%w: a %s must be valid UTF-8 without NUL", ErrInvalidID, what)
	}
	return nil
}
