package wallet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fibe-dev/billing/internal/dbtx"
)

// defaultAccounts is the system account on the other side of each known kind.
var defaultAccounts = map[Kind]string{
	KindPurchase:   AccountManaIssued,
	KindConversion: AccountConversion,
	KindFunding:    AccountFundingRevenue,
	KindAdjustment: AccountAdjustments,
}

// accountWallet is the ledger account name of every player wallet entry.
const accountWallet = "wallet"

// leg is a validated post: the signed amount and the resolved account.
type leg struct {
	playerID  int64
	currency  Currency
	delta     int64 // signed
	kind      Kind
	reference string
	key       string
	account   string
}

func validKey(key string) bool {
	return len(key) > 0 && len(key) <= MaxKeyLength && utf8.ValidString(key) && !strings.ContainsRune(key, 0)
}

func validCurrency(c Currency) bool { return c == Mana || c == Sparks }

// newLeg validates p.
func newLeg(p PostParams) (leg, error) {
	if err := p.IdempotencyKey.check(); err != nil {
		return leg{}, err
	}
	switch {
	case !validCurrency(p.Currency):
		return leg{}, fmt.Errorf("%w %q", ErrUnknownCurrency, p.Currency)
	case p.Amount <= 0:
		return leg{}, ErrInvalidAmount
	case p.PlayerID <= 0:
		return leg{}, fmt.Errorf("%w: player id %d", ErrUnknownPlayer, p.PlayerID)
	case p.Kind == "" || len(p.Kind) > 64 || !utf8.ValidString(string(p.Kind)):
		return leg{}, fmt.Errorf("%w: kind must be 1 to 64 bytes", ErrInvalidPost)
	case !utf8.ValidString(p.Reference) || strings.ContainsRune(p.Reference, 0):
		return leg{}, fmt.Errorf("%w: reference is not valid text", ErrInvalidPost)
	}
	l := leg{playerID: p.PlayerID, currency: p.Currency, kind: p.Kind, reference: p.Reference,
		key: p.IdempotencyKey.String(), account: p.Account, delta: p.Amount}
	switch p.Direction {
	case Credit:
	case Debit:
		l.delta = -p.Amount
	default:
		return leg{}, fmt.Errorf("%w: direction %q", ErrInvalidPost, p.Direction)
	}
	if l.account == "" {
		l.account = defaultAccounts[p.Kind]
	}
	if l.account == "" || l.account == accountWallet || len(l.account) > 64 {
		return leg{}, fmt.Errorf("%w: kind %q needs a system account", ErrInvalidPost, p.Kind)
	}
	return l, nil
}

// mismatch names the first field in which stored t differs from l, or "".
// The reference and the account are descriptive and not compared.
func (l leg) mismatch(t *Transaction, checkAmount bool) string {
	switch {
	case t.PlayerID != l.playerID:
		return "player"
	case t.Currency != l.currency:
		return "currency"
	case (t.Amount < 0) != (l.delta < 0):
		return "direction"
	case checkAmount && t.Amount != l.delta:
		return "amount"
	case t.Kind != l.kind:
		return "kind"
	}
	return ""
}

// replay returns stored t as the answer to l, or refuses a reused key.
func (l leg) replay(t *Transaction) (*Transaction, error) {
	if f := l.mismatch(t, true); f != "" {
		return nil, &KeyReusedError{Key: l.key, Field: f}
	}
	t.Replayed = true
	return t, nil
}

const txColumns = `id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at`

