package fulfillment

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/wallet"
)

// The outgoing events of the payment path (package events), each written
// in the transaction of its effect and keyed on that effect's own key.

// UnappliedKey is the key of payment.unapplied: the payment's row, which
// UNIQUE (provider, payment_id) makes once per payment (events.UnappliedKey).
func UnappliedKey(paymentRowID int64) string { return events.UnappliedKey(paymentRowID) }

// ReversalEventKey is the key of reversal.applied and reversal.refused:
// the provider's event, which UNIQUE (provider, event_id) makes once
// (events.ReversalEventKey).
func ReversalEventKey(provider, eventID string) string {
	return events.ReversalEventKey(provider, eventID)
}

// debtSettledKey: a settlement is a leg of the credit that paid it
// (events.DebtSettledKey).
func debtSettledKey(creditKey string) string { return events.DebtSettledKey(creditKey) }

func emitFulfilled(ctx context.Context, tx pgx.Tx, o *Order, p *Payment, t *wallet.Transaction, settled int64) error {
	key := wallet.FulfilmentKey(o.ID).String()
	evs := []events.Event{{Type: events.OrderFulfilled, Key: key, PlayerID: o.PlayerID,
		Data: events.OrderFulfilledData{OrderID: o.ID, SKU: o.SKU, Provider: p.Provider, PaymentID: p.PaymentID,
			Amount: p.Amount, Currency: p.Currency, ManaCredited: o.Mana, WalletTransactionID: t.ID}}}
	if settled > 0 {
		left, err := wallet.OutstandingDebt(ctx, tx, o.PlayerID)
		if err != nil {
			return err
		}
		evs = append(evs, events.Event{Type: events.DebtSettled, Key: debtSettledKey(key), PlayerID: o.PlayerID,
			Data: events.DebtSettledData{ManaSettled: settled, ManaOutstanding: left}})
	}
	_, err := events.EmitManyTx(ctx, tx, evs)
	return err
}

func emitUnapplied(ctx context.Context, tx pgx.Tx, p *Payment) error {
	_, err := events.EmitTx(ctx, tx, events.Event{Type: events.PaymentUnapplied, Key: UnappliedKey(p.ID), PlayerID: p.PlayerID,
		Data: events.PaymentUnappliedData{Provider: p.Provider, PaymentID: p.PaymentID, OrderID: p.OrderID,
			Amount: p.Amount, Currency: p.Currency, Reason: p.Reason}})
	return err
}

// emitRefunded reports that unapplied payment p went back to the customer
// in full, by our automatic refund or by the provider's: one event per
// payment either way, keyed on the refund's own key.
func emitRefunded(ctx context.Context, tx pgx.Tx, p *Payment) error {
	_, err := events.EmitTx(ctx, tx, events.Event{Type: events.PaymentRefunded, Key: RefundKey(p.ID), PlayerID: p.PlayerID,
		Data: events.PaymentRefundedData{Provider: p.Provider, PaymentID: p.PaymentID, OrderID: p.OrderID,
			Amount: p.Amount, Currency: p.Currency}})
	return err
}

// emitDecisions reports the reversal events of p decided in this
// transaction, and the debt its clawback step opened.
func emitDecisions(ctx context.Context, tx pgx.Tx, o *Order, p *Payment, decided []*reversalEvent, debt int64) error {
	var evs []events.Event
	for _, e := range decided {
		if !e.decidedNow {
			continue
		}
		key := ReversalEventKey(p.Provider, e.eventID)
		if e.status == EventRefused {
			evs = append(evs, events.Event{Type: events.ReversalRefused, Key: key, PlayerID: p.PlayerID,
				Data: events.ReversalRefusedData{Provider: p.Provider, EventID: e.eventID, PaymentID: p.PaymentID, Reason: e.reason}})
			continue
		}
		evs = append(evs, events.Event{Type: events.ReversalApplied, Key: key, PlayerID: p.PlayerID,
			Data: events.ReversalAppliedData{Provider: p.Provider, PaymentID: p.PaymentID, OrderID: o.ID, ReversalID: e.reversalID,
				Kind: e.kind, State: e.state, Amount: e.amount, Currency: e.currency, ManaClawedBack: p.ClawedBackMana,
				DebtOpened: debt > 0}})
	}
	if debt > 0 {
		left, err := wallet.OutstandingDebt(ctx, tx, p.PlayerID)
		if err != nil {
			return err
		}
		evs = append(evs, events.Event{Type: events.DebtOpened,
			Key: events.DebtOpenedKey(p.ID, p.steps), PlayerID: p.PlayerID,
			Data: events.DebtOpenedData{OrderID: o.ID, ManaOpened: debt, ManaOutstanding: left}})
	}
	_, err := events.EmitManyTx(ctx, tx, evs)
	return err
}

// markRefundedAndEmit records our automatic refund of unapplied payment p
// and its payment.refunded in one transaction; a payment no longer
// unapplied (the provider's refunds were recorded first, and reported)
// is left as it is.
func markRefundedAndEmit(ctx context.Context, pool *pgxpool.Pool, p *Payment, refundID string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("fulfillment: mark payment %d refunded: %w", p.ID, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tag, err := tx.Exec(ctx, markRefundedSQL, p.ID, refundID)
	if err != nil {
		return fmt.Errorf("fulfillment: mark payment %d refunded: %w", p.ID, err)
	}
	if tag.RowsAffected() > 0 {
		if err := emitRefunded(ctx, tx, p); err != nil {
			return err
		}
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return fmt.Errorf("fulfillment: commit refund of payment %d: %w", p.ID, err)
	}
	return nil
}

// ForgiveDebt writes the player's whole debt off under the operator's key
// (wallet.Store.ForgiveDebtTx) and reports it as debt.forgiven in the same
// transaction, keyed on the forgiveness's own key: a replayed key writes
// no second event, and a key that found nothing owed reports nothing (no
// debt was written off). It commits through durable.Commit.
func ForgiveDebt(ctx context.Context, pool *pgxpool.Pool, ws *wallet.Store, playerID int64, key, reason string) (*wallet.Forgiveness, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: forgive debt of player %d: %w", playerID, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	f, err := ws.ForgiveDebtTx(ctx, tx, playerID, key, reason)
	if err != nil {
		return nil, err
	}
	if !f.Replayed && f.Mana > 0 {
		if err := emitForgiven(ctx, tx, f, reason); err != nil {
			return nil, err
		}
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return nil, fmt.Errorf("fulfillment: commit forgiveness of player %d: %w", playerID, err)
	}
	return f, nil
}

func emitForgiven(ctx context.Context, tx pgx.Tx, f *wallet.Forgiveness, reason string) error {
	left, err := wallet.OutstandingDebt(ctx, tx, f.PlayerID)
	if err != nil {
		return err
	}
	_, err = events.EmitTx(ctx, tx, events.Event{Type: events.DebtForgiven, Key: f.Key, PlayerID: f.PlayerID,
		Data: events.DebtForgivenData{ManaForgiven: f.Mana, ManaOutstanding: left, Reason: reason}})
	return err
}
