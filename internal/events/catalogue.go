package events

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// APIVersion is the version of the envelope and the catalogue, sent in
// every body. A change that removes or renames a field is a new version.
const APIVersion = "2026-12-01"

// The catalogue: every event type billing sends (docs/contract.md).
const (
	OrderFulfilled         = "order.fulfilled"
	PaymentUnapplied       = "payment.unapplied"
	PaymentRefunded        = "payment.refunded"
	ReversalApplied        = "reversal.applied"
	ReversalRefused        = "reversal.refused"
	DebtOpened             = "debt.opened"
	DebtSettled            = "debt.settled"
	DebtForgiven           = "debt.forgiven"
	MarqueeFunded          = "marquee.funded"
	MarqueeUnfunded        = "marquee.unfunded"
	WalletLowBalance       = "wallet.low_balance"
	WalletBalanceRecovered = "wallet.balance_recovered"
)

// Types lists the catalogue, in a stable order.
var Types = []string{OrderFulfilled, PaymentUnapplied, PaymentRefunded, ReversalApplied, ReversalRefused,
	DebtOpened, DebtSettled, DebtForgiven, MarqueeFunded, MarqueeUnfunded, WalletLowBalance, WalletBalanceRecovered}

// ErrUnknownType is returned for a type that is not in the catalogue.
var ErrUnknownType = errors.New("events: unknown event type")

// CheckTypes returns an error naming the first of types not in the
// catalogue.
func CheckTypes(types []string) error {
	for _, t := range types {
		if !slices.Contains(Types, t) {
			return fmt.Errorf("%w %q (known: %v)", ErrUnknownType, t, Types)
		}
	}
	return nil
}

// ID is the id of the event of type typ reporting the effect whose
// idempotency key is key: "evt_" and the first 32 hex digits of
// sha256(typ + "\n" + key). It is the webhook-id of every delivery.
func ID(typ, key string) string {
	sum := sha256.Sum256([]byte(typ + "\n" + key))
	return "evt_" + hex.EncodeToString(sum[:16])
}

// Event is one effect to report. Data is the resource's state after the
// effect, marshalled to JSON as the body's "data".
type Event struct {
	Type     string
	Key      string // the effect's own idempotency key
	PlayerID int64
	Data     any
}

// ID is the event's id.
func (e Event) ID() string { return ID(e.Type, e.Key) }

// The data of each type. Amounts are integers in minor units, Mana or
// Sparks, as the ledger keeps them.

// OrderFulfilledData is order.fulfilled's data.
type OrderFulfilledData struct {
	OrderID             int64  `json:"order_id"`
	SKU                 string `json:"sku"`
	Provider            string `json:"provider"`
	PaymentID           string `json:"payment_id"`
	Amount              int64  `json:"amount"`
	Currency            string `json:"currency"`
	ManaCredited        int64  `json:"mana_credited"`
	WalletTransactionID int64  `json:"wallet_transaction_id"`
}

// PaymentUnappliedData is payment.unapplied's data.
type PaymentUnappliedData struct {
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"`
	OrderID   int64  `json:"order_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Reason    string `json:"reason"`
}

// PaymentRefundedData is payment.refunded's data.
type PaymentRefundedData struct {
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"`
	OrderID   int64  `json:"order_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
}

// ReversalAppliedData is reversal.applied's data.
type ReversalAppliedData struct {
	Provider       string `json:"provider"`
	PaymentID      string `json:"payment_id"`
	OrderID        int64  `json:"order_id"`
	ReversalID     string `json:"reversal_id"`
	Kind           string `json:"kind"`
	State          string `json:"state"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	ManaClawedBack int64  `json:"mana_clawed_back"`
	// DebtOpened: the player could not cover the clawback; the amount is
	// in the debt.opened sent with it.
	DebtOpened bool `json:"debt_opened"`
}

// ReversalRefusedData is reversal.refused's data.
type ReversalRefusedData struct {
	Provider  string `json:"provider"`
	EventID   string `json:"event_id"`
	PaymentID string `json:"payment_id"`
	Reason    string `json:"reason"`
}

// Debts are kept per player (one debts row each), so the debt events
// carry no debt id: the player is the debt's identity.

// DebtOpenedData is debt.opened's data.
type DebtOpenedData struct {
	OrderID         int64 `json:"order_id"`
	ManaOpened      int64 `json:"mana_opened"`
	ManaOutstanding int64 `json:"mana_outstanding"`
}

