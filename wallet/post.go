package wallet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

// Post applies p on its own: the post, its key check included, is one
// statement in autocommit (one round trip), committed through durable.Do:
// a commit no synchronous standby confirmed is refused with
// durable.ErrNotDurable (the post may stand on the primary; posting the
// same key again answers it as a replay).
//
// A Sparks post of a Store with an observer must commit what the observer
// writes with it. When the observer is a SparksGuard, its guard runs
// pipelined after the statement in the same implicit transaction (still
// one round trip), and only when the guard fails (the observer has
// something to write) is the post made again as PostTx in a transaction of
// its own; without a guard it always takes that transaction.
func (s *Store) Post(ctx context.Context, p PostParams) (*Transaction, error) {
	var guard *guardStmt
	if s.observer != nil && p.Currency == Sparks {
		if guard = s.guardFor(p.PlayerID); guard == nil {
			return s.observedPost(ctx, p)
		}
	}
	start := time.Now()
	var t *Transaction
	l, err := newLeg(p)
	if err == nil {
		err = s.autocommit(ctx, func(on *Store) (err error) {
			on.guard = guard
			t, err = on.postLeg(ctx, nil, l)
			return err
		})
	}
	if errors.Is(err, errGuarded) {
		return s.observedPost(ctx, p)
	}
	if err != nil {
		t = nil
	}
	observe(p.Kind, start, t != nil && t.Replayed, err)
	return t, err
}

// observedPost is PostTx in a transaction of its own.
func (s *Store) observedPost(ctx context.Context, p PostParams) (*Transaction, error) {
	var t *Transaction
	err := s.observedTx(ctx, func(tx pgx.Tx) (err error) {
		t, err = s.PostTx(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// PostTx applies p inside the caller's transaction, under a savepoint: a
// refused or duplicate post leaves tx usable. The wallet row stays locked
// until the caller commits or rolls back. A Sparks post that moved the
// balance tells the Store's observer in tx.
func (s *Store) PostTx(ctx context.Context, tx pgx.Tx, p PostParams) (*Transaction, error) {
	start := time.Now()
	t, err := s.post(ctx, tx, p)
	if err == nil {
		if err = s.sparksMoved(ctx, tx, t); err != nil {
			t = nil
		}
	}
	observe(p.Kind, start, t != nil && t.Replayed, err)
	return t, err
}

func (s *Store) post(ctx context.Context, tx pgx.Tx, p PostParams) (*Transaction, error) {
	l, err := newLeg(p)
	if err != nil {
		return nil, err
	}
	return s.postLeg(ctx, tx, l)
}

// postLeg applies validated l: in autocommit on s.pool when tx is nil,
// else in tx.
func (s *Store) postLeg(ctx context.Context, tx pgx.Tx, l leg) (*Transaction, error) {
	sql := creditStatement
	if l.delta < 0 {
		sql = debitStatement
	}
	a, err := s.apply(ctx, tx, sql, l.args())
	if err == nil && len(a.txs) == 0 {
		err = errRefused
	}
	if err != nil {
		if a.txs, err = s.rescue(ctx, tx, []leg{l}, err); err != nil {
			return nil, err
		}
	}
	if t := a.txs[0]; t.Replayed {
		return l.replay(t)
	}
	return a.txs[0], nil
}

// rescue answers a statement that did not apply. When a concurrent caller
// committed one of legs' keys first (a unique violation, or a refusal
// because the winner's debit spent the balance we were waiting for), the
// winner's rows are the answer; otherwise err stands.
func (s *Store) rescue(ctx context.Context, tx pgx.Tx, legs []leg, err error) ([]*Transaction, error) {
	if !errors.Is(err, errKeyTaken) && !errors.Is(err, errRefused) && !errors.Is(err, ErrOverflow) {
		return nil, err
	}
	keys := make([]string, len(legs))
	for i, l := range legs {
		keys[i] = l.key
	}
	found, lerr := s.winner(ctx, tx, keys, errors.Is(err, errKeyTaken))
	switch {
	case lerr != nil:
		return nil, lerr
	case len(found) > 0:
		return found, nil
	case errors.Is(err, errRefused):
		return nil, ErrInsufficientBalance
	case errors.Is(err, errKeyTaken):
		return nil, fmt.Errorf("wallet: key %q taken but its transaction is not visible", keys[0])
	}
	return nil, err
}

// winner reads the committed transactions under keys. Inside a caller's
// transaction it looks there (a READ COMMITTED statement sees the winner's
// commit). Only when a unique violation proves that a winner committed but
// the caller's REPEATABLE READ snapshot predates it does it ask the pool:
// never otherwise, as a caller holding the pool's last connection would
// wait forever for a second one.
func (s *Store) winner(ctx context.Context, tx pgx.Tx, keys []string, committed bool) ([]*Transaction, error) {
	if tx == nil {
		return lookup(ctx, s.pool, keys)
	}
	found, err := lookup(ctx, tx, keys)
	if err != nil || len(found) > 0 || !committed {
		return found, err
	}
	return lookup(ctx, s.pool, keys)
}

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

// lookupSQL reads the stored transactions of keys.
const lookupSQL = `SELECT 'replay', ` + txColumns + ` FROM wallet_transactions WHERE idempotency_key = ANY($1)`

// lookup returns the transactions stored under keys (Replayed set).
func lookup(ctx context.Context, q dbtx.DB, keys []string) ([]*Transaction, error) {
	rows, err := q.Query(ctx, lookupSQL, keys)
	if err != nil {
		return nil, fmt.Errorf("wallet: look up keys: %w", err)
	}
	a, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("wallet: look up keys: %w", err)
	}
	return a.txs, nil
}
