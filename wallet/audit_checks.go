package wallet

import (
	"context"
	"fmt"
)

// wallets checks invariant 1 per wallet: the balance is not negative and
// equals both the sum of the wallet's entries and the balance_after of its
// latest entry; seq counts the entries.
func (a *auditor) wallets(ctx context.Context) error {
	const q = `
SELECT w.id, w.balance, w.seq, coalesce(e.total, 0)::text, e.n, coalesce(e.max_seq, 0), l.balance_after, e.bad_currency
FROM wallets w
CROSS JOIN LATERAL (
    SELECT sum(amount) AS total, count(*) AS n, max(seq) AS max_seq,
           count(*) FILTER (WHERE currency <> w.currency) AS bad_currency
    FROM ledger_entries WHERE wallet_id = w.id) e
LEFT JOIN LATERAL (
    SELECT balance_after FROM ledger_entries WHERE wallet_id = w.id ORDER BY seq DESC LIMIT 1) l ON true
WHERE w.id > $1 AND w.id <= $2 AND ($3::bigint IS NULL OR w.player_id = $3)
  AND (w.balance < 0 OR coalesce(e.total, 0) <> w.balance OR e.n <> w.seq OR coalesce(e.max_seq, 0) <> w.seq
       OR e.bad_currency > 0
       OR l.balance_after IS DISTINCT FROM CASE WHEN e.n = 0 THEN NULL ELSE w.balance END)`
	var id, balance, seq, n, maxSeq, badCurrency int64
	var total string
	var latest *int64
	dest := []any{&id, &balance, &seq, &total, &n, &maxSeq, &latest, &badCurrency}
	return a.chunks(ctx, "wallets", "wallets", a.opts.ChunkSize, func(lo, hi int64) error {
		return a.each(ctx, q, []any{lo, hi, a.player}, dest, func() error {
			v := Violation{Invariant: 1, WalletID: id}
			if balance < 0 {
				a.add(with(v, "negative_balance", "balance %d", balance))
			}
			if total != fmt.Sprint(balance) {
				a.add(with(v, "balance_vs_entries", "balance %d but its entries sum to %s", balance, total))
			}
			if (n == 0) != (latest == nil) || (latest != nil && *latest != balance) {
				a.add(with(v, "balance_vs_latest_entry", "balance %d but latest entry balance_after %s", balance, optInt(latest)))
			}
			if n != seq || maxSeq != seq {
				a.add(with(v, "seq", "seq %d but %d entries, highest seq %d", seq, n, maxSeq))
			}
			if badCurrency > 0 {
				a.add(with(v, "entry_currency", "%d entries in another currency", badCurrency))
			}
			return nil
		})
	})
}

// entries checks each wallet's history: entry k (by seq) has seq k and a
// balance_after equal to the running sum. Only the first broken entry of a
// wallet is reported (with how many follow), as one deleted entry breaks
// every later one.
func (a *auditor) entries(ctx context.Context) error {
	const q = `
SELECT DISTINCT ON (wallet_id) id, wallet_id, transaction_id, seq, rn, balance_after, running::text,
       count(*) OVER (PARTITION BY wallet_id)
FROM (
    SELECT e.id, e.wallet_id, e.transaction_id, e.seq, e.balance_after,
           sum(e.amount) OVER win AS running, row_number() OVER win AS rn
    FROM ledger_entries e
    WHERE e.wallet_id > $1 AND e.wallet_id <= $2
      AND ($3::bigint IS NULL OR e.wallet_id IN (SELECT id FROM wallets WHERE player_id = $3))
    WINDOW win AS (PARTITION BY e.wallet_id ORDER BY e.seq)
) x
WHERE running <> balance_after OR rn <> seq
ORDER BY wallet_id, seq`
	var id, walletID, txID, seq, rn, after, broken int64
	var running string
	dest := []any{&id, &walletID, &txID, &seq, &rn, &after, &running, &broken}
	return a.chunks(ctx, "entries", "wallets", a.opts.ChunkSize, func(lo, hi int64) error {
		return a.each(ctx, q, []any{lo, hi, a.player}, dest, func() error {
			a.add(Violation{Invariant: 1, Check: "entry_history", WalletID: walletID, TransactionID: txID, EntryID: id,
				Detail: fmt.Sprintf("entry #%d has seq %d and balance_after %d, running sum %s (%d broken entries in this wallet)",
					rn, seq, after, running, broken)})
			return nil
		})
	})
}

