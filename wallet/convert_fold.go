package wallet

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/dbtx"
)

// pairSQL is a conversion in one statement: both legs' key check, the
// player's debt, the debit, the credit and their four ledger entries. $1
// player; $2..$7 the debit leg and $8..$13 the credit leg (currency, signed
// amount, kind, reference, key, system account). When either key is
// stored, the one-time filter skips everything else without locking a row,
// and the stored legs come back as replays. Otherwise the player's debts
// row is locked first (FOR SHARE, or created when the player has none: a
// clawback opening a debt takes the same row), so that the debt read is
// the one the Mana wallet is taken under: an open debt comes back as one
// "debt" row (its Mana in the amount) and nothing moves. The debit joins
// the debt's row, so no wallet is locked before it (and none at all for a
// replay, which has no debt row). The credit reads
// the debit's RETURNING, so the debit's wallet is locked first (the lock
// order debts row, Mana wallet, Sparks wallet that every conversion and
// clawback keeps) and a refused debit leaves the credit nothing to do.
const pairSQL = `WITH prior AS (
    SELECT ` + txColumns + ` FROM wallet_transactions WHERE idempotency_key IN ($6::text, $12::text)),
held AS (
    SELECT outstanding FROM debts WHERE player_id = $1::bigint AND NOT EXISTS (SELECT FROM prior) FOR SHARE),
made AS (
    INSERT INTO debts (player_id) SELECT $1::bigint WHERE NOT EXISTS (SELECT FROM prior) AND NOT EXISTS (SELECT FROM held)
    ON CONFLICT (player_id) DO UPDATE SET player_id = EXCLUDED.player_id
    RETURNING outstanding),
debt AS (
    SELECT outstanding FROM held UNION ALL SELECT outstanding FROM made),
wd AS (
    UPDATE wallets w SET balance = w.balance + $3::bigint, seq = w.seq + 1
    FROM debt
    WHERE debt.outstanding = 0 AND w.player_id = $1::bigint AND w.currency = $2::text AND w.balance + $3::bigint >= 0
    RETURNING w.id, w.balance, w.seq),
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
SELECT 'replay', ` + txColumns + ` FROM prior
UNION ALL
SELECT 'debt', 0, 0, $1::bigint, 'mana', outstanding, '', '', '', 0, now() FROM debt WHERE outstanding > 0
UNION ALL
SELECT 'new', ` + txColumns + ` FROM td
UNION ALL
SELECT 'new', ` + txColumns + ` FROM tc`

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

// collectPair reads pairSQL's rows; no row is errRefused, a debt row an
// *OutstandingDebtError.
func collectPair(rows pgx.Rows) ([]*Transaction, error) {
	var debt int64
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Transaction, error) {
		var t Transaction
		var state string
		err := r.Scan(&state, &t.ID, &t.WalletID, &t.PlayerID, &t.Currency, &t.Amount, &t.Kind, &t.Reference,
			&t.IdempotencyKey, &t.BalanceAfter, &t.CreatedAt)
		t.Replayed = state == "replay"
		if state == "debt" {
			debt = t.Amount
		}
		return &t, err
	})
	switch {
	case err != nil:
		return nil, classify(err)
	case debt > 0:
		return nil, &OutstandingDebtError{Mana: debt}
	case len(found) == 0:
		return nil, errRefused
	}
	return found, nil
}
