package wallet

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// debitSetSQL applies a batch of debits in one statement, set-based: the
// batch's wallets are locked in (player, currency) order, each debit's
// balance_after is the wallet's balance plus the running sum of its debits
// in batch order, and each wallet is updated once. Debits only lower a
// balance, so the debits that keep balance_after >= 0 are exactly a prefix
// of each wallet's debits: the ones a post-at-a-time run would accept
// before its first refusal. The statement applies that prefix and returns
// its transactions; the rest of a wallet's debits, and the debits of a
// wallet that does not exist, are not applied and are left to the
// post-at-a-time path, which sees the new balance. Ledger entries and seq
// are exactly those of debitSQL, post after post. Transaction ids are
// drawn from the table's identity sequence in batch order before the
// insert, so the entries need no join back to the inserted rows.
//
// $1 players, $2 currencies, $3 negative amounts, $4 kinds, $5 references,
// $6 keys, $7 system accounts: arrays of one length, in lock order.
const debitSetSQL = `WITH v AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[])
        WITH ORDINALITY AS v(player_id, currency, amount, kind, reference, key, account, ord)),
l AS (
    SELECT w.id, w.player_id, w.currency, w.balance, w.seq FROM wallets w
    WHERE (w.player_id, w.currency) IN (SELECT player_id, currency FROM v)
    ORDER BY w.player_id, w.currency
    FOR UPDATE),
r AS (
    SELECT v.*, l.id AS wallet_id,
        l.balance + sum(v.amount) OVER run AS balance_after,
        l.seq + row_number() OVER run AS seq
    FROM v JOIN l ON l.player_id = v.player_id AND l.currency = v.currency
    WINDOW run AS (PARTITION BY l.id ORDER BY v.ord)),
ok AS (
    SELECT nextval('wallet_transactions_id_seq') AS txid, r.* FROM r WHERE balance_after >= 0 ORDER BY ord),
w AS (
    UPDATE wallets SET balance = last.balance_after, seq = last.seq
    FROM (SELECT DISTINCT ON (wallet_id) wallet_id, balance_after, seq FROM ok ORDER BY wallet_id, ord DESC) last
    WHERE wallets.id = last.wallet_id),
t AS (
    INSERT INTO wallet_transactions (id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    OVERRIDING SYSTEM VALUE
    SELECT txid, wallet_id, player_id, currency, amount, kind, reference, key, balance_after FROM ok
    RETURNING ` + txColumns + `),
e AS (
    INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
    SELECT txid, 'wallet', wallet_id, currency, amount, balance_after, seq FROM ok
    UNION ALL
    SELECT txid, account, NULL, currency, -amount, NULL, NULL FROM ok)
SELECT ` + txColumns + ` FROM t`

// setSavepoint guards applyDebitSet's statement.
const setSavepoint = "wallet_set"

// allDebits reports whether every pending post is a debit, the only shape
// debitSetSQL applies.
func allDebits(legs []leg, pending []int) bool {
	for _, i := range pending {
		if legs[i].delta >= 0 {
			return false
		}
	}
	return len(pending) > 1
}

// applyDebitSet applies the pending debits' accepted prefixes in one
// statement under a savepoint and returns the posts it did not apply (in
// lock order), for the post-at-a-time path. If the statement fails (a
// concurrent winner of a key: a unique violation), its savepoint is rolled
// back, nothing of it stays, and every pending post is returned.
func applyDebitSet(ctx context.Context, tx pgx.Tx, legs []leg, pending []int, out []*Transaction) (rest []int, err error) {
	n := len(pending)
	players, amounts := make([]int64, n), make([]int64, n)
	currencies, kinds, refs, keys, accounts := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for j, i := range pending {
		l := legs[i]
		players[j], currencies[j], amounts[j], kinds[j] = l.playerID, string(l.currency), l.delta, string(l.kind)
		refs[j], keys[j], accounts[j] = l.reference, l.key, l.account
	}
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + setSavepoint)
	b.Queue(debitSetSQL, players, currencies, amounts, kinds, refs, keys, accounts)
	b.Queue("RELEASE SAVEPOINT " + setSavepoint)
	br := tx.SendBatch(ctx, b)
	applied, failed := readDebitSet(br, keys)
	if cerr := br.Close(); failed == nil && cerr != nil {
		failed = cerr
	}
	if failed != nil {
		debitSetsTotal.WithLabelValues("fallback").Inc()
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+setSavepoint+"; RELEASE SAVEPOINT "+setSavepoint); err != nil {
			return nil, fmt.Errorf("wallet: roll back debit set after %w: %w", failed, err)
		}
		return pending, nil
	}
	debitSetsTotal.WithLabelValues("applied").Inc()
	for j, i := range pending {
		if t := applied[j]; t != nil {
			out[i] = t
		} else {
			rest = append(rest, i)
		}
	}
	return rest, nil
}

// readDebitSet reads the SAVEPOINT, the applied debits by position in
// keys (nil where not applied) and the RELEASE.
func readDebitSet(br pgx.BatchResults, keys []string) ([]*Transaction, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	pos := make(map[string]int, len(keys))
	for j, k := range keys {
		pos[k] = j
	}
	applied := make([]*Transaction, len(keys))
	for rows.Next() {
		t, err := scanTx(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		j, ok := pos[t.IdempotencyKey]
		if !ok {
			rows.Close()
			return nil, fmt.Errorf("wallet: debit set returned key %q it was not given", t.IdempotencyKey)
		}
		applied[j] = t
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	_, err = br.Exec()
	return applied, err
}