// transactions checks invariant 2 per transaction: exactly two entries
// summing to zero, one on the transaction's own wallet matching its amount
// and balance_after, all in its currency, and the wallet is the player's.
//
// Over the whole database it runs in two passes: a cheap one over large id
// ranges that aggregates each transaction's entries once (an ordered scan
// of ledger_entries (transaction_id) merge-joined to the primary key, no
// per-transaction index lookups) and returns only the ids that may break
// the invariant, then the exact check on those ids alone. A transaction the
// first pass lets through has two entries with amounts x and -x, exactly
// one wallet entry equal to its wallet, amount and balance_after, and every
// entry in its currency: the exact check would find nothing either.
func (a *auditor) transactions(ctx context.Context) error {
	if a.player != nil {
		return a.chunks(ctx, "transactions", "wallet_transactions", a.opts.ChunkSize, func(lo, hi int64) error {
			return a.transactionsExact(ctx, `t.id > $1 AND t.id <= $2 AND t.player_id = $3`, lo, hi, *a.player)
		})
	}
	const suspects = `
SELECT coalesce(array_agg(t.id ORDER BY t.id), '{}')
FROM wallet_transactions t
JOIN wallets w ON w.id = t.wallet_id
LEFT JOIN (
    SELECT transaction_id, count(*) AS n, min(amount) AS lo, max(amount) AS hi, count(wallet_id) AS wallet_n,
           min(wallet_id) AS wallet_id, min(amount) FILTER (WHERE wallet_id IS NOT NULL) AS wallet_amount,
           min(balance_after) AS balance_after, min(currency) AS c1, max(currency) AS c2
    FROM ledger_entries WHERE transaction_id > $1 AND transaction_id <= $2
    GROUP BY transaction_id) e ON e.transaction_id = t.id
WHERE t.id > $1 AND t.id <= $2
  AND (e.n IS DISTINCT FROM 2 OR e.lo <> -e.hi OR e.wallet_n <> 1 OR e.wallet_id <> t.wallet_id
       OR e.wallet_amount <> t.amount OR e.balance_after <> t.balance_after
       OR e.c1 <> t.currency OR e.c2 <> t.currency
       OR w.player_id <> t.player_id OR w.currency <> t.currency)`
	return a.chunks(ctx, "transactions", "wallet_transactions", a.opts.ChunkSize*transactionChunks, func(lo, hi int64) error {
		var ids []int64
		if err := a.tx.QueryRow(ctx, suspects, lo, hi).Scan(&ids); err != nil || len(ids) == 0 {
			return err
		}
		return a.transactionsExact(ctx, `t.id = ANY($1)`, ids)
	})
}

// transactionChunks is how many audit chunks one range of the transactions
// check's first pass covers: it reads ranges in order, so larger ranges
// only save round trips, and its output (suspect ids) is at most a range.
const transactionChunks = 40

// transactionsExact reports every broken transaction among those where
// selects, with its entries counted one by one.
func (a *auditor) transactionsExact(ctx context.Context, where string, args ...any) error {
	q := `
SELECT t.id, t.wallet_id, count(e.id), coalesce(sum(e.amount), 0)::text,
       count(e.id) FILTER (WHERE e.wallet_id IS NOT NULL),
       count(e.id) FILTER (WHERE e.wallet_id = t.wallet_id AND e.amount = t.amount AND e.balance_after = t.balance_after),
       count(e.id) FILTER (WHERE e.currency <> t.currency),
       bool_or(w.player_id <> t.player_id OR w.currency <> t.currency)
FROM wallet_transactions t
JOIN wallets w ON w.id = t.wallet_id
LEFT JOIN ledger_entries e ON e.transaction_id = t.id
WHERE ` + where + `
GROUP BY t.id
HAVING count(e.id) <> 2 OR coalesce(sum(e.amount), 0) <> 0
    OR count(e.id) FILTER (WHERE e.wallet_id IS NOT NULL) <> 1
    OR count(e.id) FILTER (WHERE e.wallet_id = t.wallet_id AND e.amount = t.amount AND e.balance_after = t.balance_after) <> 1
    OR count(e.id) FILTER (WHERE e.currency <> t.currency) > 0
    OR bool_or(w.player_id <> t.player_id OR w.currency <> t.currency)
ORDER BY t.id`
	var id, walletID, n, walletEntries, matching, badCurrency int64
	var sum string
	var foreign bool
	dest := []any{&id, &walletID, &n, &sum, &walletEntries, &matching, &badCurrency, &foreign}
	return a.each(ctx, q, args, dest, func() error {
		v := Violation{Invariant: 2, WalletID: walletID, TransactionID: id}
		if n != 2 || sum != "0" {
			a.add(with(v, "unbalanced_transaction", "%d entries summing to %s (want 2 summing to 0)", n, sum))
		}
		if walletEntries != 1 || matching != 1 {
			a.add(with(v, "wallet_entry", "%d wallet entries, %d matching the transaction's wallet, amount and balance_after", walletEntries, matching))
		}
		if badCurrency > 0 {
			a.add(with(v, "entry_currency", "%d entries in another currency", badCurrency))
		}
		if foreign {
			a.add(with(v, "wallet_owner", "the wallet belongs to another player or currency"))
		}
		return nil
	})
}

