package fulfillment

import (
	"context"
	"strings"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/wallet"
)

// paymentChecks are invariants 7 to 9 of the design as queries whose only
// rows are violations (order or player id, detail):
//
//  7. one payment row per (provider, payment id) (the UNIQUE index); a
//     payment mints at most once, and only the order's one applied payment
//     mints: an unapplied payment has no mint;
//  8. per payment, Mana clawed back <= Mana minted, and the order shows
//     what its payment's clawbacks took;
//  9. each player's debt equals minus the player's entries on the
//     receivable account, and is never negative; Mana a reversal gives
//     back first recovered what a forgiveness wrote off of the debt its
//     payment's clawbacks opened (no more, no less).
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
	WHERE idempotency_key LIKE ` + wallet.SQLReversalPrefix("p.id") + ` || '%' AND kind = 'clawback' AND currency = 'mana') t
LEFT JOIN LATERAL (SELECT coalesce(sum(amount), 0) AS back FROM wallet_transactions
	WHERE idempotency_key LIKE ` + wallet.SQLReversalPrefix("p.id") + ` || '%' AND kind = 'clawback_reversal') b ON true
WHERE t.taken - b.back > p.mana_minted`},
	{9, "give_back_vs_forgiveness", giveBackVsForgivenessSQL},
	{9, "debt_vs_receivable", `
SELECT coalesce(d.player_id, r.player_id), format('debt %s, receivable entries sum to %s',
	coalesce(d.outstanding, 0), coalesce(r.total, 0))
FROM debts d
FULL JOIN (SELECT t.player_id, sum(e.amount) AS total FROM ledger_entries e
	JOIN wallet_transactions t ON t.id = e.transaction_id
	WHERE e.account = 'receivable' GROUP BY t.player_id) r ON r.player_id = d.player_id
WHERE coalesce(d.outstanding, 0) <> -coalesce(r.total, 0) OR d.outstanding < 0`},
}

// truthChecks are invariant 10, the provider's truth: for every payment,
// the Mana clawed back equals what its accepted facts imply, and no
// refused event changed an accepted fact. They recompute, from the events
// as the provider sent them, what the worker decides (which events count,
// each fact's fold, the clawback), in SQL written apart from the worker:
//
//   - every event naming a known payment is decided;
//   - an event is accepted exactly when it is well formed and in the
//     payment's currency (a refusal for an id another payment or kind
//     already holds is the one other reason allowed);
//   - each fact is the fold of its accepted events (largest amount,
//     furthest state open < lost < won), and no fact lacks them;
//   - each payment's clawed_back_mana is ceil(minted x min(paid, refunds +
//     open or lost disputes) / paid), capped at minted, each fact capped at
//     paid and everything summed in numeric (no int64 to wrap);
//   - one payment per provider object (Stripe's Checkout Session, Paddle's
//     transaction, Creem's checkout), read from the events' own payloads.
//   - each accepted event's kind and state are what its payload's status
//     means by its driver's table (see audit_states.go), and the facts and
//     clawbacks above are recomputed from those, not from what was stored.
//
// {{events}} stands for reversal_events as recomputed from the payloads,
// {{payment_object}} for the id of the provider object a stored payload j
// of provider p.provider names, where its driver's facts say it lies.
var truthChecks = []auditCheck{
	{10, "reversal_event_undecided", `
SELECT p.order_id, format('%s event %s (%s %s) names payment %s %s but is still pending', e.provider, e.event_id,
	e.kind, e.reversal_id, p.provider, p.payment_id)
FROM payments p JOIN payment_aliases a ON a.payment = p.id
JOIN reversal_events e ON e.provider = a.provider AND (e.payment_ref = a.alias OR e.other_ref = a.alias)
WHERE e.status = 'pending'`},
	{10, "reversal_event_wrongly_refused", `
SELECT p.order_id, format('%s event %s (%s %s of %s %s) was refused (%s), but it is the provider''s truth for payment %s',
	e.provider, e.event_id, e.kind, e.reversal_id, e.amount, e.currency, e.reason, p.payment_id)
FROM reversal_events e JOIN payments p ON p.id = e.payment
WHERE e.status = 'refused' AND ` + wellFormedEvent + ` AND lower(e.currency) = lower(p.currency)
	AND NOT EXISTS (SELECT 1 FROM reversal_events o WHERE o.provider = e.provider AND o.reversal_id = e.reversal_id
		AND o.status = 'accepted' AND (o.payment <> e.payment OR o.kind <> e.kind))`},
	{10, "reversal_event_wrongly_accepted", `
