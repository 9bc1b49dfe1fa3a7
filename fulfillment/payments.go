package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/fibe-dev/billing/internal/provider"
)

// Payment statuses.
const (
	PaymentApplied   = "applied"   // minted the order's Mana
	PaymentUnapplied = "unapplied" // money received that minted nothing: refund it
	PaymentRefunded  = "refunded"  // an unapplied payment we refunded
)

// Payment is one provider payment, recorded once per (provider, payment id).
type Payment struct {
	ID             int64
	Provider       string
	PaymentID      string
	OrderID        int64
	PlayerID       int64
	EventID        string
	Amount         int64
	Currency       string
	ManaMinted     int64
	Status         string
	Reason         string
	ClawedBackMana int64
	RefundID       string
	CreatedAt      time.Time
	steps          int64
}

var unappliedPayments = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "billing_unapplied_payments_total",
	Help: "Payments recorded unapplied (a second payment for a paid order, or one the order refused), by provider.",
}, []string{"provider"})

func init() {
	for _, p := range provider.Names() {
		unappliedPayments.WithLabelValues(p) // export zeros, so increase() sees the first one
	}
}

const paymentColumns = `id, provider, payment_id, order_id, player_id, event_id, amount, currency, mana_minted,
	status, coalesce(reason, ''), clawed_back_mana, coalesce(refund_id, ''), created_at, reversal_steps`

func scanPayment(row pgx.Row) (*Payment, error) {
	var p Payment
	err := row.Scan(&p.ID, &p.Provider, &p.PaymentID, &p.OrderID, &p.PlayerID, &p.EventID, &p.Amount, &p.Currency,
		&p.ManaMinted, &p.Status, &p.Reason, &p.ClawedBackMana, &p.RefundID, &p.CreatedAt, &p.steps)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fulfillment: read payment: %w", err)
	}
	return &p, nil
}

// lockPaymentKey serializes, until tx ends, all work on one provider
// payment id, whether or not its row exists yet: a refund and the payment
// it refunds may be worked at the same moment, in either order.
func lockPaymentKey(ctx context.Context, tx pgx.Tx, provider, paymentID string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 7))`, provider+" "+paymentID)
	if err != nil {
		return fmt.Errorf("fulfillment: lock payment %s %q: %w", provider, paymentID, err)
	}
	return nil
}

func paymentByProviderID(ctx context.Context, db DB, provider, paymentID string) (*Payment, error) {
	return scanPayment(db.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments
		WHERE provider = $1 AND payment_id = $2 FOR UPDATE`, provider, paymentID))
}

func insertPayment(ctx context.Context, tx pgx.Tx, p *Payment) error {
	var reason *string
	if p.Reason != "" {
		reason = &p.Reason
	}
	err := tx.QueryRow(ctx, `INSERT INTO payments (provider, payment_id, order_id, player_id, event_id, amount,
		currency, mana_minted, status, reason) VALUES ($1, $2, $3, $4, $5, $6, lower($7), $8, $9, $10)
		RETURNING id, created_at`, p.Provider, p.PaymentID, p.OrderID, p.PlayerID, p.EventID, p.Amount, p.Currency,
		p.ManaMinted, p.Status, reason).Scan(&p.ID, &p.CreatedAt)
	if err != nil {
		return fmt.Errorf("fulfillment: record payment %s %q: %w", p.Provider, p.PaymentID, err)
	}
	return nil
}

// recordPayment inserts p and records ids (its identity among them) as its
// aliases.
func recordPayment(ctx context.Context, tx pgx.Tx, p *Payment, ids []string) error {
	if err := insertPayment(ctx, tx, p); err != nil {
		return err
	}
	_, err := addAliases(ctx, tx, p, ids)
	return err
}

// ListPaymentsParams filter ListPayments.
type ListPaymentsParams struct {
	// UnappliedOnly lists what is still to refund: status unapplied
	// (received, minted nothing, not refunded yet) and not already given
	// back in full by the provider's own accepted refunds of it.
	UnappliedOnly bool
	OrderID       int64 // 0: every order
	Limit         int   // 0: 1000
}

// ListPayments returns payments, oldest first.
func ListPayments(ctx context.Context, db DB, lp ListPaymentsParams) ([]Payment, error) {
	if lp.Limit <= 0 {
		lp.Limit = 1000
	}
	rows, err := db.Query(ctx, `SELECT `+paymentColumns+` FROM payments p
		WHERE (NOT $1 OR (status = 'unapplied' AND amount > (SELECT coalesce(sum(least(r.amount, p.amount)::numeric), 0)
			FROM payment_reversals r WHERE r.payment = p.id AND r.kind = 'refund')))
			AND ($2::bigint = 0 OR order_id = $2)
		ORDER BY id LIMIT $3`, lp.UnappliedOnly, lp.OrderID, lp.Limit)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: list payments: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payment, error) {
		p, err := scanPayment(r)
		if err != nil {
			return Payment{}, err
		}
		return *p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("fulfillment: list payments: %w", err)
	}
	return out, nil
}

// legacyPaymentID names the payment of a fulfil job enqueued without one
// (before payments were recorded): every such job of an order is taken to
// be about the order's one payment, as fulfilment then assumed.
func legacyPaymentID(orderID int64) string { return "order:" + strconv.FormatInt(orderID, 10) }