// keys checks invariant 3: one transaction per idempotency key, and the two
// legs of every conversion exist together, each in its own direction.
func (a *auditor) keys(ctx context.Context) error {
	var key string
	var ids []int64
	// Over the whole database, find the duplicate keys first with an
	// index-only scan of the key's unique index (when it exists), then read
	// only their transactions, instead of grouping every row's key and id.
	q, args := `
SELECT d.idempotency_key, array_agg(t.id ORDER BY t.id)
FROM (SELECT idempotency_key FROM wallet_transactions GROUP BY idempotency_key HAVING count(*) > 1) d
JOIN wallet_transactions t ON t.idempotency_key = d.idempotency_key
GROUP BY d.idempotency_key`, []any(nil)
	if a.player != nil {
		q, args = `
SELECT idempotency_key, array_agg(id ORDER BY id) FROM wallet_transactions
WHERE player_id = $1 GROUP BY idempotency_key HAVING count(*) > 1`, []any{*a.player}
	}
	err := a.each(ctx, q, args, []any{&key, &ids}, func() error {
		a.add(Violation{Invariant: 3, Check: "duplicate_key", TransactionID: ids[0],
			Detail: fmt.Sprintf("key %q has transactions %v", key, ids)})
		return nil
	})
	if err != nil {
		return err
	}
	var id int64
	var problem string
	return a.each(ctx, `
SELECT id, idempotency_key, problem FROM (
    SELECT t.id, t.idempotency_key, CASE
        WHEN right(t.idempotency_key, 11) = ':mana_debit' AND (t.currency <> 'mana' OR t.amount > 0) THEN 'mana leg is not a Mana debit'
        WHEN right(t.idempotency_key, 14) = ':sparks_credit' AND (t.currency <> 'sparks' OR t.amount < 0) THEN 'sparks leg is not a Sparks credit'
        WHEN right(t.idempotency_key, 11) = ':mana_debit' AND NOT EXISTS (
            SELECT 1 FROM wallet_transactions o WHERE o.player_id = t.player_id AND o.kind = 'conversion'
              AND o.idempotency_key = left(t.idempotency_key, -11) || ':sparks_credit') THEN 'no sparks leg'
        WHEN right(t.idempotency_key, 14) = ':sparks_credit' AND NOT EXISTS (
            SELECT 1 FROM wallet_transactions o WHERE o.player_id = t.player_id AND o.kind = 'conversion'
              AND o.idempotency_key = left(t.idempotency_key, -14) || ':mana_debit') THEN 'no mana leg'
        WHEN right(t.idempotency_key, 11) <> ':mana_debit' AND right(t.idempotency_key, 14) <> ':sparks_credit'
            THEN 'key is not a conversion leg key'
        END AS problem
    FROM wallet_transactions t
    WHERE t.kind = 'conversion' AND ($1::bigint IS NULL OR t.player_id = $1)
) x WHERE problem IS NOT NULL`, []any{a.player}, []any{&id, &key, &problem}, func() error {
		a.add(Violation{Invariant: 3, Check: "conversion_legs", TransactionID: id, Detail: fmt.Sprintf("key %q: %s", key, problem)})
		return nil
	})
}

// currencies checks the second half of invariant 2: per currency, all
// entries sum to zero. Only meaningful over the whole database.
func (a *auditor) currencies(ctx context.Context) error {
	if a.player != nil {
		return nil
	}
	var currency, sum string
	return a.each(ctx, `SELECT currency, sum(amount)::text FROM ledger_entries GROUP BY currency HAVING sum(amount) <> 0`,
		nil, []any{&currency, &sum}, func() error {
			a.add(Violation{Invariant: 2, Check: "currency_total", Detail: fmt.Sprintf("%s entries sum to %s", currency, sum)})
			return nil
		})
}

func with(v Violation, check, format string, args ...any) Violation {
	v.Check, v.Detail = check, fmt.Sprintf(format, args...)
	return v
}

func optInt(p *int64) string {
	if p == nil {
		return "(none)"
	}
	return fmt.Sprint(*p)
}
