package wallet

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/durable"
)

// SparksObserver is told, inside the posting transaction, whose Sparks
// balance a post just changed: what depends on a Sparks balance (the
// low-balance events, package events) is decided where the balance moves,
// while the wallet row is still locked, and committed with the movement.
//
// SparksMovedTx gets the players in ascending order, each once: one call
// per post, conversion or clawback step, one per PostManyTx batch. It is
// never called for a replay, a refused post or a Mana movement. An error
// fails the post; tx must then be rolled back.
type SparksObserver interface {
	SparksMovedTx(ctx context.Context, tx pgx.Tx, playerIDs []int64) error
}

// sparksMoved tells the observer which players' Sparks txs moved (the new
// Sparks transactions among them; replays moved nothing).
func (s *Store) sparksMoved(ctx context.Context, tx pgx.Tx, txs ...*Transaction) error {
	if s.observer == nil {
		return nil
	}
	var players []int64
	for _, t := range txs {
		if t != nil && !t.Replayed && t.Currency == Sparks {
			players = append(players, t.PlayerID)
		}
	}
	if len(players) == 0 {
		return nil
	}
	slices.Sort(players)
	if err := s.observer.SparksMovedTx(ctx, tx, slices.Compact(players)); err != nil {
		return fmt.Errorf("wallet: sparks observer: %w", err)
	}
	return nil
}

// observedTx runs f in a transaction of its own, committed through
// durable.Commit. An autocommit post or conversion that may move Sparks
// takes this path when the Store has an observer: the observer's writes
// must commit with the movement, which one autocommit statement cannot
// carry. The wallet row stays locked until the commit.
func (s *Store) observedTx(ctx context.Context, f func(tx pgx.Tx) error) error {
	tx, err := s.root.Begin(ctx)
	if err != nil {
		return fmt.Errorf("wallet: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		return err
	}
	return durable.Commit(ctx, tx)
}

// PostBatchTx is PostManyTx, then the Store's observer told once for the
// whole batch, in tx, of every player whose Sparks it moved: what a caller
// posting a batch uses (the enforcer's funding). PostManyTx alone leaves
// the observer out.
func (s *Store) PostBatchTx(ctx context.Context, tx pgx.Tx, ps []PostParams) ([]*Transaction, []error, error) {
	out, errs, err := s.PostManyTx(ctx, tx, ps)
	if err == nil {
		err = s.sparksMoved(ctx, tx, out...)
	}
	return out, errs, err
}
