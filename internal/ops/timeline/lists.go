package timeline

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

// UnappliedPayment is money received that minted nothing and is not
// refunded yet.
type UnappliedPayment struct {
	ID        int64 // payments row id (billing payments mark-refunded --payment)
	Provider  string
	PaymentID string
	OrderID   int64
	PlayerID  int64
	Amount    int64
	Currency  string
	Reason    string
	CreatedAt time.Time
}

// Money is the amount as a person reads it ("9.99 USD").
func (u UnappliedPayment) Money() string { return money(u.Amount, u.Currency) }

// unappliedSQL spells status = 'unapplied' as the partial index on it
// does, so the list is read from that index alone.
const unappliedSQL = `SELECT id, provider, payment_id, order_id, player_id, amount, currency, coalesce(reason, ''), created_at
FROM payments WHERE status = 'unapplied' ORDER BY id LIMIT $1`

// Unapplied lists the oldest limit unapplied payments: what is still to
// refund.
func Unapplied(ctx context.Context, db dbtx.DB, limit int) ([]UnappliedPayment, error) {
	return collect(ctx, db, "unapplied payments", unappliedSQL, []any{limit}, func(r pgx.Row) (UnappliedPayment, error) {
		var u UnappliedPayment
		return u, r.Scan(&u.ID, &u.Provider, &u.PaymentID, &u.OrderID, &u.PlayerID, &u.Amount, &u.Currency, &u.Reason, &u.CreatedAt)
	})
}

// OpenDebt is a player's outstanding debt.
type OpenDebt struct {
	PlayerID  int64
	Mana      int64
	UpdatedAt time.Time
}

// openDebtsSQL reads the partial index of open debts (outstanding > 0).
const openDebtsSQL = `SELECT player_id, outstanding, updated_at FROM debts WHERE outstanding > 0
ORDER BY outstanding DESC, player_id LIMIT $1`

// OpenDebts lists the limit largest open debts.
func OpenDebts(ctx context.Context, db dbtx.DB, limit int) ([]OpenDebt, error) {
	return collect(ctx, db, "open debts", openDebtsSQL, []any{limit}, func(r pgx.Row) (OpenDebt, error) {
		var d OpenDebt
		return d, r.Scan(&d.PlayerID, &d.Mana, &d.UpdatedAt)
	})
}
