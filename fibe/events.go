package fibe

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// EventAPIVersion is the version of the event envelope and data this SDK
// reads (Event.APIVersion). A field added to an event's data does not
// change it; a field removed or changed in meaning does.
const EventAPIVersion = "2026-12-01"

// The event types billing sends (Event.Type), one data struct each.
const (
	EventOrderFulfilled         = "order.fulfilled"
	EventPaymentUnapplied       = "payment.unapplied"
	EventPaymentRefunded        = "payment.refunded"
	EventReversalApplied        = "reversal.applied"
	EventReversalRefused        = "reversal.refused"
	EventDebtOpened             = "debt.opened"
	EventDebtSettled            = "debt.settled"
	EventDebtForgiven           = "debt.forgiven"
	EventMarqueeFunded          = "marquee.funded"
	EventMarqueeUnfunded        = "marquee.unfunded"
	EventWalletLowBalance       = "wallet.low_balance"
	EventWalletBalanceRecovered = "wallet.balance_recovered"
)

// EventTypes returns every event type this SDK knows, in catalogue order.
func EventTypes() []string {
	return slices.Clone(eventTypes)
}

var eventTypes = []string{
	EventOrderFulfilled, EventPaymentUnapplied, EventPaymentRefunded,
	EventReversalApplied, EventReversalRefused,
	EventDebtOpened, EventDebtSettled, EventDebtForgiven,
	EventMarqueeFunded, EventMarqueeUnfunded,
	EventWalletLowBalance, EventWalletBalanceRecovered,
}

// Event is one event billing sends to a webhook endpoint: the body of the
// delivery. ID is also the delivery's webhook-id header: it is the same on
// every delivery and resend of the event, so a consumer deduplicates on
// it. Sequence grows per player in the order the effects committed;
// deliveries may arrive in another order, so a consumer keeps the highest
// Sequence it applied and drops an older one (Data holds the resource's
// state after the effect: the newest wins).
type Event struct {
	ID         string    `json:"id"`   // "evt_" and 32 lower-case hex digits
	Type       string    `json:"type"` // one of the Event* constants
	APIVersion string    `json:"api_version"`
	CreatedAt  time.Time `json:"created_at"` // when the effect committed
	PlayerID   int64     `json:"player_id"`
	Sequence   int64     `json:"sequence"`
	// Data is the type's data: read it with Decode.
	Data json.RawMessage `json:"data"`
}

// EventData is the data of one event type: *OrderFulfilledData, and so on.
type EventData interface {
	// EventType is the Event.Type whose data this is.
	EventType() string
}

// ErrUnknownEventType is returned by Event.Decode for a type this SDK does
// not know (a newer one): acknowledge such an event (answer 2xx) and
// ignore it, or billing retries it for days.
var ErrUnknownEventType = errors.New("fibe: unknown event type")

// Decode returns the event's data as its type's struct, for a type switch:
//
//	switch d := data.(type) {
//	case *fibe.PaymentRefundedData: ...
//	}
//
// Members the struct does not know are ignored, so data that gained a
// field still decodes.
func (e *Event) Decode() (EventData, error) {
	var d EventData
	switch e.Type {
	case EventOrderFulfilled:
		d = new(OrderFulfilledData)
	case EventPaymentUnapplied:
		d = new(PaymentUnappliedData)
	case EventPaymentRefunded:
		d = new(PaymentRefundedData)
	case EventReversalApplied:
		d = new(ReversalAppliedData)
	case EventReversalRefused:
		d = new(ReversalRefusedData)
	case EventDebtOpened:
		d = new(DebtOpenedData)
	case EventDebtSettled:
		d = new(DebtSettledData)
	case EventDebtForgiven:
		d = new(DebtForgivenData)
	case EventMarqueeFunded:
		d = new(MarqueeFundedData)
	case EventMarqueeUnfunded:
		d = new(MarqueeUnfundedData)
	case EventWalletLowBalance:
		d = new(WalletLowBalanceData)
	case EventWalletBalanceRecovered:
		d = new(WalletBalanceRecoveredData)
	default:
		return nil, fmt.Errorf("%w %q (event %s)", ErrUnknownEventType, e.Type, e.ID)
	}
	if err := json.Unmarshal(e.Data, d); err != nil {
		return nil, fmt.Errorf("fibe: decode %s data of event %s: %w", e.Type, e.ID, err)
	}
	return d, nil
}

// OrderFulfilledData: an order was paid and its Mana credited.
type OrderFulfilledData struct {
	OrderID   int64  `json:"order_id"`
	SKU       string `json:"sku"`
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"` // the provider's id of the payment
	Amount    int64  `json:"amount"`     // paid, in minor units of Currency
	Currency  string `json:"currency"`
	// ManaCredited is the Mana the order minted; WalletTransactionID the
	// Mana wallet's credit.
	ManaCredited        int64 `json:"mana_credited"`
	WalletTransactionID int64 `json:"wallet_transaction_id"`
}

