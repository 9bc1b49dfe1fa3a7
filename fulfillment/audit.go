package fulfillment

import (
	"context"
	"fmt"

	"github.com/fibe-dev/billing/wallet"
)

// Violation is one broken fulfillment invariant.
type Violation struct {
	Invariant int    `json:"invariant"` // 5, as numbered in docs/contract.md
	Check     string `json:"check"`
	OrderID   int64  `json:"order_id,omitempty"`
	Detail    string `json:"detail"`
}

func (v Violation) String() string {
	id := "order"
	if v.Invariant == 9 { // debts are per player: OrderID holds the player id
		id = "player"
	}
	return fmt.Sprintf("invariant %d %s %s=%d: %s", v.Invariant, v.Check, id, v.OrderID, v.Detail)
}

// auditChecks are invariant 5 of docs/contract.md ("at most one fulfillment credit
// per order; only for a paid amount and currency that match the order's
// snapshot") as queries whose only rows are violations. At most one credit
// per order is also the wallet's UNIQUE key; these check the rest.
var auditChecks = []auditCheck{
	{5, "fulfilled_without_its_credit", `
SELECT o.id, format('status fulfilled, wallet transaction %s, key %s holds %s',
	coalesce(o.wallet_transaction_id::text, 'none'), ` + wallet.SQLFulfilmentKey("o.id") + `,
	coalesce(t.amount::text || ' ' || t.currency || ' for player ' || t.player_id, 'nothing'))
FROM orders o
LEFT JOIN wallet_transactions t ON t.idempotency_key = ` + wallet.SQLFulfilmentKey("o.id") + `
WHERE o.status = 'fulfilled' AND (t.id IS NULL OR t.id IS DISTINCT FROM o.wallet_transaction_id
	OR t.amount <> o.mana OR t.currency <> 'mana' OR t.player_id <> o.player_id)`},
	{5, "credit_without_fulfilled_order", `
SELECT coalesce(o.id, 0), format('wallet transaction %s under key %s, order status %s',
	t.id, t.idempotency_key, coalesce(o.status, 'missing'))
FROM wallet_transactions t
LEFT JOIN orders o ON t.idempotency_key = ` + wallet.SQLFulfilmentKey("o.id") + `
WHERE ` + wallet.SQLIsFulfilmentKey("t.idempotency_key") + ` AND (o.id IS NULL OR o.status <> 'fulfilled')`},
	{5, "purchase_outside_an_order", `
SELECT 0, format('wallet transaction %s of kind purchase under key %s', t.id, t.idempotency_key)
FROM wallet_transactions t
WHERE t.kind = 'purchase' AND NOT ` + wallet.SQLIsFulfilmentKey("t.idempotency_key")},
	{5, "fulfilled_without_matching_payment", `
SELECT o.id, format('no claimed event paid %s %s for it', o.amount, o.currency)
FROM orders o
WHERE o.status = 'fulfilled' AND NOT EXISTS (SELECT 1 FROM webhook_events e
	WHERE e.order_id = o.id AND e.paid_amount = o.amount AND lower(e.paid_currency) = o.currency)`},
}

// Audit checks invariant 5 over the whole database and returns every
// violation (none when clean). Run it in a REPEATABLE READ transaction
// (pass the pgx.Tx) to see one snapshot while fulfillments run.
func Audit(ctx context.Context, db DB) ([]Violation, error) {
	return runChecks(ctx, db, auditChecks)
}

// auditCheck is one invariant check: a query whose only rows are
// violations, (order or player id, detail).
type auditCheck struct {
	invariant int
	name, sql string
}

// runChecks runs checks in order and returns every violation they found.
func runChecks(ctx context.Context, db DB, checks []auditCheck) ([]Violation, error) {
	var out []Violation
	for _, c := range checks {
		rows, err := db.Query(ctx, c.sql)
		if err != nil {
			return nil, fmt.Errorf("fulfillment: audit %s: %w", c.name, err)
		}
		for rows.Next() {
			v := Violation{Invariant: c.invariant, Check: c.name}
			if err := rows.Scan(&v.OrderID, &v.Detail); err != nil {
				rows.Close()
				return nil, fmt.Errorf("fulfillment: audit %s: %w", c.name, err)
			}
			out = append(out, v)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("fulfillment: audit %s: %w", c.name, err)
		}
	}
	return out, nil
}

// AuditCheckNames lists every check Audit and AuditPayments run, by name,
// in order: what a test must show each of them finding.
func AuditCheckNames() []string {
	var names []string
	for _, checks := range [][]auditCheck{auditChecks, paymentChecks, truthChecksFor(nil)} {
		for _, c := range checks {
			names = append(names, c.name)
		}
	}
	return names
}
