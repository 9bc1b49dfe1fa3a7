package wallet

// The post statement. Every post is ONE statement built here from a row
// source and the same tail:
//
//	prior  the stored transactions of the source's keys (a replay)
//	ok     the rows the source applies, each with its wallet's new state:
//	       one row for a post (a conditional UPDATE of the wallet for a
//	       debit, an upsert that creates it for a credit), two rows for a
//	       conversion (the Sparks credit reads the Mana debit, which reads
//	       the player's debt), or unnest of N debits for a batch (locked
//	       in wallet order, applied set-based)
//	t, e   the tail: each row of ok becomes a wallet_transactions row and
//	       its two ledger entries; ids are drawn in ok, so the entries need
//	       no join back. A new ledger column computed from a post's row
//	       is a change to the tail only (one from a new post parameter
//	       also adds it to okReturning and setRows).
//
// The statement answers the stored rows as 'replay', the new ones as
// 'new', and (a conversion) an open debt as one 'debt' row.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// txColumns are a transaction's columns as every statement and lookup of
// the package returns them, after a state.
const txColumns = `id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at`

// okColumns are the columns of ok, what the tail writes.
const okColumns = `ord, txid, wallet_id, player_id, currency, amount, kind, reference, key, account, balance_after, seq`

// tail writes ok's rows and answers the statement.
const tail = `
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
SELECT 'replay', ` + txColumns + ` FROM prior`

// answerNew is the tail's last part: the transactions it wrote.
const answerNew = `
UNION ALL
SELECT 'new', ` + txColumns + ` FROM t`

// okReturning is what a one-row wallet write returns: its leg's row of ok.
const okReturning = `
    RETURNING {ord} AS ord, nextval('wallet_transactions_id_seq') AS txid, w.id AS wallet_id, w.player_id, w.currency,
        {amount} AS amount, {kind} AS kind, {reference} AS reference, {key} AS key, {account} AS account,
        w.balance AS balance_after, w.seq)`

// debitRow debits one wallet: a conditional UPDATE that takes the row
// lock, refuses to go negative and never creates a wallet (a missing one
// holds 0); no row comes back when refused. {from} and {gate} say when it
// may run at all.
const debitRow = `{name} AS (
    UPDATE wallets w SET balance = w.balance + {amount}, seq = w.seq + 1{from}
    WHERE w.player_id = {player} AND w.currency = {currency} AND w.balance + {amount} >= 0 AND {gate}` + okReturning

// creditRow credits one wallet, creating it on first use; bigint overflow
// of the balance raises SQLSTATE 22003 and fails the statement. {from}
// says when it may run at all.
const creditRow = `{name} AS (
    INSERT INTO wallets AS w (player_id, currency, balance, seq)
    SELECT {player}, {currency}, {amount}, 1{from}
    ON CONFLICT (player_id, currency) DO UPDATE SET balance = w.balance + EXCLUDED.balance, seq = w.seq + 1` + okReturning

// noPrior runs a row only when none of the source's keys is stored: an
// uncorrelated one-time filter, so a replay neither reads nor locks the
// wallet.
const noPrior = `NOT EXISTS (SELECT FROM prior)`

// legSQL binds a one-row fragment to leg i's parameters ($7i+1 .. $7i+7).
func legSQL(fragment string, i int, name, from, gate string) string {
	p := func(k int, typ string) string { return "$" + strconv.Itoa(7*i+k) + "::" + typ }
	return strings.NewReplacer("{name}", name, "{from}", from, "{gate}", gate, "{ord}", strconv.Itoa(i+1),
		"{player}", p(1, "bigint"), "{currency}", p(2, "text"), "{amount}", p(3, "bigint"), "{kind}", p(4, "text"),
		"{reference}", p(5, "text"), "{key}", p(6, "text"), "{account}", p(7, "text")).Replace(fragment)
}

// source is what one post statement applies: its keys (prior's condition
// on idempotency_key), the CTEs that end in ok (the rows it applies), and
// any answer of its own beside the tail's.
type source struct {
	keys, rows, answers string
}

// statement is the one post statement: prior, src's rows, the tail.
func statement(src source) string {
	return `WITH prior AS (
    SELECT ` + txColumns + ` FROM wallet_transactions WHERE idempotency_key ` + src.keys + `),
` + src.rows + "," + tail + src.answers + answerNew
}

