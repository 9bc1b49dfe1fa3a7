// Package fulfillment sells Mana: the SKU catalogue, orders with their
// pricing snapshot, and the fulfill_order job that mints an order's Mana
// through the wallet exactly once.
//
// An order copies the SKU's price (amount, currency) and the Mana it grants
// at checkout, so a later catalogue change never alters what an existing
// order must be paid or what it grants. A payment provider's completed
// payment (claimed by package webhook) enqueues a FulfillOrderArgs job; the
// worker locks the order row, checks the paid amount and currency against
// the snapshot, credits the wallet under the key order:<id>:fulfilment and
// completes the job, all in one transaction.
package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/errcode"
	"github.com/fibe-dev/billing/internal/provider"
)

// Order statuses.
const (
	StatusPending   = "pending"
	StatusFulfilled = "fulfilled"
	StatusRejected  = "rejected"
	// The statuses of a fulfilled order whose money went (partly) back. The
	// orders row keeps status fulfilled; these are derived from its
	// refunded_amount and disputed columns when it is read.
	StatusRefunded          = "refunded"
	StatusPartiallyRefunded = "partially_refunded"
	StatusDisputed          = "disputed"
)

// Errors. Compare with errors.Is. Each declares its answer (package errcode).
var (
	ErrUnknownSKU = errcode.New("fulfillment: unknown sku", errcode.Answer{Status: http.StatusBadRequest,
		Code: "unknown_sku", Detail: "no such SKU"})
	// ErrNotFound is returned for a missing order and for another player's.
	ErrNotFound = errcode.New("fulfillment: order not found", errcode.NotFound)
)

// DB is a pool, a connection or a transaction (the one DB interface).
type DB = dbtx.DB

// Order is a checkout with its pricing snapshot.
type Order struct {
	ID                  int64
	PlayerID            int64
	SKU                 string
	Provider            string
	Amount              int64  // minor units of Currency
	Currency            string // lower case ISO 4217
	Mana                int64
	Status              string
	Reason              string
	WalletTransactionID int64
	RefundedAmount      int64 // minor units, at most Amount
	ClawedBackMana      int64 // net of what a won dispute gave back
	CreatedAt           time.Time
	UpdatedAt           time.Time
	FulfilledAt         *time.Time
	// CheckoutID and CheckoutURL are the provider's hosted checkout, set
	// once (SetCheckout); empty until it has been opened.
	CheckoutID  string
	CheckoutURL string
}

// CheckoutParams describe a new order.
type CheckoutParams struct {
	PlayerID int64
	SKU      string
	Provider string
	// Key, when set, makes the creation idempotent per (player, key): a
	// second call with the same key returns the first order (the client's
	// Idempotency-Key, so a retry after a provider failure resumes it).
	Key string
}

// ErrCheckoutKeyReused is returned when CheckoutParams.Key already names an
// order of another SKU or provider.
var ErrCheckoutKeyReused = errcode.New("fulfillment: checkout key already used for another order", errcode.Answer{
	Status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused", Detail: "this Idempotency-Key was used for a different request"})

const orderColumns = `id, player_id, sku, provider, amount, currency, mana,
	CASE WHEN status <> 'fulfilled' THEN status WHEN disputed THEN 'disputed'
		WHEN refunded_amount >= amount THEN 'refunded' WHEN refunded_amount > 0 THEN 'partially_refunded'
		ELSE status END,
	coalesce(reason, ''), coalesce(wallet_transaction_id, 0), refunded_amount, clawed_back_mana,
	created_at, updated_at, fulfilled_at,
	coalesce(checkout_id, ''), coalesce(checkout_url, '')`

// Paid reports whether the order was fulfilled (whatever went back since).
func (o *Order) Paid() bool { return o.FulfilledAt != nil }

// CreateCheckout creates a pending order for p.SKU, snapshotting its price
// and Mana from skus.
func CreateCheckout(ctx context.Context, db DB, skus map[string]SKU, p CheckoutParams) (*Order, error) {
	sku, ok := skus[p.SKU]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownSKU, p.SKU)
	}
	if !provider.Known(p.Provider) {
		return nil, fmt.Errorf("%w %q", provider.ErrUnknown, p.Provider)
	}
	if p.Key != "" {
		return createKeyed(ctx, db, sku, p)
	}
	row := db.QueryRow(ctx, `INSERT INTO orders (player_id, sku, provider, amount, currency, mana)
		VALUES ($1, $2, $3, $4, lower($5), $6) RETURNING `+orderColumns,
		p.PlayerID, p.SKU, p.Provider, sku.Amount, sku.Currency, sku.Mana)
	o, err := scanOrder(row)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: create order: %w", err)
	}
	return o, nil
}