SELECT coalesce(p.order_id, 0), format('%s event %s (%s %s of %s %s) was accepted for payment %s in %s',
	e.provider, e.event_id, e.kind, e.reversal_id, e.amount, e.currency, coalesce(p.payment_id, 'none'), coalesce(p.currency, '-'))
FROM reversal_events e LEFT JOIN payments p ON p.id = e.payment
WHERE e.status = 'accepted' AND (p.id IS NULL OR NOT (` + wellFormedEvent + `) OR lower(e.currency) <> lower(p.currency))`},
	{10, "reversal_fact_vs_events", `
WITH folded AS (
	SELECT provider, reversal_id, min(payment) AS payment, min(kind) AS kind, max(amount) AS amount,
		(array['open', 'lost', 'won'])[max(array_position(array['open', 'lost', 'won'], state))] AS dispute_state,
		count(DISTINCT payment) AS payments
	FROM {{events}} e WHERE status = 'accepted' GROUP BY provider, reversal_id)
SELECT coalesce(p.order_id, 0), format('%s %s: fact %s, its accepted events fold to %s', coalesce(f.provider, r.provider),
	coalesce(f.reversal_id, r.reversal_id),
	coalesce(format('%s %s %s %s of payment %s', r.kind, r.state, r.amount, r.currency, r.payment), 'missing'),
	coalesce(format('%s %s %s of payment %s', f.kind, coalesce(f.dispute_state, 'succeeded'), f.amount, f.payment), 'nothing'))
FROM folded f
FULL JOIN payment_reversals r ON r.provider = f.provider AND r.reversal_id = f.reversal_id
LEFT JOIN payments p ON p.id = coalesce(f.payment, r.payment)
WHERE f.reversal_id IS NULL OR r.reversal_id IS NULL OR f.payments > 1 OR r.payment <> f.payment
	OR r.kind <> f.kind OR r.amount <> f.amount OR r.state <> coalesce(f.dispute_state, 'succeeded')
	OR lower(r.currency) <> lower(p.currency)`},
	{10, "clawback_vs_facts", `
WITH lost AS (
	SELECT f.payment, sum(least(f.amount, p.amount)) FILTER (WHERE kind = 'refund' OR state IN ('open', 'lost')) AS lost
	FROM (SELECT payment, reversal_id, min(kind) AS kind, max(amount)::numeric AS amount,
			(array['succeeded', 'open', 'lost', 'won'])[max(array_position(array['succeeded', 'open', 'lost', 'won'], state))] AS state
		FROM {{events}} e WHERE status = 'accepted' GROUP BY payment, reversal_id) f
	JOIN payments p ON p.id = f.payment
	GROUP BY f.payment),
target AS (
	SELECT p.*, least(p.amount, coalesce(l.lost, 0)) AS gone FROM payments p LEFT JOIN lost l ON l.payment = p.id)
SELECT order_id, format('payment %s %s clawed back %s Mana; its facts (%s of %s paid gone back) call for %s',
	provider, payment_id, clawed_back_mana, gone, amount, want)
FROM (SELECT t.*, CASE WHEN mana_minted = 0 OR gone <= 0 OR amount <= 0 THEN 0
		ELSE least(mana_minted, div(mana_minted::numeric * gone + amount - 1, amount)) END AS want FROM target t) x
WHERE clawed_back_mana <> want`},
	{10, "payments_per_provider_object", `
SELECT min(order_id), format('%s %s is one payment, recorded as %s: %s', provider, object, count(*),
	string_agg(payment_id, ', ' ORDER BY id))
FROM (SELECT p.id, p.order_id, p.provider, p.payment_id, {{payment_object}} AS object
	FROM payments p JOIN webhook_events w ON w.provider = p.provider AND w.event_id = p.event_id
	CROSS JOIN LATERAL (SELECT CASE WHEN jsonb_typeof(convert_from(w.payload, 'UTF8')::jsonb) = 'object'
		THEN convert_from(w.payload, 'UTF8')::jsonb END AS j) x) o
