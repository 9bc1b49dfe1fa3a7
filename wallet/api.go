package wallet

// This file holds the wallet's core types, constants and errors: what a
// post takes and answers. The rest of its surface lives beside what it
// serves: key grammar in keys.go, clawbacks, debts and their accounts in
// debt.go, adjustments in adjust.go, the audit in audit.go.

import (
	"errors"
	"fmt"
	"time"
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
// a key in a reserved namespace a *ReservedKeyError (keys.go).
var (
	ErrInsufficientBalance  = errors.New("wallet: insufficient balance")
	ErrIdempotencyKeyReused = errors.New("wallet: idempotency key reused with different parameters")
	ErrInvalidAmount        = errors.New("wallet: amount must be a positive integer")
	ErrOverflow             = errors.New("wallet: amount would overflow the balance")
	ErrInvalidKey           = errors.New("wallet: idempotency key must be 1 to 255 bytes")
	ErrUnknownCurrency      = errors.New("wallet: unknown currency")
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
