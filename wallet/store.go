package wallet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configure a Store.
type Options struct {
	SparksPerMana int64 // default 1
}

// Store posts to wallets and reads them.
type Store struct {
	pool          *pgxpool.Pool
	sparksPerMana int64
}

// New returns a Store over pool.
func New(pool *pgxpool.Pool, opts Options) *Store {
	if opts.SparksPerMana <= 0 {
		opts.SparksPerMana = 1
	}
	return &Store{pool: pool, sparksPerMana: opts.SparksPerMana}
}

// Post applies p on its own: the post, its key check included, is one
// statement in autocommit (one round trip).
func (s *Store) Post(ctx context.Context, p PostParams) (*Transaction, error) {
	start := time.Now()
	t, err := s.post(ctx, nil, p)
	observe(p.Kind, start, t != nil && t.Replayed, err)
	return t, err
}

// PostTx applies p inside the caller's transaction, under a savepoint: a
// refused or duplicate post leaves tx usable. The wallet row stays locked
// until the caller commits or rolls back.
func (s *Store) PostTx(ctx context.Context, tx pgx.Tx, p PostParams) (*Transaction, error) {
	start := time.Now()
	t, err := s.post(ctx, tx, p)
	observe(p.Kind, start, t != nil && t.Replayed, err)
	return t, err
}

func (s *Store) post(ctx context.Context, tx pgx.Tx, p PostParams) (*Transaction, error) {
	l, err := newLeg(p)
	if err != nil {
		return nil, err
	}
	var t *Transaction
	if tx == nil {
		t, err = applyFolded(ctx, s.pool, l)
	} else {
		t, err = applySavepoint(ctx, tx, l)
	}
	switch {
	case err != nil:
		return s.rescue(ctx, tx, l, err)
	case t.Replayed:
		return l.replay(t)
	}
	return t, nil
}

// rescue answers a post whose statement did not apply. When a concurrent
// caller committed the same key first (a unique violation, or a refusal
// because the winner's debit spent the balance we were waiting for), the
// winner's row is the answer; otherwise err stands.
func (s *Store) rescue(ctx context.Context, tx pgx.Tx, l leg, err error) (*Transaction, error) {
	if !errors.Is(err, errKeyTaken) && !errors.Is(err, errRefused) && !errors.Is(err, ErrOverflow) {
		return nil, err
	}
	w, lerr := s.winner(ctx, tx, l.key, errors.Is(err, errKeyTaken))
	if lerr != nil {
		return nil, lerr
	}
	if w != nil {
		return l.replay(w)
	}
	switch {
	case errors.Is(err, errRefused):
		return nil, ErrInsufficientBalance
	case errors.Is(err, errKeyTaken):
		return nil, fmt.Errorf("wallet: key %q taken but its transaction is not visible", l.key)
	}
	return nil, err
}

// winner reads the committed transaction under key. Inside a caller's
// transaction it looks there (a READ COMMITTED statement sees the winner's
// commit). Only when a unique violation proves that a winner committed but
// the caller's REPEATABLE READ snapshot predates it does it ask the pool:
// never otherwise, as a caller holding the pool's last connection would
// wait forever for a second one.
func (s *Store) winner(ctx context.Context, tx pgx.Tx, key string, committed bool) (*Transaction, error) {
	if tx == nil {
		return lookup(ctx, s.pool, key)
	}
	t, err := lookup(ctx, tx, key)
	if err != nil || t != nil || !committed {
		return t, err
	}
	return lookup(ctx, s.pool, key)
}

// Credit is Post with Direction Credit.
func (s *Store) Credit(ctx context.Context, p PostParams) (*Transaction, error) {
	p.Direction = Credit
	return s.Post(ctx, p)
}

// CreditTx is PostTx with Direction Credit.
func (s *Store) CreditTx(ctx context.Context, tx pgx.Tx, p PostParams) (*Transaction, error) {
	p.Direction = Credit
	return s.PostTx(ctx, tx, p)
}

// Debit is Post with Direction Debit.
func (s *Store) Debit(ctx context.Context, p PostParams) (*Transaction, error) {
	p.Direction = Debit
	return s.Post(ctx, p)
}

// DebitTx is PostTx with Direction Debit.
func (s *Store) DebitTx(ctx context.Context, tx pgx.Tx, p PostParams) (*Transaction, error) {
	p.Direction = Debit
	return s.PostTx(ctx, tx, p)
}

// Balances returns the player's balance in every currency (0 when the
// wallet does not exist yet).
func (s *Store) Balances(ctx context.Context, playerID int64) (map[Currency]int64, error) {
	out := map[Currency]int64{Mana: 0, Sparks: 0}
	rows, err := s.pool.Query(ctx, `SELECT currency, balance FROM wallets WHERE player_id = $1`, playerID)
	if err != nil {
		return nil, fmt.Errorf("wallet: balances: %w", err)
	}
	var c Currency
	var b int64
	_, err = pgx.ForEachRow(rows, []any{&c, &b}, func() error { out[c] = b; return nil })
	if err != nil {
		return nil, fmt.Errorf("wallet: balances: %w", err)
	}
	return out, nil
}

// The list statements: keyset pagination on (wallet_id, id). The first
// page and the pages before a cursor are two statements, not one with
// "$3 = 0 OR id < $3": under a cached generic plan that disjunction is a
// filter, not an index bound, and a deep page would walk every newer row
// of the wallet before reaching its cursor.
const (
	listFirstSQL = `SELECT ` + txColumns + ` FROM wallet_transactions
WHERE wallet_id = (SELECT id FROM wallets WHERE player_id = $1 AND currency = $2)
ORDER BY id DESC LIMIT $3`
	listBeforeSQL = `SELECT ` + txColumns + ` FROM wallet_transactions
WHERE wallet_id = (SELECT id FROM wallets WHERE player_id = $1 AND currency = $2) AND id < $4
ORDER BY id DESC LIMIT $3`
)

// Transactions lists a player's transactions in one currency, newest first.
func (s *Store) Transactions(ctx context.Context, playerID int64, c Currency, lp ListParams) ([]Transaction, error) {
	if !validCurrency(c) {
		return nil, fmt.Errorf("%w %q", ErrUnknownCurrency, c)
	}
	switch {
	case lp.Limit <= 0:
		lp.Limit = 50
	case lp.Limit > 200:
		lp.Limit = 200
	}
	q, args := listFirstSQL, []any{playerID, string(c), lp.Limit}
	if lp.BeforeID > 0 {
		q, args = listBeforeSQL, append(args, lp.BeforeID)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("wallet: transactions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Transaction, error) {
		t, err := scanTx(r)
		if err != nil {
			return Transaction{}, err
		}
		return *t, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wallet: transactions: %w", err)
	}
	return out, nil
}
