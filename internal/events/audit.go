package events

import (
	"context"
	"fmt"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/wallet"
)

// Invariant is the number of the events' invariant in the audit: every
// effect the catalogue reports, committed since events began, has its
// event under the id derived from the effect's key, and every event of
// those effects has its effect.
const Invariant = 12

// Violation is one effect without its event, or one event without its
// effect.
type Violation struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("invariant %d %s: %s", Invariant, v.Check, v.Detail)
}

// idSQL is ID in SQL, of type typ and key column key.
func idSQL(typ, key string) string {
	return `'evt_' || left(encode(sha256(convert_to('` + typ + `' || E'\n' || ` + key + `, 'UTF8')), 'hex'), 32)`
}

// auditChecks are queries whose only rows are violations. Effects older
// than events_epoch (committed before this migration) have no event.
var auditChecks = []struct{ name, sql string }{
	{"fulfilment_without_event", `
SELECT format('wallet transaction %s (key %s) has no order.fulfilled event %s', t.id, t.idempotency_key, ` + idSQL(OrderFulfilled, "t.idempotency_key") + `)
FROM wallet_transactions t, events_epoch ep
WHERE ` + wallet.SQLIsFulfilmentKey("t.idempotency_key") + ` AND t.created_at >= ep.started
	AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = ` + idSQL(OrderFulfilled, "t.idempotency_key") + `)`},
	// The funding debits of existing Marquees, as invariant 4 reads them
	// (a debit under a funding key with no Marquee is not a funding).
	{"funding_without_event", `
SELECT format('wallet transaction %s (key %s) has no marquee.funded event', t.id, t.idempotency_key)
FROM wallet_transactions t
JOIN marquees m ON m.id = CASE WHEN split_part(t.idempotency_key, ':', 2) ~ '^[0-9]{1,18}$'
	THEN split_part(t.idempotency_key, ':', 2)::bigint END
CROSS JOIN events_epoch ep
WHERE t.kind = 'funding' AND t.idempotency_key LIKE ` + wallet.SQLFundingKey("'%'", "'%'") + ` AND t.created_at >= ep.started
	AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = ` + idSQL(MarqueeFunded, "t.idempotency_key") + `)`},
	{"unapplied_without_event", `
SELECT format('payment %s (%s %s) was recorded unapplied and has no payment.unapplied event', p.id, p.provider, p.payment_id)
FROM payments p, events_epoch ep
WHERE p.status IN ('unapplied', 'refunded') AND p.created_at >= ep.started
	AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = ` + idSQL(PaymentUnapplied, sqlUnappliedKey("p.id")) + `)`},
	// Every crossing a player's low_balance_state counts has its event,
	// and the row's low agrees with its count (odd while low).
	{"crossing_without_event", `
SELECT format('player %s crossing %s of the low-balance threshold has no %s event', s.player_id, k,
	CASE WHEN k % 2 = 1 THEN '` + WalletLowBalance + `' ELSE '` + WalletBalanceRecovered + `' END)
FROM low_balance_state s CROSS JOIN generate_series(1, s.crossings) k
WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = ` + sqlCrossingID("s.player_id", "k") + `)
UNION ALL
SELECT format('player %s low_balance_state says low=%s after %s crossings', player_id, low, crossings)
FROM low_balance_state WHERE low <> (crossings % 2 = 1)`},
	// No more balance events than crossings: each is written with the
	// crossing it reports.
	{"balance_event_without_crossing", `
SELECT format('player %s has %s %s events for %s crossings', e.player_id, e.n, e.type, coalesce(s.crossings, 0))
FROM (SELECT player_id, type, count(*) AS n FROM events
	WHERE type IN ('` + WalletLowBalance + `', '` + WalletBalanceRecovered + `') GROUP BY player_id, type) e
LEFT JOIN low_balance_state s USING (player_id)
WHERE e.n > CASE WHEN e.type = '` + WalletLowBalance + `' THEN (coalesce(s.crossings, 0) + 1) / 2
	ELSE coalesce(s.crossings, 0) / 2 END`},
	{"refund_without_event", `
SELECT format('payment %s (%s %s) was recorded refunded and has no payment.refunded event', p.id, p.provider, p.payment_id)
FROM payments p, events_epoch ep
WHERE p.status = 'refunded' AND p.created_at >= ep.started
	AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = ` + idSQL(PaymentRefunded, sqlRefundedKey("p.id")) + `)`},
	// Decisions against a known payment; a refund or dispute of a payment
	// never known is refused with no player to report it to.
	{"reversal_without_event", `
SELECT format('%s event %s was %s against payment %s and has no reversal.%s event', r.provider, r.event_id, r.status, r.payment,
	CASE r.status WHEN 'accepted' THEN 'applied' ELSE 'refused' END)
FROM reversal_events r, events_epoch ep
WHERE r.status IN ('accepted', 'refused') AND r.payment IS NOT NULL AND r.decided_at >= ep.started
	AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = CASE r.status
		WHEN 'accepted' THEN ` + idSQL(ReversalApplied, sqlReversalEventKey("r.provider", "r.event_id")) + `
		ELSE ` + idSQL(ReversalRefused, sqlReversalEventKey("r.provider", "r.event_id")) + ` END)`},
	{"debt_opened_without_event", `
SELECT format('wallet transaction %s (key %s) opened a debt and has no debt.opened event', t.id, t.idempotency_key)
FROM wallet_transactions t, events_epoch ep
WHERE t.kind = '` + string(wallet.KindDebt) + `' AND ` + wallet.SQLIsReversalKey("t.idempotency_key") + ` AND t.created_at >= ep.started
	AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = ` + idSQL(DebtOpened, sqlDebtOpenedKey(wallet.SQLReversalStep("t.idempotency_key"))) + `)`},
	// Settlements out of a fulfilment's credit: the ones the payment path
	// reports (an operator's adjustment settles without an event).
	{"debt_settled_without_event", `
SELECT format('wallet transaction %s (key %s) settled a debt out of fulfilment %s and has no debt.settled event', s.id, s.idempotency_key, f.id)
FROM wallet_transactions f
JOIN wallet_transactions s ON s.idempotency_key = ` + wallet.SQLSettlementKey("f.idempotency_key") + `
CROSS JOIN events_epoch ep
WHERE ` + wallet.SQLIsFulfilmentKey("f.idempotency_key") + ` AND f.created_at >= ep.started
	AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = ` + idSQL(DebtSettled, sqlDebtSettledKey("f.idempotency_key")) + `)`},
	{"forgiveness_without_event", `
SELECT format('forgiveness %s of player %s wrote %s Mana off and has no debt.forgiven event', f.key, f.player_id, f.mana)
FROM debt_forgiveness f, events_epoch ep
WHERE f.mana > 0 AND f.created_at >= ep.started
	AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = ` + idSQL(DebtForgiven, "f.key") + `)`},
	{"event_without_effect", `
SELECT format('debt.forgiven event %s names no forgiveness that wrote Mana off', e.id)
FROM events e
WHERE e.type = 'debt.forgiven' AND NOT EXISTS (SELECT 1 FROM debt_forgiveness f
	WHERE f.mana > 0 AND e.id = ` + idSQL(DebtForgiven, "f.key") + `)`},
	{"event_without_effect", `
SELECT format('%s event %s names wallet transaction %s, which does not exist', e.type, e.id, e.payload->'data'->>'wallet_transaction_id')
FROM events e
WHERE e.type = 'order.fulfilled' AND NOT EXISTS (SELECT 1 FROM wallet_transactions t
	WHERE t.id = (e.payload->'data'->>'wallet_transaction_id')::bigint AND ` + wallet.SQLIsFulfilmentKey("t.idempotency_key") + `
	AND e.id = ` + idSQL(OrderFulfilled, "t.idempotency_key") + `)`},
}

// Audit checks the events' invariant over the whole database and returns
// every violation (none when clean). Run it in a REPEATABLE READ
// transaction to see one snapshot.
func Audit(ctx context.Context, db dbtx.DB) ([]Violation, error) {
	var out []Violation
	for _, c := range auditChecks {
		rows, err := db.Query(ctx, c.sql)
		if err != nil {
			return nil, fmt.Errorf("events: audit %s: %w", c.name, err)
		}
		for rows.Next() {
			v := Violation{Check: c.name}
			if err := rows.Scan(&v.Detail); err != nil {
				rows.Close()
				return nil, fmt.Errorf("events: audit %s: %w", c.name, err)
			}
			out = append(out, v)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("events: audit %s: %w", c.name, err)
		}
	}
	return out, nil
}
