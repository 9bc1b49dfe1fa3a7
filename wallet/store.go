package wallet

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

// Options configure a Store.
type Options struct {
	SparksPerMana int64 // default 1
	// Observer, when set, is told inside the posting transaction whose
	// Sparks moved (SparksObserver); every process that posts sets it.
	Observer SparksObserver
}

// Store posts to wallets and reads them.
type Store struct {
	// pool runs the package's statements: the Store's pool, or, in the
	// copy an autocommit post makes (autocommit), the one connection
	// durable.Do holds for it.
	pool          conn
	root          *pgxpool.Pool // the Store's pool, always
	sparksPerMana int64
	observer      SparksObserver // nil: nobody is told
	// guard, in an autocommit post's copy, is run with its statement.
	guard *guardStmt
}

// conn is what the package's statements run on: a pool, or one of its
// connections.
type conn interface {
	dbtx.DB
	Begin(ctx context.Context) (pgx.Tx, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// New returns a Store over pool.
func New(pool *pgxpool.Pool, opts Options) *Store {
	if opts.SparksPerMana <= 0 {
		opts.SparksPerMana = 1
	}
	return &Store{pool: pool, root: pool, sparksPerMana: opts.SparksPerMana, observer: opts.Observer}
}

// autocommit runs f, one statement in autocommit (a post's, a
// conversion's: the statement commits by itself), on one connection of
// the pool through durable.Do, like every acknowledging commit of
// billing: a commit no synchronous standby confirmed is answered
// durable.ErrNotDurable, never as done. f gets a copy of s whose
// statements run on that connection; a rescue's lookup after a lost race
// reads there too.
func (s *Store) autocommit(ctx context.Context, f func(on *Store) error) error {
	return durable.Do(ctx, s.root, func(c *pgxpool.Conn) error {
		on := *s
		on.pool = c
		return f(&on)
	})
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
	listFirstSQL = `SELECT 'stored', ` + txColumns + ` FROM wallet_transactions
WHERE wallet_id = (SELECT id FROM wallets WHERE player_id = $1 AND currency = $2)
ORDER BY id DESC LIMIT $3`
	listBeforeSQL = `SELECT 'stored', ` + txColumns + ` FROM wallet_transactions
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
	a, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("wallet: transactions: %w", err)
	}
	out := make([]Transaction, len(a.txs))
	for i, t := range a.txs {
		out[i] = *t
	}
	return out, nil
}
