package wallet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// recorder is a SparksObserver that keeps every call's players, and
// proves it runs in the posting transaction: it writes a row there, which
// must commit or roll back with the post.
type recorder struct {
	mu    sync.Mutex
	calls [][]int64
	fail  error
}

func (r *recorder) SparksMovedTx(ctx context.Context, tx pgx.Tx, players []int64) error {
	r.mu.Lock()
	r.calls = append(r.calls, players)
	fail := r.fail
	r.mu.Unlock()
	if _, err := tx.Exec(ctx, `INSERT INTO low_balance_state (player_id, low, crossings)
		SELECT unnest($1::bigint[]), false, 0 ON CONFLICT (player_id) DO UPDATE SET crossings = low_balance_state.crossings + 2`, players); err != nil {
		return err
	}
	return fail
}

func (r *recorder) take() [][]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

// TestObserverToldOncePerSparksMovement: the observer hears of every post,
// conversion and batch that moved Sparks, once, in its transaction; never
// of a replay, a refusal or Mana; its error fails the post and rolls it back.
func TestObserverToldOncePerSparksMovement(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx := context.Background()
	r := &recorder{}
	s := wallet.New(pool, wallet.Options{SparksPerMana: 2, Observer: r})
	a, b := newPlayer(t, pool), newPlayer(t, pool)
	post := func(p int64, c wallet.Currency, d wallet.Direction, amount int64, key string) (*wallet.Transaction, error) {
		return s.Post(ctx, wallet.PostParams{PlayerID: p, Currency: c, Direction: d, Amount: amount,
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(key)})
	}

	_, err := post(a, wallet.Sparks, wallet.Credit, 100, "a1")
	require.NoError(t, err)
	require.Equal(t, [][]int64{{a}}, r.take(), "an autocommit Sparks post")
	_, err = post(a, wallet.Sparks, wallet.Credit, 100, "a1")
	require.NoError(t, err)
	_, err = post(a, wallet.Mana, wallet.Credit, 10, "m1")
	require.NoError(t, err)
	_, err = post(b, wallet.Sparks, wallet.Debit, 1, "refused")
	require.ErrorIs(t, err, wallet.ErrInsufficientBalance)
	require.Empty(t, r.take(), "a replay, a Mana post, a refusal")

	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: b, Mana: 1, IdempotencyKey: wallet.CallerKey("c1")})
	require.Error(t, err, "b has no Mana")
	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: a, Mana: 5, IdempotencyKey: wallet.CallerKey("c1")})
	require.NoError(t, err)
	require.Equal(t, [][]int64{{a}}, r.take(), "a conversion")

	fund(t, s, b, wallet.Sparks, 10)
	r.take()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	var ps []wallet.PostParams
	for i, p := range []int64{b, a, b, a, a} {
		ps = append(ps, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Direction: wallet.Debit, Amount: 1,
			Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("batch-%d", i))})
	}
	_, errs, err := s.PostBatchTx(ctx, tx, ps)
	require.NoError(t, err)
	require.Equal(t, make([]error, len(ps)), errs)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, [][]int64{{min(a, b), max(a, b)}}, r.take(), "one call per batch, players once, in order")

	before := balance(t, pool, a, wallet.Sparks)
	r.fail = errors.New("planted")
	_, err = post(a, wallet.Sparks, wallet.Debit, 1, "fails")
	require.ErrorIs(t, err, r.fail)
	require.Equal(t, before, balance(t, pool, a, wallet.Sparks), "the failed observer rolled the post back")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = 'fails'`))
	// Each committed call for a wrote in its transaction: inserted at 0,
	// then +2 by the conversion and +2 by the batch; the failed one is gone.
	require.Equal(t, int64(4), count(t, pool, `SELECT crossings FROM low_balance_state WHERE player_id = $1`, a))
}

// guarded is a recorder whose guard fails while fail is set, and whose
// guard statement errors (not as a guard) while broken is set.
type guarded struct {
	recorder
	fail, broken bool
}

func (g *guarded) SparksGuardSQL(players []int64) (string, []any) {
	if g.broken {
		return `SELECT 1/0 FROM unnest($1::bigint[])`, []any{players}
	}
	return `SELECT ` + wallet.SQLGuardFailed(`'planted ' || p`) + ` FROM unnest($1::bigint[]) p WHERE $2::boolean`,
		[]any{players, g.fail}
}

// TestGuardKeepsAutocommitPostsOneStatement: with a SparksGuard observer,
// an autocommit Sparks post or conversion whose guard passes commits
// without telling the observer; one whose guard fails is rolled back and
// made again in a transaction that tells it, once; a guard statement that
// errors otherwise fails the post and leaves nothing behind (the post and
// its guard are one implicit transaction).
func TestGuardKeepsAutocommitPostsOneStatement(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx := context.Background()
	g := &guarded{}
	s := wallet.New(pool, wallet.Options{Observer: g})
	p := newPlayer(t, pool)
	post := func(amount int64, key string) (*wallet.Transaction, error) {
		return s.Post(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Direction: wallet.Credit, Amount: amount,
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(key)})
	}

	_, err := post(100, "passes")
	require.NoError(t, err)
	require.Empty(t, g.take(), "a passing guard: the observer has nothing to say")
	require.Equal(t, int64(100), balance(t, pool, p, wallet.Sparks))

	g.fail = true
	tx, err := post(10, "fails")
	require.NoError(t, err)
	require.False(t, tx.Replayed)
	require.Equal(t, [][]int64{{p}}, g.take(), "a failing guard: posted again, telling the observer")
	require.Equal(t, int64(110), balance(t, pool, p, wallet.Sparks))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = 'fails'`))

	again, err := post(10, "fails")
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, tx.ID, again.ID)
	require.Empty(t, g.take(), "a replay is never told, even after its guard failed")

	fund(t, s, p, wallet.Mana, 5)
	g.take()
	c, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 5, IdempotencyKey: wallet.CallerKey("conv")})
	require.NoError(t, err)
	require.False(t, c.Replayed)
	require.Equal(t, [][]int64{{p}}, g.take(), "a conversion whose guard fails")
	g.fail = false
	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 1, IdempotencyKey: wallet.CallerKey("conv-2")})
	require.Error(t, err, "no Mana left")

	g.broken = true
	_, err = post(7, "broken")
	require.Error(t, err)
	require.NotErrorIs(t, err, wallet.ErrInsufficientBalance)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = 'broken'`),
		"the guard's error rolled its post back")
	require.Equal(t, int64(115), balance(t, pool, p, wallet.Sparks))
	require.Empty(t, g.take())
}

// queuer is a recorder that queues its write on the caller's batch.
type queuer struct{ recorder }

func (q *queuer) QueueSparksMoved(b *pgx.Batch, players []int64) func(context.Context, pgx.Tx) error {
	sent := false
	b.Queue(`INSERT INTO low_balance_state (player_id, low, crossings) SELECT unnest($1::bigint[]), false, 0
		ON CONFLICT (player_id) DO UPDATE SET crossings = low_balance_state.crossings + 2`, players).Exec(
		func(pgconn.CommandTag) error { sent = true; return nil })
	return func(_ context.Context, _ pgx.Tx) error {
		if !sent {
			return errors.New("queued but not sent")
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		q.calls = append(q.calls, players)
		return nil
	}
}

// TestPostBatchQueuedTx: a SparksQueuer's telling is queued on the
// caller's batch and finished after it is sent (players once, in order,
// replays left out); its finish fails when the batch was never sent; an
// observer that cannot queue is told at once, as PostBatchTx tells it.
func TestPostBatchQueuedTx(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	ctx := context.Background()
	q := &queuer{}
	s := wallet.New(pool, wallet.Options{Observer: q})
	a, b := newPlayer(t, pool), newPlayer(t, pool)
	fund(t, s, a, wallet.Sparks, 10)
	fund(t, s, b, wallet.Sparks, 10)
	q.take()
	debits := func(prefix string, players ...int64) []wallet.PostParams {
		var ps []wallet.PostParams
		for i, p := range players {
			ps = append(ps, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Direction: wallet.Debit, Amount: 1,
				Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("%s-%d", prefix, i))})
		}
		return ps
	}
	run := func(ps []wallet.PostParams, send bool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			_, _, finish, err := s.PostBatchQueuedTx(ctx, tx, ps, batch)
			if err != nil {
				return err
			}
			if send && batch.Len() > 0 {
				if err := tx.SendBatch(ctx, batch).Close(); err != nil {
					return err
				}
			}
			return finish(ctx)
		})
	}
	require.NoError(t, run(debits("q", b, a, b), true))
	require.Equal(t, [][]int64{{min(a, b), max(a, b)}}, q.take())
	require.Equal(t, int64(2), count(t, pool, `SELECT crossings FROM low_balance_state WHERE player_id = $1`, a),
		"inserted at 0 when a was funded, +2 by the sent batch")
	require.NoError(t, run(debits("q", b, a, b), true), "replays")
	require.Empty(t, q.take(), "replays moved nothing")
	err := run(debits("unsent", a), false)
	require.ErrorContains(t, err, "queued but not sent")
	require.Equal(t, int64(9), balance(t, pool, a, wallet.Sparks), "the unsent batch's debit rolled back with its transaction")

	r := &recorder{}
	s = wallet.New(pool, wallet.Options{Observer: r})
	require.NoError(t, run(debits("r", a), false), "nothing queued: told at once")
	require.Equal(t, [][]int64{{a}}, r.take())
}