// oneRow is a post's source, one leg: a debit or a credit.
func oneRow(debit bool) source {
	row := legSQL(creditRow, 0, "ok", " WHERE "+noPrior, "")
	if debit {
		row = legSQL(debitRow, 0, "ok", "", noPrior)
	}
	return source{keys: "= $6::text", rows: row}
}

// debtGuard locks the converting player's debts row before any wallet
// (FOR SHARE; created when the player has none, so that a clawback opening
// a debt takes the same row): the debt it reads is the one the Mana wallet
// is debited under. Nothing is locked for a replay.
const debtGuard = `held AS (
    SELECT outstanding FROM debts WHERE player_id = $1::bigint AND ` + noPrior + ` FOR SHARE),
made AS (
    INSERT INTO debts (player_id) SELECT $1::bigint WHERE ` + noPrior + ` AND NOT EXISTS (SELECT FROM held)
    ON CONFLICT (player_id) DO UPDATE SET player_id = EXCLUDED.player_id
    RETURNING outstanding),
debt AS (
    SELECT outstanding FROM held UNION ALL SELECT outstanding FROM made),`

// answerDebt answers an open debt as one row, its Mana in the amount.
const answerDebt = `
UNION ALL
SELECT 'debt', 0, 0, $1::bigint, 'mana', outstanding, '', '', '', 0, now() FROM debt WHERE outstanding > 0`

// pairRows is a conversion's source, two rows: the Mana debit joins the
// debt's row (so no wallet is locked before it, none at all for a replay,
// and an open debt applies nothing), and the Sparks credit reads the
// debit's row (so the Mana wallet is locked first and a refused debit
// credits nothing): the lock order debts row, Mana wallet, Sparks wallet.
func pairRows() source {
	return source{keys: "IN ($6::text, $13::text)", answers: answerDebt, rows: debtGuard + `
` + legSQL(debitRow, 0, "debit", "\n    FROM debt", "debt.outstanding = 0") + `,
` + legSQL(creditRow, 1, "credit", " FROM debit", "") + `,
ok AS (
    SELECT ` + okColumns + ` FROM debit UNION ALL SELECT ` + okColumns + ` FROM credit)`}
}

// setRows is a batch's source, unnest of N debits applied set-based:
// $1..$7 are the legs' parameters as arrays, in lock order. A leg whose
// key is stored comes back as a replay and is not applied. The other legs' wallets are locked
// in (player, currency) order, each leg's balance_after is its wallet's
// balance plus the running sum of its debits in batch order, and each
// wallet is updated once. Debits only lower a balance, so the legs that
// keep balance_after >= 0 are exactly a prefix of each wallet's legs: the
// ones a post-at-a-time run would accept before its first refusal. The
// rest, and the legs of a wallet that does not exist, are not applied (no
// row comes back): PostTx takes them, seeing the new balance. fresh
// filters the stored keys with <> ALL rather than an anti-join: the
// planner estimates an anti-join's output at one row and then joins fresh
// to l by a nested loop, every leg against every wallet.
const setRows = `v AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[])
        WITH ORDINALITY AS v(player_id, currency, amount, kind, reference, key, account, ord)),
fresh AS (
    SELECT * FROM v WHERE v.key <> ALL (ARRAY(SELECT idempotency_key FROM prior))),
l AS (
    SELECT w.id, w.player_id, w.currency, w.balance, w.seq FROM wallets w
    WHERE (w.player_id, w.currency) IN (SELECT player_id, currency FROM fresh)
    ORDER BY w.player_id, w.currency
    FOR UPDATE),
r AS (
    SELECT fresh.*, l.id AS wallet_id,
        l.balance + sum(fresh.amount) OVER run AS balance_after,
        l.seq + row_number() OVER run AS seq
    FROM fresh JOIN l ON l.player_id = fresh.player_id AND l.currency = fresh.currency
    WINDOW run AS (PARTITION BY l.id ORDER BY fresh.ord)),
ok AS (
    SELECT ord, nextval('wallet_transactions_id_seq') AS txid, wallet_id, player_id, currency, amount, kind, reference,
        key, account, balance_after, seq
    FROM r WHERE balance_after >= 0 ORDER BY ord),
w AS (
    UPDATE wallets SET balance = last.balance_after, seq = last.seq
    FROM (SELECT DISTINCT ON (wallet_id) wallet_id, balance_after, seq FROM ok ORDER BY wallet_id, ord DESC) last
    WHERE wallets.id = last.wallet_id)`

// The statements, built once.
var (
	debitStatement      = statement(oneRow(true))
	creditStatement     = statement(oneRow(false))
	conversionStatement = statement(pairRows())
	batchStatement      = statement(source{keys: "= ANY($6::text[])", rows: setRows})
)

