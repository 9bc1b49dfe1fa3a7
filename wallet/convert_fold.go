package wallet

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/dbtx"
)

// pairSQL is a conversion in one statement: both legs' key check, the
// debit, the credit and their four ledger entries. $1 player; $2..$7 the
// debit leg and $8..$13 the credit leg (currency, signed amount, kind,
// reference, key, system account). When either key is stored, the
// one-time filter skips the debit (and so everything after it) without
// locking a wallet, and the stored legs come back flagged. The credit
// reads the debit's RETURNING, so the debit's wallet is locked first (the
// Mana-then-Sparks lock order every conversion keeps) and a refused debit
// leaves the credit nothing to do.
const pairSQL = `WITH prior AS (
    SELECT ` + txColumns + ` FROM wallet_transactions WHERE idempotency_key IN ($6::text, $12::text)),
wd AS (
    UPDATE wallets SET balance = balance + $3::bigint, seq = seq + 1
    WHERE player_id = $1::bigint AND currency = $2::text AND balance + $3::bigint >= 0
      AND NOT EXISTS (SELECT FROM prior)
    RETURNING id, balance, seq),
wc AS (
    INSERT INTO wallets AS cur (player_id, currency, balance, seq)
    SELECT $1::bigint, $8::text, $9::bigint, 1 FROM wd
    ON CONFLICT (player_id, currency) DO UPDATE
        SET balance = cur.balance + EXCLUDED.balance, seq = cur.seq + 1
    RETURNING id, balance, seq),
td AS (
    INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    SELECT id, $1::bigint, $2::text, $3::bigint, $4::text, $5::text, $6::text, balance FROM wd
    RETURNING ` + txColumns + `),
tc AS (
    INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    SELECT id, $1::bigint, $8::text, $9::bigint, $10::text, $11::text, $12::text, balance FROM wc
    RETURNING ` + txColumns + `),
e AS (
    INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
    SELECT td.id, 'wallet', td.wallet_id, $2::text, $3::bigint, td.balance_after, wd.seq FROM td, wd
    UNION ALL
    SELECT td.id, $7::text, NULL, $2::text, -$3::bigint, NULL, NULL FROM td
    UNION ALL
    SELECT tc.id, 'wallet', tc.wallet_id, $8::text, $9::bigint, tc.balance_after, wc.seq FROM tc, wc
    UNION ALL
    SELECT tc.id, $13::text, NULL, $8::text, -$9::bigint, NULL, NULL FROM tc)
SELECT true, ` + txColumns + ` FROM prior
UNION ALL
SELECT false, ` + txColumns + ` FROM td
UNION ALL
SELECT false, ` + txColumns + ` FROM tc`

func pairArgs(debit, credit leg) []any {
	return []any{debit.playerID,
		string(debit.currency), debit.delta, string(debit.kind), debit.reference, debit.key, debit.account,
		string(credit.currency), credit.delta, string(credit.kind), credit.reference, credit.key, credit.account}
}

// applyPair runs pairSQL: on the pool in autocommit when tx is nil, else
// in tx under a savepoint pipelined with it (one round trip either way).
// It returns the rows (Replayed set on stored ones); none is a refusal
// (errRefused).
func applyPair(ctx context.Context, q dbtx.DB, tx pgx.Tx, debit, credit leg) ([]*Transaction, error) {
	if tx == nil {
		rows, err := q.Query(ctx, pairSQL, pairArgs(debit, credit)...)
		if err != nil {
			return nil, classify(err)
		}
		return collectPair(rows)
	}
	return inSavepoint(ctx, tx, pairSQL, pairArgs(debit, credit), func(br pgx.BatchResults) ([]*Transaction, error) {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		return collectPair(rows)
	})
}

// collectPair reads pairSQL's rows; no row is errRefused.
func collectPair(rows pgx.Rows) ([]*Transaction, error) {
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Transaction, error) {
		var t Transaction
		err := r.Scan(&t.Replayed, &t.ID, &t.WalletID, &t.PlayerID, &t.Currency, &t.Amount, &t.Kind, &t.Reference,
			&t.IdempotencyKey, &t.BalanceAfter, &t.CreatedAt)
		return &t, err
	})
	if err != nil {
		return nil, classify(err)
	}
	if len(found) == 0 {
		return nil, errRefused
	}
	return found, nil
}