// createKeyed creates the order of (player, key) or returns the existing
// one. The unique index decides between concurrent callers; the loser
// reads the winner's row (visible once it committed: ON CONFLICT waits).
func createKeyed(ctx context.Context, db DB, sku SKU, p CheckoutParams) (*Order, error) {
	o, err := scanOrder(db.QueryRow(ctx, `INSERT INTO orders (player_id, sku, provider, amount, currency, mana, checkout_key)
		VALUES ($1, $2, $3, $4, lower($5), $6, $7)
		ON CONFLICT (player_id, checkout_key) WHERE checkout_key IS NOT NULL DO NOTHING RETURNING `+orderColumns,
		p.PlayerID, p.SKU, p.Provider, sku.Amount, sku.Currency, sku.Mana, p.Key))
	if errors.Is(err, pgx.ErrNoRows) {
		o, err = scanOrder(db.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders
			WHERE player_id = $1 AND checkout_key = $2`, p.PlayerID, p.Key))
	}
	if err != nil {
		return nil, fmt.Errorf("fulfillment: create order: %w", err)
	}
	if o.SKU != p.SKU || o.Provider != p.Provider {
		return nil, fmt.Errorf("%w: order %d", ErrCheckoutKeyReused, o.ID)
	}
	return o, nil
}

// SetCheckout stores the provider's checkout id and URL on a pending order
// that has none yet, and returns the order as stored: when another caller
// stored one first, that one is kept and returned, so an order never hands
// out two URLs.
func SetCheckout(ctx context.Context, db DB, orderID int64, checkoutID, checkoutURL string) (*Order, error) {
	_, err := db.Exec(ctx, `UPDATE orders SET checkout_id = $2, checkout_url = $3, updated_at = now()
		WHERE id = $1 AND checkout_id IS NULL`, orderID, checkoutID, checkoutURL)
	if err != nil {
		return nil, fmt.Errorf("fulfillment: store checkout of order %d: %w", orderID, err)
	}
	return OrderByID(ctx, db, orderID)
}

// OrderByID reads any player's order, for callers that stand in for the
// provider (the dev checkout page), which knows an order only by its id.
func OrderByID(ctx context.Context, db DB, orderID int64) (*Order, error) {
	o, err := scanOrder(db.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = $1`, orderID))
	if err != nil {
		return nil, notFound(err, orderID)
	}
	return o, nil
}

// GetOrder returns the player's order; ErrNotFound when it does not exist
// or belongs to another player (the two are indistinguishable on purpose).
func GetOrder(ctx context.Context, db DB, playerID, orderID int64) (*Order, error) {
	o, err := scanOrder(db.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = $1 AND player_id = $2`,
		orderID, playerID))
	if err != nil {
		return nil, notFound(err, orderID)
	}
	return o, nil
}

// lockOrder reads the order and holds its row lock until tx ends, so two
// fulfillments of one order serialize here.
func lockOrder(ctx context.Context, tx pgx.Tx, orderID int64) (*Order, error) {
	o, err := scanOrder(tx.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = $1 FOR UPDATE`, orderID))
	if err != nil {
		return nil, notFound(err, orderID)
	}
	return o, nil
}

func markFulfilled(ctx context.Context, tx pgx.Tx, orderID, walletTxID int64, now time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE orders SET status = 'fulfilled', wallet_transaction_id = $2,
		fulfilled_at = $3, updated_at = $3 WHERE id = $1`, orderID, walletTxID, now)
	if err != nil {
		return fmt.Errorf("fulfillment: mark order %d fulfilled: %w", orderID, err)
	}
	return nil
}

func markRejected(ctx context.Context, tx pgx.Tx, orderID int64, reason string, now time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE orders SET status = 'rejected', reason = $2, updated_at = $3 WHERE id = $1`,
		orderID, reason, now)
	if err != nil {
		return fmt.Errorf("fulfillment: mark order %d rejected: %w", orderID, err)
	}
	return nil
}

func scanOrder(row pgx.Row) (*Order, error) {
	var o Order
	err := row.Scan(&o.ID, &o.PlayerID, &o.SKU, &o.Provider, &o.Amount, &o.Currency, &o.Mana, &o.Status,
		&o.Reason, &o.WalletTransactionID, &o.RefundedAmount, &o.ClawedBackMana, &o.CreatedAt, &o.UpdatedAt, &o.FulfilledAt,
		&o.CheckoutID, &o.CheckoutURL)
	if err != nil {
		return nil, err
	}
	return &o, nil
}

func notFound(err error, orderID int64) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %d", ErrNotFound, orderID)
	}
	return fmt.Errorf("fulfillment: read order %d: %w", orderID, err)
}