// PaymentUnappliedData: a payment minted nothing (a second payment of an
// order already paid, or one the order refused); it is to be refunded.
type PaymentUnappliedData struct {
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"`
	OrderID   int64  `json:"order_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Reason    string `json:"reason"`
}

// PaymentRefundedData: billing gave an unapplied payment back in full (an
// automatic refund, or one an operator recorded).
type PaymentRefundedData struct {
	Provider  string `json:"provider"`
	PaymentID string `json:"payment_id"`
	OrderID   int64  `json:"order_id"`
	Amount    int64  `json:"amount"` // refunded, in minor units of Currency
	Currency  string `json:"currency"`
}

// Reversal kinds (ReversalAppliedData.Kind).
const (
	ReversalRefund  = "refund"
	ReversalDispute = "dispute"
)

// ReversalAppliedData: a refund or a dispute of a paid order was applied:
// Mana was clawed back (or, for a won dispute, given back).
type ReversalAppliedData struct {
	Provider   string `json:"provider"`
	PaymentID  string `json:"payment_id"`
	OrderID    int64  `json:"order_id"`
	ReversalID string `json:"reversal_id"` // the provider's refund or dispute id, as billing keys it
	Kind       string `json:"kind"`        // ReversalRefund or ReversalDispute
	// State is "succeeded" for a refund; "open", "won" or "lost" for a
	// dispute.
	State    string `json:"state"`
	Amount   int64  `json:"amount"` // the provider's amount, in minor units of Currency
	Currency string `json:"currency"`
	// ManaClawedBack is the Mana this reversal took back from the player's
	// wallets; DebtOpened is true when they could not cover it all and owe
	// the rest (the debt.opened event carries the debt).
	ManaClawedBack int64 `json:"mana_clawed_back"`
	DebtOpened     bool  `json:"debt_opened"`
}

// ReversalRefusedData: billing refused a provider's refund or dispute
// event (another currency, a malformed amount or state, ...): it changed
// nothing.
type ReversalRefusedData struct {
	Provider  string `json:"provider"`
	EventID   string `json:"event_id"` // the provider's event id
	PaymentID string `json:"payment_id"`
	Reason    string `json:"reason"`
}

// A player has one debt at a time (Event.PlayerID names it), so the debt
// events carry no debt id.

// DebtOpenedData: a clawback of order OrderID found the Mana already
// spent: ManaOpened more is owed, ManaOutstanding in all, settled first by
// the player's later credits.
type DebtOpenedData struct {
	OrderID         int64 `json:"order_id"`
	ManaOpened      int64 `json:"mana_opened"`
	ManaOutstanding int64 `json:"mana_outstanding"`
}

// DebtSettledData: a credit settled ManaSettled of the player's debt;
// ManaOutstanding remains (0: settled in full).
type DebtSettledData struct {
	ManaSettled     int64 `json:"mana_settled"`
	ManaOutstanding int64 `json:"mana_outstanding"`
}

// DebtForgivenData: an operator wrote ManaForgiven of the player's debt
// off.
type DebtForgivenData struct {
	ManaForgiven    int64  `json:"mana_forgiven"`
	ManaOutstanding int64  `json:"mana_outstanding"` // 0: the whole debt is written off
	Reason          string `json:"reason"`
}

// MarqueeFundedData: a Marquee's service day was paid.
type MarqueeFundedData struct {
	MarqueeID     int64     `json:"marquee_id"`
	Day           string    `json:"day"` // YYYY-MM-DD, in the deployment's service-day time zone
	Plan          string    `json:"plan"`
	SparksDebited int64     `json:"sparks_debited"`
	PaidThrough   time.Time `json:"paid_through"` // the end of the last paid service day
}

// MarqueeUnfundedData: a service day began and the Marquee is not funded:
// the API answers 402 marquee_not_funded for it until it is.
type MarqueeUnfundedData struct {
	MarqueeID int64  `json:"marquee_id"`
	Day       string `json:"day"`
	Plan      string `json:"plan"`
	Reason    string `json:"reason"`
}

// WalletBalance is the data of wallet.low_balance and
// wallet.balance_recovered: the player's Sparks against what their
// Marquees' plans cost per service day.
type WalletBalance struct {
	SparksBalance int64 `json:"sparks_balance"`
	SparksPerDay  int64 `json:"sparks_per_day"`
	DaysCovered   int64 `json:"days_covered"`   // whole service days SparksBalance pays for
	ThresholdDays int64 `json:"threshold_days"` // the deployment's threshold
}

// WalletLowBalanceData: the player's Sparks fell below ThresholdDays of
// service days; sent once per crossing.
type WalletLowBalanceData WalletBalance

// WalletBalanceRecoveredData: the player's Sparks cover ThresholdDays
// again after a wallet.low_balance.
type WalletBalanceRecoveredData WalletBalance

// EventType implements EventData.
func (*OrderFulfilledData) EventType() string { return EventOrderFulfilled }

// EventType implements EventData.
func (*PaymentUnappliedData) EventType() string { return EventPaymentUnapplied }

// EventType implements EventData.
func (*PaymentRefundedData) EventType() string { return EventPaymentRefunded }

// EventType implements EventData.
func (*ReversalAppliedData) EventType() string { return EventReversalApplied }

// EventType implements EventData.
func (*ReversalRefusedData) EventType() string { return EventReversalRefused }

// EventType implements EventData.
func (*DebtOpenedData) EventType() string { return EventDebtOpened }

// EventType implements EventData.
func (*DebtSettledData) EventType() string { return EventDebtSettled }

// EventType implements EventData.
func (*DebtForgivenData) EventType() string { return EventDebtForgiven }

// EventType implements EventData.
func (*MarqueeFundedData) EventType() string { return EventMarqueeFunded }

// EventType implements EventData.
func (*MarqueeUnfundedData) EventType() string { return EventMarqueeUnfunded }

// EventType implements EventData.
func (*WalletLowBalanceData) EventType() string { return EventWalletLowBalance }

// EventType implements EventData.
func (*WalletBalanceRecoveredData) EventType() string { return EventWalletBalanceRecovered }