// DebitStatement is the one statement Post runs for a debit outside a
// caller's transaction (a first post and a replay alike): $1 player, $2
// currency, $3 signed amount, $4 kind, $5 reference, $6 key, $7 system
// account. It is exported for benchmarks that run this same SQL with no Go
// in the path (billing bench wallet), so a ratio against it measures the
// client, not a different statement.
func DebitStatement() string { return debitStatement }

// args are leg l's parameters.
func (l leg) args() []any {
	return []any{l.playerID, string(l.currency), l.delta, string(l.kind), l.reference, l.key, l.account}
}

// answers are a statement's rows: the transactions, and an open debt.
type answers struct {
	txs  []*Transaction
	debt int64
}

// scan reads one row of the package's statements and lookups: a state
// ('new', 'replay', 'debt', 'stored') and a transaction.
func scan(row pgx.Row) (*Transaction, string, error) {
	var t Transaction
	var state string
	err := row.Scan(&state, &t.ID, &t.WalletID, &t.PlayerID, &t.Currency, &t.Amount, &t.Kind, &t.Reference,
		&t.IdempotencyKey, &t.BalanceAfter, &t.CreatedAt)
	t.Replayed = state == "replay"
	return &t, state, err
}

// collect reads every row of a statement.
func collect(rows pgx.Rows) (answers, error) {
	var a answers
	defer rows.Close()
	for rows.Next() {
		t, state, err := scan(rows)
		switch {
		case err != nil:
			return answers{}, err
		case state == "debt":
			a.debt = t.Amount
		default:
			a.txs = append(a.txs, t)
		}
	}
	return a, rows.Err()
}

// apply runs one statement: in autocommit on the pool when tx is nil (one
// round trip; with the autocommit copy's guard pipelined after it, in one
// implicit transaction), else in tx under a savepoint (one pipelined round
// trip).
func (s *Store) apply(ctx context.Context, tx pgx.Tx, sql string, args []any) (answers, error) {
	if tx == nil && s.guard != nil {
		return s.applyGuarded(ctx, s.guard, sql, args)
	}
	if tx == nil {
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return answers{}, classify(err)
		}
		a, err := collect(rows)
		return a, classify(err)
	}
	return inSavepoint(ctx, tx, sql, args)
}

// savepoint is the name inSavepoint uses; nesting the same name is legal
// and RELEASE/ROLLBACK TO address the innermost one.
const savepoint = "wallet_post"

// inSavepoint runs one statement in tx between SAVEPOINT and RELEASE,
// pipelined in one round trip. When the statement fails, only the
// savepoint is rolled back, so the caller's transaction stays usable.
func inSavepoint(ctx context.Context, tx pgx.Tx, sql string, args []any) (answers, error) {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + savepoint)
	b.Queue(sql, args...)
	b.Queue("RELEASE SAVEPOINT " + savepoint)
	br := tx.SendBatch(ctx, b)
	_, err := br.Exec()
	var a answers
	if err == nil {
		if rows, qerr := br.Query(); qerr != nil {
			err = qerr
		} else {
			a, err = collect(rows)
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint+"; RELEASE SAVEPOINT "+savepoint); rerr != nil {
			return answers{}, fmt.Errorf("%w after %w: %w", errRollback, err, rerr)
		}
		return answers{}, classify(err)
	}
	return a, nil
}

// errRollback is a savepoint that could not be rolled back: the caller's
// transaction is unusable.
var errRollback = errors.New("wallet: roll back savepoint")

// errRefused means a statement applied nothing and stored nothing: a
// debit the wallet could not pay (or a missing wallet). The caller decides
// between a concurrent winner's replay and ErrInsufficientBalance.
var errRefused = errors.New("wallet: refused")

// errKeyTaken marks a unique violation on the idempotency key: another
// caller committed the same key first.
var errKeyTaken = errors.New("wallet: key taken concurrently")

// classify maps PostgreSQL errors to the package's errors.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "23505":
		if pgErr.ConstraintName == "wallet_transactions_idempotency_key_key" {
			return errKeyTaken
		}
	case "22003":
		return fmt.Errorf("%w: %s", ErrOverflow, pgErr.Message)
	case "23503":
		if pgErr.ConstraintName == "wallets_player_id_fkey" {
			return ErrUnknownPlayer
		}
	}
	return fmt.Errorf("wallet: post: %w", err)
}