// DebtSettledData is debt.settled's data.
type DebtSettledData struct {
	ManaSettled     int64 `json:"mana_settled"`
	ManaOutstanding int64 `json:"mana_outstanding"`
}

// DebtForgivenData is debt.forgiven's data.
type DebtForgivenData struct {
	ManaForgiven    int64  `json:"mana_forgiven"`
	ManaOutstanding int64  `json:"mana_outstanding"` // 0: the whole debt is written off
	Reason          string `json:"reason"`
}

// MarqueeFundedData is marquee.funded's data.
type MarqueeFundedData struct {
	MarqueeID     int64  `json:"marquee_id"`
	Day           string `json:"day"`
	Plan          string `json:"plan"`
	SparksDebited int64  `json:"sparks_debited"`
	PaidThrough   string `json:"paid_through"`
}

// MarqueeUnfundedData is marquee.unfunded's data.
type MarqueeUnfundedData struct {
	MarqueeID int64  `json:"marquee_id"`
	Day       string `json:"day"`
	Plan      string `json:"plan"`
	Reason    string `json:"reason"`
}

// BalanceData is wallet.low_balance's and wallet.balance_recovered's data.
type BalanceData struct {
	SparksBalance int64 `json:"sparks_balance"`
	SparksPerDay  int64 `json:"sparks_per_day"`
	DaysCovered   int64 `json:"days_covered"`
	ThresholdDays int64 `json:"threshold_days"`
}

// The keys of the effects that have no wallet transaction of their own:
// events keys them in a namespace of its own, apart from the wallet's.

// UnappliedKey is the key of payment.unapplied: the payment's row, recorded
// once per provider payment.
func UnappliedKey(paymentRowID int64) string {
	return unappliedPrefix + strconv.FormatInt(paymentRowID, 10)
}

// sqlUnappliedKey is UnappliedKey in SQL, of a bigint expression.
func sqlUnappliedKey(paymentRowID string) string {
	return "'" + unappliedPrefix + "' || " + paymentRowID
}

// DebtOpenedKey is the key of debt.opened: the reversal step of a payment
// that recorded the debt.
func DebtOpenedKey(paymentRowID, step int64) string {
	return debtOpenedPrefix + strconv.FormatInt(paymentRowID, 10) + "/" + strconv.FormatInt(step, 10)
}

// sqlDebtOpenedKey is DebtOpenedKey in SQL, of text expressions holding
// the payment's row id and the step in decimal.
func sqlDebtOpenedKey(paymentRowID, step string) string {
	return "'" + debtOpenedPrefix + "' || " + paymentRowID + " || '/' || " + step
}

// The keys of the effects that are keyed on something other than a
// wallet transaction's own key. Their forms are stored (every event id
// derives from one), so they stay as they are; their Go and SQL forms
// live here side by side, and a test ties the two.

// RefundedKey is the key of payment.refunded: the key of the refund of
// the payment's row, which is also our refund's idempotency key at the
// provider.
func RefundedKey(paymentRowID int64) string {
	return refundPrefix + strconv.FormatInt(paymentRowID, 10) + refundSuffix
}

func sqlRefundedKey(paymentRowID string) string {
	return "'" + refundPrefix + "' || " + paymentRowID + " || '" + refundSuffix + "'"
}

// ReversalEventKey is the key of reversal.applied and reversal.refused:
// the provider's event, which UNIQUE (provider, event_id) makes once.
func ReversalEventKey(provider, eventID string) string {
	return reversalEventPrefix + provider + ":" + eventID
}

func sqlReversalEventKey(provider, eventID string) string {
	return "'" + reversalEventPrefix + "' || " + provider + " || ':' || " + eventID
}

// DebtSettledKey is the key of debt.settled: a settlement is a leg of the
// credit that paid it, so it is keyed on that credit's key.
func DebtSettledKey(creditKey string) string { return creditKey + debtSettledSuffix }

func sqlDebtSettledKey(creditKey string) string { return creditKey + " || '" + debtSettledSuffix + "'" }

const (
	unappliedPrefix     = "event:unapplied/"
	debtOpenedPrefix    = "event:debt_opened/"
	refundPrefix        = "billing-payment-"
	refundSuffix        = "-refund"
	reversalEventPrefix = "reversal_event:"
	debtSettledSuffix   = ":debt_settlement"
)
