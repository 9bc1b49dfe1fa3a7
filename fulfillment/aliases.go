package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A payment is one provider object (a Stripe Checkout Session, a Paddle
// transaction, a Creem order), recorded once in payments. The other ids its
// events name it by (Stripe's PaymentIntent and charge, Creem's checkout)
// are its aliases in payment_aliases, recorded as they become known; its own
// payment_id is one too, so every lookup goes through the aliases.

// refs returns id followed by the distinct non-empty others, the ids one
// job's event names a payment by.
func refs(id string, others ...string) []string {
	out := []string{id}
	for _, o := range others {
		if o != "" && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// beginForPayment begins the transaction of a job about one provider
// payment, holding the lock of each id the job names it by (lockPaymentKey)
// from the start, in sorted order so that two jobs naming overlapping ids
// never deadlock. Every write of a payment's aliases and reversal events
// happens under the locks of the ids it writes, so a refund naming only a
// PaymentIntent and the payment that makes the PaymentIntent an alias
// serialize. The caller rolls it back on every path that does not commit.
func beginForPayment(ctx context.Context, pool *pgxpool.Pool, provider string, ids []string) (pgx.Tx, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: begin: %w", err)
	}
	sorted := slices.Sorted(slices.Values(ids))
	for _, id := range slices.Compact(sorted) {
		if err := lockPaymentKey(ctx, tx, provider, id); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return tx, nil
}

// paymentByRefs returns the payment any of ids names, locked, or nil. Ids
// that name two payments (which no provider sends) resolve to the older.
func paymentByRefs(ctx context.Context, tx pgx.Tx, provider string, ids []string) (*Payment, error) {
	return scanPayment(tx.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE id = (
		SELECT min(payment) FROM payment_aliases WHERE provider = $1 AND alias = ANY($2)) FOR UPDATE`, provider, ids))
}

// paymentOrderByRefs returns the order id of the payment any of ids names,
// without locking; ok false when none does.
func paymentOrderByRefs(ctx context.Context, tx pgx.Tx, provider string, ids []string) (orderID int64, ok bool, err error) {
	err = tx.QueryRow(ctx, `SELECT p.order_id FROM payments p WHERE p.id = (
		SELECT min(payment) FROM payment_aliases WHERE provider = $1 AND alias = ANY($2))`, provider, ids).Scan(&orderID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("fulfillment: find payment %s %q: %w", provider, ids, err)
	}
	return orderID, true, nil
}

// addAliases records ids as aliases of payment p and reports how many were
// new. An id already naming another payment is left to it.
func addAliases(ctx context.Context, tx pgx.Tx, p *Payment, ids []string) (int, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO payment_aliases (provider, alias, payment)
		SELECT $1, a, $2 FROM unnest($3::text[]) a ON CONFLICT DO NOTHING`, p.Provider, p.ID, ids)
	if err != nil {
		return 0, fmt.Errorf("fulfillment: record aliases of payment %d: %w", p.ID, err)
	}
	return int(tag.RowsAffected()), nil
}

// PaymentAliases returns every id payment row id is known by, its own
// payment_id first.
func PaymentAliases(ctx context.Context, db DB, id int64) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT a.alias FROM payment_aliases a JOIN payments p ON p.id = a.payment
		WHERE a.payment = $1 ORDER BY a.alias <> p.payment_id, a.created_at, a.alias`, id)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: aliases of payment %d: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("fulfillment: aliases of payment %d: %w", id, err)
	}
	return out, nil
}
