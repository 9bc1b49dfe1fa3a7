package fulfillment

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The read model of payments: what a customer (GET /v1/orders/{id}) and an
// operator (billing payments list) see of each payment, written once here
// so that both answer "was I charged twice, and what went back?" alike.
// payments.status records only what billing did (applied, unapplied,
// refunded by us); the money the provider gave back is in the accepted
// facts (payment_reversals), so the status shown is derived from both.

// PaymentPartiallyRefunded is the shown status of a payment that minted
// its order's Mana and whose accepted refunds cover part of what it paid.
// A payment whose refunds cover all of it, or an unapplied payment refunded
// by us or by the provider, shows PaymentRefunded.
const PaymentPartiallyRefunded = "partially_refunded"

// PaymentView is one payment as it is shown.
type PaymentView struct {
	// Payment is the stored row; its Status is the stored one (applied,
	// unapplied, or refunded by us).
	Payment Payment
	// Status is the shown status: applied, unapplied, refunded or
	// partially_refunded.
	Status string
	// RefundedAmount is what went back as refunds, in the payment's
	// currency, at most its amount: the sum of its accepted refund facts,
	// or all of it once we refunded it.
	RefundedAmount int64
	// Reversals are its accepted refund and dispute facts, oldest first.
	Reversals []ReversalView
}

// ReversalView is one accepted refund or dispute fact of a payment.
type ReversalView struct {
	// ReversalID is the fact's key: the provider's refund or dispute id
	// (Stripe refunds are keyed charge:<charge id>, Paddle chargebacks
	// chargeback:<transaction id>).
	ReversalID string
	Kind       string // ReversalRefund or ReversalDispute
	State      string // StateSucceeded for refunds; StateOpen, StateWon or StateLost for disputes
	Amount     int64  // the provider's latest accepted amount, uncapped
	Currency   string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// PaymentViewParams filter PaymentViews.
type PaymentViewParams struct {
	OrderID int64 // 0: every order
	// UnappliedOnly keeps the payments shown unapplied: money that minted
	// nothing and that neither we nor the provider gave back in full.
	UnappliedOnly bool
	Limit         int // 0: 1000
}

// OrderPayments returns every payment of order orderID, oldest first. It
// does not check who owns the order: the caller does (GetOrder).
func OrderPayments(ctx context.Context, db DB, orderID int64) ([]PaymentView, error) {
	return PaymentViews(ctx, db, PaymentViewParams{OrderID: orderID, Limit: -1})
}

// paymentViewSQL derives each payment's refunded amount and shown status.
// Each refund fact is capped at the payment's amount before the sum, which
// PostgreSQL takes in numeric, so no total of facts can overflow bigint.
const paymentViewSQL = `SELECT p.id, p.provider, p.payment_id, p.order_id, p.player_id, p.event_id, p.amount,
		p.currency, p.mana_minted, p.status, coalesce(p.reason, ''), p.clawed_back_mana, coalesce(p.refund_id, ''),
		p.created_at, v.status, v.refunded
	FROM payments p
	CROSS JOIN LATERAL (SELECT least(p.amount, coalesce(sum(least(f.amount, p.amount)), 0))::bigint AS facts
		FROM payment_reversals f WHERE f.payment = p.id AND f.kind = 'refund') r
	CROSS JOIN LATERAL (SELECT CASE
			WHEN p.status = 'refunded' OR (r.facts > 0 AND r.facts >= p.amount) THEN 'refunded'
			WHEN p.status = 'unapplied' THEN 'unapplied'
			WHEN r.facts > 0 THEN 'partially_refunded'
			ELSE p.status END AS status,
		CASE WHEN p.status = 'refunded' THEN greatest(p.amount, 0) ELSE greatest(r.facts, 0) END AS refunded) v
	WHERE ($1::bigint = 0 OR p.order_id = $1) AND (NOT $2 OR v.status = 'unapplied')
	ORDER BY p.id LIMIT $3`

// PaymentViews returns payments as they are shown, oldest first. A
// negative Limit means no limit.
func PaymentViews(ctx context.Context, db DB, vp PaymentViewParams) ([]PaymentView, error) {
	var limit *int // NULL: LIMIT ALL
	if vp.Limit >= 0 {
		limit = new(cmp.Or(vp.Limit, 1000))
	}
	rows, err := db.Query(ctx, paymentViewSQL, vp.OrderID, vp.UnappliedOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: list payments: %w", err)
	}
	views, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PaymentView, error) {
		var v PaymentView
		p := &v.Payment
		err := r.Scan(&p.ID, &p.Provider, &p.PaymentID, &p.OrderID, &p.PlayerID, &p.EventID, &p.Amount, &p.Currency,
			&p.ManaMinted, &p.Status, &p.Reason, &p.ClawedBackMana, &p.RefundID, &p.CreatedAt, &v.Status, &v.RefundedAmount)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("fulfillment: list payments: %w", err)
	}
	if err := addReversals(ctx, db, views); err != nil {
		return nil, err
	}
	return views, nil
}

// addReversals reads the accepted facts of views' payments in one query.
func addReversals(ctx context.Context, db DB, views []PaymentView) error {
	if len(views) == 0 {
		return nil
	}
	ids := make([]int64, len(views))
	at := make(map[int64]int, len(views))
	for i, v := range views {
		ids[i], at[v.Payment.ID] = v.Payment.ID, i
	}
	rows, err := db.Query(ctx, `SELECT payment, reversal_id, kind, state, amount, currency, created_at, updated_at
		FROM payment_reversals WHERE payment = ANY($1) ORDER BY payment, created_at, id`, ids)
	if err != nil {
		return fmt.Errorf("fulfillment: read reversals: %w", err)
	}
	var payment int64
	var f ReversalView
	_, err = pgx.ForEachRow(rows, []any{&payment, &f.ReversalID, &f.Kind, &f.State, &f.Amount, &f.Currency,
		&f.CreatedAt, &f.UpdatedAt}, func() error {
		v := &views[at[payment]]
		v.Reversals = append(v.Reversals, f)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fulfillment: read reversals: %w", err)
	}
	return nil
}
