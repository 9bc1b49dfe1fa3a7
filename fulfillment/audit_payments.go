package fulfillment

import "context"

// paymentChecks are invariants 7 to 9 of the design as queries whose only
// rows are violations (order or player id, detail):
//
//  7. one payment row per (provider, payment id) (the UNIQUE index); a
//     payment mints at most once, and only the order's one applied payment
//     mints: an unapplied payment has no mint;
//  8. per payment, Mana clawed back <= Mana minted, and the order shows
//     what its payment's clawbacks took;
//  9. each player's debt equals minus the player's entries on the
//     receivable account, and is never negative.
var paymentChecks = []auditCheck{
	{7, "applied_payments_per_order", `
SELECT order_id, format('%s applied payments: %s', count(*), string_agg(provider || ' ' || payment_id, ', '))
FROM payments WHERE status = 'applied' GROUP BY order_id HAVING count(*) > 1`},
	{7, "applied_payment_vs_order", `
SELECT o.id, format('payment %s %s minted %s, order status %s mana %s', p.provider, p.payment_id, p.mana_minted, o.status, o.mana)
FROM payments p JOIN orders o ON o.id = p.order_id
WHERE p.status = 'applied' AND (o.status <> 'fulfilled' OR p.mana_minted <> o.mana OR p.player_id <> o.player_id)`},
	{7, "unapplied_payment_minted", `
SELECT o.id, format('order fulfilled by its credit but none of its %s payments is applied', count(*))
FROM orders o JOIN payments p ON p.order_id = o.id
WHERE o.status = 'fulfilled' GROUP BY o.id HAVING count(*) FILTER (WHERE p.status = 'applied') = 0`},
	{7, "unapplied_payment_with_mana", `
SELECT order_id, format('%s payment %s %s minted %s', status, provider, payment_id, mana_minted)
FROM payments WHERE status <> 'applied' AND mana_minted <> 0`},
	{8, "clawed_back_over_minted", `
SELECT order_id, format('payment %s %s clawed back %s of %s minted', provider, payment_id, clawed_back_mana, mana_minted)
FROM payments WHERE clawed_back_mana > mana_minted OR clawed_back_mana < 0`},
	{8, "order_clawback_vs_payment", `
SELECT o.id, format('order shows %s Mana clawed back, its payment %s', o.clawed_back_mana, p.clawed_back_mana)
FROM orders o JOIN payments p ON p.order_id = o.id AND p.status = 'applied'
WHERE o.clawed_back_mana <> p.clawed_back_mana`},
	{8, "clawback_mana_over_minted", `
SELECT p.order_id, format('payment %s %s: clawback Mana debits sum to %s, minted %s', p.provider, p.payment_id, t.taken, p.mana_minted)
FROM payments p
CROSS JOIN LATERAL (SELECT coalesce(-sum(amount), 0) AS taken FROM wallet_transactions
	WHERE idempotency_key LIKE 'payment:' || p.id || ':%' AND kind = 'clawback' AND currency = 'mana') t
LEFT JOIN LATERAL (SELECT coalesce(sum(amount), 0) AS back FROM wallet_transactions
	WHERE idempotency_key LIKE 'payment:' || p.id || ':%' AND kind = 'clawback_reversal') b ON true
WHERE t.taken - b.back > p.mana_minted`},
	{9, "debt_vs_receivable", `
SELECT coalesce(d.player_id, r.player_id), format('debt %s, receivable entries sum to %s',
	coalesce(d.outstanding, 0), coalesce(r.total, 0))
FROM debts d
FULL JOIN (SELECT t.player_id, sum(e.amount) AS total FROM ledger_entries e
	JOIN wallet_transactions t ON t.id = e.transaction_id
	WHERE e.account = 'receivable' GROUP BY t.player_id) r ON r.player_id = d.player_id
WHERE coalesce(d.outstanding, 0) <> -coalesce(r.total, 0) OR d.outstanding < 0`},
}

// AuditPayments checks invariants 7 to 9 over the whole database and
// returns every violation (none when clean); OrderID holds the player id
// for invariant 9. Run it in a REPEATABLE READ transaction (pass the
// pgx.Tx) to see one snapshot while work runs.
func AuditPayments(ctx context.Context, db DB) ([]Violation, error) {
	return runChecks(ctx, db, paymentChecks)
}