func scanTx(row pgx.Row) (*Transaction, error) {
	var t Transaction
	err := row.Scan(&t.ID, &t.WalletID, &t.PlayerID, &t.Currency, &t.Amount, &t.Kind, &t.Reference,
		&t.IdempotencyKey, &t.BalanceAfter, &t.CreatedAt)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// lookup returns the transaction stored under key, or nil.
func lookup(ctx context.Context, q dbtx.DB, key string) (*Transaction, error) {
	t, err := scanTx(q.QueryRow(ctx, `SELECT `+txColumns+` FROM wallet_transactions WHERE idempotency_key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wallet: look up key: %w", err)
	}
	return t, nil
}

// The post statements. $1 player, $2 currency, $3 signed amount, $4 kind,
// $5 reference, $6 key, $7 system account. The first CTE takes the wallet
// row lock; the rest only run when it returned the row.
const (
	// A debit never creates a wallet: a missing wallet holds 0, so the debit
	// is refused exactly like an underfunded one (no row comes back).
	debitWalletCTE = `w AS (
    UPDATE wallets SET balance = balance + $3, seq = seq + 1
    WHERE player_id = $1 AND currency = $2 AND balance + $3 >= 0
    RETURNING id, balance, seq)`
	// A credit creates the wallet on first use. bigint overflow of the new
	// balance raises SQLSTATE 22003 and rolls the statement back.
	creditWalletCTE = `w AS (
    INSERT INTO wallets AS cur (player_id, currency, balance, seq) VALUES ($1, $2, $3, 1)
    ON CONFLICT (player_id, currency) DO UPDATE
        SET balance = cur.balance + EXCLUDED.balance, seq = cur.seq + 1
    RETURNING id, balance, seq)`
	postTail = `,
t AS (
    INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    SELECT id, $1, $2, $3, $4, $5, $6, balance FROM w
    RETURNING ` + txColumns + `),
e AS (
    INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
    SELECT t.id, 'wallet', t.wallet_id, $2, $3, t.balance_after, w.seq FROM t, w
    UNION ALL
    SELECT t.id, $7, NULL, $2, -$3, NULL, NULL FROM t)
SELECT ` + txColumns + ` FROM t`
	debitSQL  = `WITH ` + debitWalletCTE + postTail
	creditSQL = `WITH ` + creditWalletCTE + postTail
)

// The folded post statements: the key pre-check is a CTE of the post
// itself, so a post is one round trip. When the key is already stored, the
// uncorrelated NOT EXISTS is a one-time filter evaluated before the wallet
// is scanned: the wallet row is neither locked nor waited for, and the
// stored transaction comes back flagged as a replay. Otherwise the
// statement locks, checks, updates and inserts exactly as debitSQL and
// creditSQL do. Parameters are cast because the first use of each no
// longer fixes its type.
const (
	priorCTE = `prior AS (
    SELECT ` + txColumns + ` FROM wallet_transactions WHERE idempotency_key = $6::text)`
	foldedDebitWalletCTE = `w AS (
    UPDATE wallets SET balance = balance + $3::bigint, seq = seq + 1
    WHERE player_id = $1::bigint AND currency = $2::text AND balance + $3::bigint >= 0
      AND NOT EXISTS (SELECT FROM prior)
    RETURNING id, balance, seq)`
	foldedCreditWalletCTE = `w AS (
    INSERT INTO wallets AS cur (player_id, currency, balance, seq)
    SELECT $1::bigint, $2::text, $3::bigint, 1 WHERE NOT EXISTS (SELECT FROM prior)
    ON CONFLICT (player_id, currency) DO UPDATE
        SET balance = cur.balance + EXCLUDED.balance, seq = cur.seq + 1
    RETURNING id, balance, seq)`
	foldedTail = `,
t AS (
    INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    SELECT id, $1::bigint, $2::text, $3::bigint, $4::text, $5::text, $6::text, balance FROM w
    RETURNING ` + txColumns + `),
e AS (
    INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
    SELECT t.id, 'wallet', t.wallet_id, $2::text, $3::bigint, t.balance_after, w.seq FROM t, w
    UNION ALL
    SELECT t.id, $7::text, NULL, $2::text, -$3::bigint, NULL, NULL FROM t)
SELECT true, ` + txColumns + ` FROM prior
UNION ALL
SELECT false, ` + txColumns + ` FROM t`
	foldedDebitSQL = `WITH ` + priorCTE + `,
` + foldedDebitWalletCTE + foldedTail
	foldedCreditSQL = `WITH ` + priorCTE + `,
` + foldedCreditWalletCTE + foldedTail
)

// DebitStatement is the one statement Post runs for a debit outside a
// caller's transaction (a first post and a replay alike): $1 player, $2
// currency, $3 signed amount, $4 kind, $5 reference, $6 key, $7 system
// account. It is exported for benchmarks that run this same SQL with no Go
// in the path (billing bench wallet), so a ratio against it measures the
// client, not a different statement.
func DebitStatement() string { return foldedDebitSQL }

// foldedSQL is l's one-round-trip statement; its rows are scanned by
// scanFolded.
func (l leg) foldedSQL() (string, []any) {
	q := foldedCreditSQL
	if l.delta < 0 {
		q = foldedDebitSQL
	}
	return q, []any{l.playerID, string(l.currency), l.delta, string(l.kind), l.reference, l.key, l.account}
}

// scanFolded reads a folded statement's row: the stored transaction
// (Replayed set) or the new one. No row is a refusal (errRefused).
func scanFolded(row pgx.Row) (*Transaction, error) {
	var t Transaction
	err := row.Scan(&t.Replayed, &t.ID, &t.WalletID, &t.PlayerID, &t.Currency, &t.Amount, &t.Kind, &t.Reference,
		&t.IdempotencyKey, &t.BalanceAfter, &t.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errRefused
	}
	if err != nil {
		return nil, err
	}
	return &t, nil
}

func (l leg) sql() (string, []any) {
	q := creditSQL
	if l.delta < 0 {
		q = debitSQL
	}
	return q, []any{l.playerID, string(l.currency), l.delta, string(l.kind), l.reference, l.key, l.account}
}

// errRefused means the conditional update found no wallet with enough
// balance; the caller decides between a replay and ErrInsufficientBalance.
var errRefused = errors.New("wallet: refused")

// applyFolded runs l's folded statement on the pool in autocommit: one
// round trip, a replay included.
func applyFolded(ctx context.Context, q dbtx.DB, l leg) (*Transaction, error) {
	sql, args := l.foldedSQL()
	t, err := scanFolded(q.QueryRow(ctx, sql, args...))
	if err != nil && !errors.Is(err, errRefused) {
		return nil, classify(err)
	}
	return t, err
}

// savepoint is the name applySavepoint uses; nesting the same name is legal
// and RELEASE/ROLLBACK TO address the innermost one.
const savepoint = "wallet_post"

// applySavepoint runs l's folded statement in tx under a savepoint,
// pipelined with the SAVEPOINT and RELEASE in one round trip. On failure
// only the savepoint is rolled back, so the caller's transaction stays
// usable.
func applySavepoint(ctx context.Context, tx pgx.Tx, l leg) (*Transaction, error) {
	sql, args := l.foldedSQL()
	return inSavepoint(ctx, tx, sql, args, func(br pgx.BatchResults) (*Transaction, error) {
		return scanFolded(br.QueryRow())
	})
}

// inSavepoint runs one statement in tx between SAVEPOINT and RELEASE,
// pipelined in one round trip, and reads its result with read. On failure
// only the savepoint is rolled back, so the caller's transaction stays
// usable; a declined statement (errRefused, *OutstandingDebtError: it
// changed nothing) is returned as is, with the savepoint released.
func inSavepoint[T any](ctx context.Context, tx pgx.Tx, sql string, args []any, read func(pgx.BatchResults) (T, error)) (T, error) {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + savepoint)
	b.Queue(sql, args...)
	b.Queue("RELEASE SAVEPOINT " + savepoint)
	br := tx.SendBatch(ctx, b)
	_, err := br.Exec()
	var out T
	if err == nil {
		out, err = read(br)
	}
	if err == nil || declined(err) {
		if _, rerr := br.Exec(); rerr != nil {
			err = rerr
		}
	}
	if cerr := br.Close(); cerr != nil && (err == nil || declined(err)) {
		err = cerr
	}
	if err != nil && !declined(err) {
		var zero T
		if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint+"; RELEASE SAVEPOINT "+savepoint); rerr != nil {
			return zero, fmt.Errorf("wallet: roll back savepoint after %w: %w", err, rerr)
		}
		return zero, classify(err)
	}
	return out, err
}

// declined reports whether err is a statement's answer that it changed
// nothing, rather than a failure.
func declined(err error) bool {
	return errors.Is(err, errRefused) || errors.Is(err, ErrOutstandingDebt)
}

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
