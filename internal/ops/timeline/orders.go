package timeline

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

// orderRow is one orders row.
type orderRow struct {
	ID, PlayerID                         int64
	SKU, Provider                        string
	Amount                               int64
	Currency                             string
	Mana                                 int64
	Status, Reason                       string
	CreatedAt, UpdatedAt                 time.Time
	FulfilledAt                          *time.Time
	CheckoutID, CheckoutURL, CheckoutKey string
	RefundedAmount, ClawedBackMana       int64
	Disputed                             bool
}

const ordersSQL = `SELECT id, player_id, sku, provider, amount, currency, mana, status, coalesce(reason, ''),
	created_at, updated_at, fulfilled_at, coalesce(checkout_id, ''), coalesce(checkout_url, ''), coalesce(checkout_key, ''),
	refunded_amount, clawed_back_mana, disputed
FROM orders WHERE id = ANY($1) ORDER BY id`

func loadOrders(ctx context.Context, q dbtx.DB, ids []int64) ([]*orderRow, error) {
	return collect(ctx, q, "orders", ordersSQL, []any{ids}, func(r pgx.Row) (*orderRow, error) {
		var o orderRow
		err := r.Scan(&o.ID, &o.PlayerID, &o.SKU, &o.Provider, &o.Amount, &o.Currency, &o.Mana, &o.Status, &o.Reason,
			&o.CreatedAt, &o.UpdatedAt, &o.FulfilledAt, &o.CheckoutID, &o.CheckoutURL, &o.CheckoutKey,
			&o.RefundedAmount, &o.ClawedBackMana, &o.Disputed)
		return &o, err
	})
}

// apiKeyRow is the replay-cache entry of the request that opened an
// order, while it is kept (24 hours).
type apiKeyRow struct {
	PlayerID       int64
	Key, Status    string
	ResponseStatus *int
	CreatedAt      time.Time
	CompletedAt    *time.Time
	Replays        int64 // answers replayed from the stored response
}

const apiKeysSQL = `SELECT k.player_id, k.key, k.status, k.response_status, k.created_at, k.completed_at, k.replays
FROM unnest($1::bigint[], $2::text[]) AS u(player_id, key)
JOIN idempotency_keys k ON k.player_id = u.player_id AND k.key = u.key`

func loadAPIKeys(ctx context.Context, q dbtx.DB, orders []*orderRow) ([]*apiKeyRow, error) {
	var players []int64
	var keys []string
	for _, o := range orders {
		if o.CheckoutKey != "" {
			players, keys = append(players, o.PlayerID), append(keys, o.CheckoutKey)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return collect(ctx, q, "api keys", apiKeysSQL, []any{players, keys}, func(r pgx.Row) (*apiKeyRow, error) {
		var k apiKeyRow
		err := r.Scan(&k.PlayerID, &k.Key, &k.Status, &k.ResponseStatus, &k.CreatedAt, &k.CompletedAt, &k.Replays)
		return &k, err
	})
}

// paymentRow is one payments row with its aliases.
type paymentRow struct {
	ID                   int64
	Provider, PaymentID  string
	OrderID, PlayerID    int64
	EventID              string
	Amount               int64
	Currency             string
	Minted               int64
	Status, Reason       string
	ClawedBack           int64
	Steps                int64
	RefundID             string
	CreatedAt, UpdatedAt time.Time
	Aliases              []string // every id it is known by, its own first
}

const paymentsSQL = `SELECT id, provider, payment_id, order_id, player_id, event_id, amount, currency, mana_minted,
	status, coalesce(reason, ''), clawed_back_mana, reversal_steps, coalesce(refund_id, ''), created_at, updated_at
FROM payments WHERE order_id = ANY($1) ORDER BY id`

func loadPayments(ctx context.Context, q dbtx.DB, orderIDs []int64) ([]*paymentRow, error) {
	ps, err := collect(ctx, q, "payments", paymentsSQL, []any{orderIDs}, func(r pgx.Row) (*paymentRow, error) {
		var p paymentRow
		err := r.Scan(&p.ID, &p.Provider, &p.PaymentID, &p.OrderID, &p.PlayerID, &p.EventID, &p.Amount, &p.Currency,
			&p.Minted, &p.Status, &p.Reason, &p.ClawedBack, &p.Steps, &p.RefundID, &p.CreatedAt, &p.UpdatedAt)
		return &p, err
	})
	if err != nil || len(ps) == 0 {
		return ps, err
	}
	return ps, loadAliases(ctx, q, ps)
}

const aliasesSQL = `SELECT payment, alias FROM payment_aliases WHERE payment = ANY($1) ORDER BY created_at, alias`

func loadAliases(ctx context.Context, q dbtx.DB, ps []*paymentRow) error {
	byID := map[int64]*paymentRow{}
	ids := make([]int64, len(ps))
	for i, p := range ps {
		byID[p.ID], ids[i] = p, p.ID
		p.Aliases = []string{p.PaymentID}
	}
	type alias struct {
		payment int64
		id      string
	}
	as, err := collect(ctx, q, "payment aliases", aliasesSQL, []any{ids}, func(r pgx.Row) (alias, error) {
		var a alias
		return a, r.Scan(&a.payment, &a.id)
	})
	for _, a := range as {
		if p := byID[a.payment]; !slices.Contains(p.Aliases, a.id) {
			p.Aliases = append(p.Aliases, a.id)
		}
	}
	return err
}

// collect runs one statement and scans every row with scan; what names
// the rows in the error.
func collect[T any](ctx context.Context, q dbtx.DB, what, sql string, args []any, scan func(pgx.Row) (T, error)) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("timeline: read %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("timeline: read %s: %w", what, err)
	}
	return out, nil
}