WHERE object IS NOT NULL GROUP BY provider, object HAVING count(*) > 1`},
}

// wellFormedEvent is the SQL of a reversal event a provider could send:
// a known kind and state, an amount, ids.
const wellFormedEvent = `((e.kind = 'refund' AND e.state = 'succeeded')
	OR (e.kind = 'dispute' AND e.state IN ('open', 'lost', 'won')))
	AND e.amount >= 0 AND e.reversal_id <> '' AND e.payment_ref <> ''`

// AuditPayments checks invariants 7 to 10 over the whole database and
// returns every violation (none when clean); OrderID holds the player id
// for invariant 9. facts are the drivers' (the registry's Facts): invariant
// 10 reads every stored payload through their documented statuses and
// finds each payment's provider object where they say it lies. Run it in
// a REPEATABLE READ transaction (pass the pgx.Tx) to see one snapshot
// while work runs.
func AuditPayments(ctx context.Context, db DB, facts ...provider.Facts) ([]Violation, error) {
	return runChecks(ctx, db, append(paymentChecks[:len(paymentChecks):len(paymentChecks)], truthChecksFor(facts)...))
}

// truthChecksFor are truthChecks reading reversal events and payment
// objects through the drivers' facts, and the check of each accepted
// event's state against its payload.
func truthChecksFor(facts []provider.Facts) []auditCheck {
	tables := make([]provider.StateTable, len(facts))
	for i, f := range facts {
		tables[i] = f.States
	}
	events := truthEventsSQL(tables)
	r := strings.NewReplacer("{{events}}", events, "{{payment_object}}", paymentObjectSQL(facts))
	out := make([]auditCheck, 0, len(truthChecks)+1)
	for _, c := range truthChecks {
		c.sql = r.Replace(c.sql)
		out = append(out, c)
	}
	return append(out, eventStateCheck(events))
}

// paymentObjectSQL is the CASE that reads, from a stored payload j of
// provider p.provider, the id of the provider object one payment is, at
// the JSON path its driver's facts give (NULL for a provider without one).
func paymentObjectSQL(facts []provider.Facts) string {
	var b strings.Builder
	b.WriteString("CASE p.provider")
	for _, f := range facts {
		if len(f.PaymentObject) > 0 {
			b.WriteString(" WHEN " + quote(f.Name) + " THEN j #>> " + quote("{"+strings.Join(f.PaymentObject, ",")+"}"))
		}
	}
	b.WriteString(" ELSE NULL END")
	return b.String()
}

// isRecoveryLeg is the SQL of a debt_write_off leg t that recovered a
// write-off out of Mana given back (<step key>:back:write_off).
var isRecoveryLeg = wallet.SQLIsRecovery("t.idempotency_key")

// giveBackVsForgivenessSQL recomputes, for every give-back of a payment
// (<step key>:back), what it had to recover as of just before it:
// min(given back, the debt its payment's clawbacks opened minus what its
// earlier give-backs recovered, Mana forgiven since that payment's first
// debt minus Mana recovered since), and reports any recovery that differs,
// whichever way.
var giveBackVsForgivenessSQL = `
WITH g AS (
	SELECT t.id, t.player_id, t.wallet_id, t.amount, t.idempotency_key AS key,
		` + wallet.SQLReversalPrefix("split_part(t.idempotency_key, ':', 2)") + ` AS prefix
	FROM wallet_transactions t
	WHERE t.kind = 'clawback_reversal' AND ` + wallet.SQLIsGivenBack("t.idempotency_key") + `)
SELECT g.player_id, format('%s gave back %s Mana and recovered %s of the debt forgiven since its payment''s clawbacks opened %s; it had to recover %s',
	g.key, g.amount, r.got, m.debt, w.want)
FROM g
CROSS JOIN LATERAL (SELECT coalesce(-sum(amount), 0) AS got FROM wallet_transactions
	WHERE idempotency_key = ` + wallet.SQLRecoveryKey("g.key") + ` AND kind = 'debt_write_off') r
CROSS JOIN LATERAL (SELECT min(t.id) FILTER (WHERE t.kind = 'debt') AS first,
		coalesce(sum(t.amount) FILTER (WHERE t.kind = 'debt'), 0) AS debt,
		coalesce(-sum(t.amount) FILTER (WHERE t.kind = 'debt_write_off' AND ` + isRecoveryLeg + `), 0) AS recovered
	FROM wallet_transactions t WHERE t.wallet_id = g.wallet_id AND t.id < g.id
		AND left(t.idempotency_key, length(g.prefix)) = g.prefix AND t.kind IN ('debt', 'debt_write_off')) m
CROSS JOIN LATERAL (SELECT coalesce(sum(t.amount) FILTER (WHERE t.amount > 0), 0)
		- coalesce(-sum(t.amount) FILTER (WHERE t.amount < 0 AND ` + isRecoveryLeg + `), 0) AS forgiven
	FROM wallet_transactions t WHERE t.wallet_id = g.wallet_id AND t.kind = 'debt_write_off'
		AND t.id > m.first AND t.id < g.id) f
CROSS JOIN LATERAL (SELECT CASE WHEN m.first IS NULL THEN 0
	ELSE greatest(0, least(g.amount, m.debt - m.recovered, f.forgiven)) END AS want) w
WHERE r.got <> w.want`
