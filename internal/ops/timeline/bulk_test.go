package timeline_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// bulkSQL gives every table a timeline reads n rows of other players'
// histories (orders paid, their events, jobs, payments with an alias, a
// refund each, clawback and debt legs, forgiveness, replay-cache keys, API keys),
// then analyzes them, so that the planner weighs a lookup against a
// table too large to read whole, as in production. The rows are shaped
// like the real ones; they are not a consistent ledger (no audit runs on
// them).
var bulkSQL = []string{
	`INSERT INTO players (name) SELECT 'bulk-' || i FROM generate_series(1, $1::int / 10) i`,
	`INSERT INTO wallets (player_id, currency, balance, seq) SELECT id, 'mana', 0, 0 FROM players WHERE name LIKE 'bulk-%'`,
	`INSERT INTO orders (player_id, sku, provider, amount, currency, mana, status, checkout_id, checkout_url, checkout_key,
		wallet_transaction_id, fulfilled_at)
	SELECT p.id, 'mana_1000', 'stripe', 999, 'usd', 1000, 'fulfilled', 'cs_bulk_' || p.id || '_' || k, 'https://x/', 'key-' || k, 1, now()
	FROM players p CROSS JOIN generate_series(1, 10) k WHERE p.name LIKE 'bulk-%'`,
	`INSERT INTO idempotency_keys (player_id, key, fingerprint, status, response_status, created_at)
	SELECT player_id, checkout_key, '\x00', 'completed', 201, now() FROM orders WHERE checkout_key LIKE 'key-%'`,
	`INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount, paid_currency, payload)
	SELECT 'stripe', 'evt_bulk_' || id, 'checkout.session.completed', id, 999, 'usd', '{}' FROM orders WHERE checkout_id LIKE 'cs_bulk_%'`,
	`INSERT INTO payments (provider, payment_id, order_id, player_id, event_id, amount, currency, mana_minted, status, clawed_back_mana,
		reversal_steps, refund_id)
	SELECT 'stripe', checkout_id, id, player_id, 'evt_bulk_' || id, 999, 'usd', 1000, 'applied', 1000, 1, NULL
	FROM orders WHERE checkout_id LIKE 'cs_bulk_%'`,
	`INSERT INTO payment_aliases (provider, alias, payment)
	SELECT 'stripe', payment_id, id FROM payments WHERE payment_id LIKE 'cs_bulk_%'
	UNION ALL SELECT 'stripe', 'pi_bulk_' || id, id FROM payments WHERE payment_id LIKE 'cs_bulk_%'`,
	`INSERT INTO reversal_events (provider, event_id, reversal_id, payment_ref, other_ref, kind, state, amount, currency, status, payment,
		decided_at)
	SELECT 'stripe', 'evt_bulk_refund_' || id, 'charge:ch_bulk_' || id, 'pi_bulk_' || id, 'ch_bulk_' || id, 'refund', 'succeeded',
		999, 'usd', 'accepted', id, now() FROM payments WHERE payment_id LIKE 'cs_bulk_%'`,
	`INSERT INTO payment_reversals (provider, reversal_id, payment_id, payment, kind, state, amount, currency)
	SELECT 'stripe', 'charge:ch_bulk_' || id, payment_id, id, 'refund', 'succeeded', 999, 'usd' FROM payments
	WHERE payment_id LIKE 'cs_bulk_%'`,
	`INSERT INTO river_job (args, kind, max_attempts, state, queue, priority, scheduled_at, finalized_at)
	SELECT jsonb_build_object('order_id', order_id, 'event_id', event_id, 'provider', 'stripe', 'payment_id', payment_id),
		'fulfill_order', 25, 'completed'::river_job_state, 'fulfillment', 1, now(), now() FROM payments WHERE payment_id LIKE 'cs_bulk_%'
	UNION ALL
	SELECT jsonb_build_object('event_id', 'evt_bulk_refund_' || id, 'provider', 'stripe', 'payment_id', 'pi_bulk_' || id,
		'reversal_id', 'charge:ch_bulk_' || id, 'kind', 'refund', 'state', 'succeeded', 'amount', 999, 'currency', 'usd'),
		'reverse_payment', 25, 'completed'::river_job_state, 'fulfillment', 1, now(), now() FROM payments WHERE payment_id LIKE 'cs_bulk_%'`,
	`INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
	SELECT w.id, o.player_id, 'mana', x.amount, x.kind, 'bulk', x.key, 0
	FROM orders o JOIN wallets w ON w.player_id = o.player_id AND w.currency = 'mana' JOIN payments p ON p.order_id = o.id
	CROSS JOIN LATERAL (VALUES (1000, 'purchase', 'order:' || o.id || ':fulfilment'),
		(-1000, 'clawback', 'payment:' || p.id || ':1:charge:ch_bulk_' || p.id || ':mana'),
		(10, 'debt', 'payment:' || p.id || ':1:charge:ch_bulk_' || p.id || ':debt')) AS x(amount, kind, key)
	WHERE o.checkout_id LIKE 'cs_bulk_%'`,
	`INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
	SELECT id, 'wallet', wallet_id, currency, amount, 0, id FROM wallet_transactions WHERE reference = 'bulk'
	UNION ALL SELECT id, 'adjustments', NULL, currency, -amount, NULL, NULL FROM wallet_transactions WHERE reference = 'bulk'`,
	`INSERT INTO debts (player_id, outstanding) SELECT id, CASE WHEN id % 50 = 0 THEN 5 ELSE 0 END FROM players WHERE name LIKE 'bulk-%'`,
	`INSERT INTO debt_forgiveness (key, player_id, mana, reason) SELECT 'bulk-' || id, id, 0, 'bulk' FROM players WHERE name LIKE 'bulk-%'`,
	`INSERT INTO api_keys (player_id, key_hash, hint)
	SELECT id, sha256(convert_to('bulk-' || id || '-' || k, 'UTF8')), 'bulk' FROM players CROSS JOIN generate_series(1, 2) k
	WHERE name LIKE 'bulk-%'`,
	`ANALYZE`,
}

// bulk adds n orders' worth of other players' rows (see bulkSQL).
func bulk(t *testing.T, e *env, n int) {
	t.Helper()
	ctx := context.Background()
	for _, sql := range bulkSQL {
		var args []any
		if strings.Contains(sql, "$1") {
			args = []any{n}
		}
		_, err := e.pool.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
}
