package wallet

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// SparksGuard is what an observer may also implement so that an
// autocommit Sparks post (Post, Convert) stays one round trip: the post's
// statement and the guard's run pipelined in one implicit transaction.
// The guard must write nothing, and must fail with SQLSTATE
// GuardSQLState (by calling SQLGuardFailed) whenever SparksMovedTx would
// write anything that matters for the players; the failure rolls the
// post back, and the Store posts again in a transaction of its own that
// tells the observer. A guard that passes stands for SparksMovedTx having
// nothing to say, so it must judge exactly as SparksMovedTx does.
type SparksGuard interface {
	SparksGuardSQL(playerIDs []int64) (sql string, args []any)
}

// GuardSQLState is the SQLSTATE of a failed guard (billing_guard_failed,
// migration 00017).
const GuardSQLState = "ZB001"

// SQLGuardFailed is the SQL expression a guard statement evaluates to
// fail with GuardSQLState; reason is a SQL text expression.
func SQLGuardFailed(reason string) string {
	return "billing_guard_failed(" + reason + ")"
}

// errGuarded is an autocommit post rolled back by its guard: the observer
// has something to write, so the post goes through observedTx instead.
var errGuarded = errors.New("wallet: the observer's guard wants a transaction")

// guardFor is the guard statement for an autocommit post that moves
// playerID's Sparks, or nil when the Store's observer has none.
func (s *Store) guardFor(playerID int64) *guardStmt {
	g, ok := s.observer.(SparksGuard)
	if !ok {
		return nil
	}
	sql, args := g.SparksGuardSQL([]int64{playerID})
	return &guardStmt{sql: sql, args: args}
}

type guardStmt struct {
	sql  string
	args []any
}

// applyGuarded runs the statement sql and the guard g pipelined on s.pool
// in one implicit transaction (one round trip, one commit).
func (s *Store) applyGuarded(ctx context.Context, g *guardStmt, sql string, args []any) (answers, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(g.sql, g.args...)
	br := s.pool.SendBatch(ctx, b)
	var a answers
	rows, err := br.Query()
	if err == nil {
		a, err = collect(rows)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == GuardSQLState {
		return answers{}, errGuarded
	}
	if err != nil {
		return answers{}, classify(err)
	}
	return a, nil
}

// sparksMoved tells the observer which players' Sparks txs moved (the new
// Sparks transactions among them; replays moved nothing).
func (s *Store) sparksMoved(ctx context.Context, tx pgx.Tx, txs ...*Transaction) error {
	players := s.movedPlayers(txs)
	if len(players) == 0 {
		return nil
	}
	if err := s.observer.SparksMovedTx(ctx, tx, players); err != nil {
		return fmt.Errorf("wallet: sparks observer: %w", err)
	}
	return nil
}

// movedPlayers are the players, ascending and once each, whose Sparks txs
// moved; none when the Store has no observer.
func (s *Store) movedPlayers(txs []*Transaction) []int64 {
	if s.observer == nil {
		return nil
	}
	var players []int64
	for _, t := range txs {
		if t != nil && !t.Replayed && t.Currency == Sparks {
			players = append(players, t.PlayerID)
		}
	}
	slices.Sort(players)
	return slices.Compact(players)
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
// whole batch, in tx, of every player whose Sparks it moved. PostManyTx
// alone leaves the observer out.
func (s *Store) PostBatchTx(ctx context.Context, tx pgx.Tx, ps []PostParams) ([]*Transaction, []error, error) {
	out, errs, err := s.PostManyTx(ctx, tx, ps)
	if err == nil {
		err = s.sparksMoved(ctx, tx, out...)
	}
	return out, errs, err
}

// SparksQueuer is what an observer may also implement so that a batch's
// telling rides in a round trip its caller makes anyway:
// QueueSparksMoved queues on b what SparksMovedTx would run for players,
// and the finish it returns, called in tx once b was sent there and closed
// without an error, does the rest (what depends on the queued statement's
// answers), and fails if b was not sent.
type SparksQueuer interface {
	QueueSparksMoved(b *pgx.Batch, playerIDs []int64) (finish func(ctx context.Context, tx pgx.Tx) error)
}

// PostBatchQueuedTx is PostBatchTx for a caller that sends b in tx next
// (the enforcer's funding, which sends its own statements there): the
// observer's telling is queued on b when it is a SparksQueuer, and
// otherwise done now. The caller must call finish once b was sent and
// closed without an error, before committing.
func (s *Store) PostBatchQueuedTx(ctx context.Context, tx pgx.Tx, ps []PostParams, b *pgx.Batch) (
	out []*Transaction, errs []error, finish func(context.Context) error, err error) {
	out, errs, err = s.PostManyTx(ctx, tx, ps)
	if err != nil {
		return nil, nil, nil, err
	}
	finish = func(context.Context) error { return nil }
	players := s.movedPlayers(out)
	q, ok := s.observer.(SparksQueuer)
	switch {
	case len(players) == 0:
	case !ok:
		err = s.sparksMoved(ctx, tx, out...)
	default:
		f := q.QueueSparksMoved(b, players)
		finish = func(ctx context.Context) error {
			if err := f(ctx, tx); err != nil {
				return fmt.Errorf("wallet: sparks observer: %w", err)
			}
			return nil
		}
	}
	return out, errs, finish, err
}
