package wallet

// This file holds the wallet's core types, constants and errors: what a
// post takes and answers. The rest of its surface lives beside what it
// serves: key grammar in keys.go, clawbacks, debts and their accounts in
// debt.go, adjustments in adjust.go, the audit in audit.go.

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fibe-dev/billing/internal/platform/errcode"
)

// Currency is an in-app currency.
type Currency string

// The two in-app currencies.
const (
	Mana   Currency = "mana"
	Sparks Currency = "sparks"
)

// Direction says whether a post adds to or takes from the wallet.
type Direction string

// Directions.
const (
	Credit Direction = "credit"
	Debit  Direction = "debit"
)

// Kind classifies a wallet transaction.
type Kind string

// Kinds of wallet transactions.
const (
	KindPurchase   Kind = "purchase"   // Mana minted for a paid order
	KindConversion Kind = "conversion" // either leg of Mana -> Sparks
	KindFunding    Kind = "funding"    // a Marquee's daily Sparks debit
	KindAdjustment Kind = "adjustment" // operator correction, tests, seeds
)

// System accounts: the other side of every wallet entry in the ledger.
const (
	AccountManaIssued     = "mana_issued"
	AccountFundingRevenue = "funding_revenue"
	AccountConversion     = "conversion"
	AccountAdjustments    = "adjustments"
)

// MaxKeyLength bounds an idempotency key, in bytes.
const MaxKeyLength = 255

// PostParams describe one wallet post.
type PostParams struct {
	PlayerID  int64
	Currency  Currency
	Amount    int64 // strictly positive; Direction gives the sign
	Direction Direction
	Kind      Kind
	// Reference names what the post is for, e.g. "order:42"; free text.
	Reference string
	// IdempotencyKey is required: one wallet transaction per key, ever
	// (see Key for how to build one).
	IdempotencyKey Key
	// Account is the system account on the other side of the ledger;
	// empty means the default for Kind.
	Account string
}

// Transaction is a committed wallet transaction.
type Transaction struct {
	ID             int64
	PlayerID       int64
	WalletID       int64
	Currency       Currency
	Amount         int64 // signed: positive credit, negative debit
	Kind           Kind
	Reference      string
	IdempotencyKey string
	BalanceAfter   int64
	CreatedAt      time.Time
	// Replayed is true when the key had already been used and this is the
	// stored transaction, returned without moving anything.
	Replayed bool
}

// ConvertParams describe a Mana -> Sparks conversion.
type ConvertParams struct {
	PlayerID       int64
	Mana           int64 // Mana to debit; Sparks credited = Mana * SparksPerMana
	IdempotencyKey Key   // each leg's key is derived from it
}

// Conversion is the two legs of a conversion.
type Conversion struct {
	ManaDebit    *Transaction
	SparksCredit *Transaction
	Replayed     bool
}

// ListParams page through a wallet's transactions, newest first.
type ListParams struct {
	Limit    int   // 1..200; 0 means 50
	BeforeID int64 // only transactions with a smaller id; 0 for the first page
}

// Errors. Compare with errors.Is; a reused key is also an *KeyReusedError,
// a key in a reserved namespace a *ReservedKeyError (keys.go). Each error a
// client can cause declares its answer (package errcode).
//
// Insufficient balance is 409 Conflict: the request is well formed but
// conflicts with the wallet's current state, and may succeed after a
// top-up (with a new Idempotency-Key: the 409 itself is cached like any
// other 4xx answer).
var (
	ErrInsufficientBalance = errcode.New("wallet: insufficient balance", errcode.Answer{
		Status: http.StatusConflict, Code: "insufficient_balance", Detail: "the wallet's balance is too low"})
	ErrInvalidAmount = errcode.New("wallet: amount must be a positive integer", errcode.Answer{
		Status: http.StatusBadRequest, Code: "invalid_amount", Detail: "amounts must be positive integers"})
	ErrOverflow = errcode.New("wallet: amount would overflow the balance", errcode.Answer{
		Status: http.StatusBadRequest, Code: "invalid_amount", Detail: "amount too large"})
	// ErrUnknownCurrency answers like every missing resource.
	ErrUnknownCurrency      = errcode.New("wallet: unknown currency", errcode.NotFound)
	ErrIdempotencyKeyReused = errcode.New("wallet: idempotency key reused with different parameters", keyReusedAnswer)
	ErrInvalidKey           = errors.New("wallet: idempotency key must be 1 to 255 bytes")
	ErrInvalidPost          = errors.New("wallet: invalid post")
	ErrUnknownPlayer        = errors.New("wallet: unknown player")
)

// KeyReusedError names the field that differs between a stored
// transaction and a new request carrying the same key.
type KeyReusedError struct {
	Key   string
	Field string // player, currency, amount, direction or kind
}

func (e *KeyReusedError) Error() string {
	return fmt.Sprintf("wallet: idempotency key %q reused with a different %s", e.Key, e.Field)
}

// Is makes errors.Is(err, ErrIdempotencyKeyReused) true.
func (e *KeyReusedError) Is(target error) bool { return target == ErrIdempotencyKeyReused }

// Answer is ErrIdempotencyKeyReused's: the field stays in the logs.
func (e *KeyReusedError) Answer() errcode.Answer { return keyReusedAnswer }

// Answer is 400 invalid_idempotency_key naming the namespace: the caller
// chose the key, and can choose another. (The type lives with the key
// grammar in keys.go; its answer lives here, with the wallet's others.)
func (e *ReservedKeyError) Answer() errcode.Answer {
	return errcode.Answer{Status: http.StatusBadRequest, Code: "invalid_idempotency_key", Detail: fmt.Sprintf(
		"Idempotency-Key %q %s %q, which billing reserves for %s: choose another key", e.Key, e.Where(), e.Namespace, e.Use)}
}

var keyReusedAnswer = errcode.Answer{Status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused",
	Detail: "this Idempotency-Key was used for a different request"}
