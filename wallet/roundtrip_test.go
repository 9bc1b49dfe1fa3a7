package wallet_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// replayDeadline bounds a replay made while holdWallet holds the lock: a
// replay that queued behind the lock would wait until it, so only a stuck
// test reaches it, however busy the machine.
const replayDeadline = time.Minute

// holdWallet locks player's wallet in c in a transaction that stays open
// until the test ends, as a long funding batch would.
func holdWallet(t *testing.T, pool *pgxpool.Pool, player int64, c wallet.Currency) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	var id int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM wallets WHERE player_id = $1 AND currency = $2 FOR UPDATE`,
		player, string(c)).Scan(&id))
}

// A replay answers from the stored transaction without touching the wallet
// row: it must not queue behind a transaction holding the wallet's lock,
// while a new key must (which proves the lock is really held).
func TestReplayDoesNotWaitForTheWalletLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 4)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	credit := wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 100, Direction: wallet.Credit,
		Kind: wallet.KindPurchase, IdempotencyKey: wallet.CallerKey("rt:credit")}
	debit := wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 30, Direction: wallet.Debit,
		Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey("rt:debit")}
	first := map[string]*wallet.Transaction{}
	for _, pp := range []wallet.PostParams{credit, debit} {
		tr, err := s.Post(ctx, pp)
		require.NoError(t, err)
		first[pp.IdempotencyKey.String()] = tr
	}
	holdWallet(t, pool, p, wallet.Sparks)

	// The lock is held until the test ends, so a replay that queued
	// behind it would never answer: answering at all, under a deadline
	// only a stuck test reaches, is the proof.
	for _, pp := range []wallet.PostParams{credit, debit} {
		qctx, cancel := context.WithTimeout(ctx, replayDeadline)
		tr, err := s.Post(qctx, pp)
		cancel()
		require.NoError(t, err, "replay of %s waited for the wallet lock", pp.IdempotencyKey)
		require.True(t, tr.Replayed)
		require.Equal(t, first[pp.IdempotencyKey.String()].ID, tr.ID)

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		qctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		tr, err = s.PostTx(qctx, tx, pp)
		cancel()
		require.NoError(t, err, pp.IdempotencyKey)
		require.True(t, tr.Replayed)
		require.NoError(t, tx.Rollback(ctx))
	}

	// A reused key with other parameters is refused, also without waiting.
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	other := debit
	other.Amount = 31
	_, err := s.Post(qctx, other)
	var reused *wallet.KeyReusedError
	require.ErrorAs(t, err, &reused)
	require.Equal(t, "amount", reused.Field)

	// A new key does queue behind the lock.
	fresh := debit
	fresh.IdempotencyKey = wallet.CallerKey("rt:fresh")
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	_, err = s.Post(short, fresh)
	require.Error(t, err, "a new key must wait for the wallet lock")
	require.Equal(t, int64(0), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = 'rt:fresh'`))
}

// queryCounter counts the statements and batches a pool sends (n), and
// the statements inside batches (batched), and keeps the last statement's
// text sent on its own.
type queryCounter struct {
	n, batched atomic.Int64
	last       atomic.Value
}

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	q.last.Store(d.SQL)
	return ctx
}
func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (q *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	q.n.Add(1)
	return ctx
}
func (q *queryCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	q.batched.Add(1)
}
func (q *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// tracedPool is a second pool on pool's database whose statements and
// batches are counted; it is closed with the test.
func tracedPool(t *testing.T, pool *pgxpool.Pool) (*pgxpool.Pool, *queryCounter) {
	t.Helper()
	cfg := pool.Config().Copy()
	qc := &queryCounter{}
	cfg.ConnConfig.Tracer = qc
	traced, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	return traced, qc
}

// Post is one round trip, first post or replay; PostTx is one batch.
func TestPostIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	traced, qc := tracedPool(t, pool)
	s := wallet.New(traced, wallet.Options{})
	p := newPlayer(t, pool)

	trips := func(fn func()) int64 {
		before := qc.n.Load()
		fn()
		return qc.n.Load() - before
	}
	pp := wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 5, Direction: wallet.Credit,
		Kind: wallet.KindPurchase, IdempotencyKey: wallet.CallerKey("trip:1")}
	for _, want := range []bool{false, true} {
		require.Equal(t, int64(1), trips(func() {
			tr, err := s.Post(ctx, pp)
			require.NoError(t, err)
			require.Equal(t, want, tr.Replayed)
		}))
	}
	// A debit on its own runs the statement the wallet exports for the
	// benchmarks' baseline, first post and replay alike.
	debit := pp
	debit.Direction, debit.IdempotencyKey = wallet.Debit, wallet.CallerKey("trip:debit")
	for range 2 {
		_, err := s.Post(ctx, debit)
		require.NoError(t, err)
		require.Equal(t, wallet.DebitStatement(), qc.last.Load())
	}
	tx, err := traced.Begin(ctx)
	require.NoError(t, err)
	pp.IdempotencyKey = wallet.CallerKey("trip:2")
	for _, want := range []bool{false, true} {
		require.Equal(t, int64(1), trips(func() {
			tr, err := s.PostTx(ctx, tx, pp)
			require.NoError(t, err)
			require.Equal(t, want, tr.Replayed)
		}))
	}
	require.NoError(t, tx.Commit(ctx))
}

// A conversion is one statement: one round trip on its own, one batch in
// a caller's transaction; its replay does not wait for the Mana wallet.
func TestConvertIsOneRoundTripAndReplaysWithoutTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 4)
	traced, qc := tracedPool(t, pool)
	s := wallet.New(traced, wallet.Options{SparksPerMana: 3})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 100)

	params := wallet.ConvertParams{PlayerID: p, Mana: 10, IdempotencyKey: wallet.CallerKey("conv:trip")}
	before := qc.n.Load()
	c, err := s.Convert(ctx, params)
	require.NoError(t, err)
	require.Equal(t, int64(1), qc.n.Load()-before)
	require.False(t, c.Replayed)
	require.Equal(t, int64(-10), c.ManaDebit.Amount)
	require.Equal(t, int64(30), c.SparksCredit.Amount)

	tx, err := traced.Begin(ctx)
	require.NoError(t, err)
	before = qc.n.Load()
	c2, err := s.ConvertTx(ctx, tx, wallet.ConvertParams{PlayerID: p, Mana: 5, IdempotencyKey: wallet.CallerKey("conv:trip:tx")})
	require.NoError(t, err)
	require.Equal(t, int64(1), qc.n.Load()-before)
	require.Equal(t, int64(15), c2.SparksCredit.Amount)
	require.NoError(t, tx.Commit(ctx))

	holdWallet(t, pool, p, wallet.Mana) // until the test ends
	qctx, cancel := context.WithTimeout(ctx, replayDeadline)
	defer cancel()
	again, err := s.Convert(qctx, params)
	require.NoError(t, err, "a replayed conversion waited for the wallet lock")
	require.True(t, again.Replayed)
	require.Equal(t, c.ManaDebit.ID, again.ManaDebit.ID)
	require.Equal(t, c.SparksCredit.ID, again.SparksCredit.ID)
	require.Equal(t, int64(85), balance(t, pool, p, wallet.Mana))
	require.Equal(t, int64(45), balance(t, pool, p, wallet.Sparks))
}

// A conversion key whose Mana leg's key a plain post already used (only
// possible before leg keys were reserved) is a reuse: refused, and neither
// wallet moves.
func TestConvertOverALoneLegIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 100)
	_, err := s.Debit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 1, Kind: wallet.KindAdjustment,
		IdempotencyKey: wallet.CallerKey("lone" + wallet.ManaDebitSuffix)})
	require.ErrorIs(t, err, wallet.ErrReservedKey, "a plain post may not take a leg's key")
	takeKey(t, s, pool, p, wallet.Mana, wallet.Debit, "lone"+wallet.ManaDebitSuffix)
	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 10, IdempotencyKey: wallet.CallerKey("lone")})
	require.ErrorIs(t, err, wallet.ErrIdempotencyKeyReused)
	require.Equal(t, int64(99), balance(t, pool, p, wallet.Mana))
	require.Equal(t, int64(0), balance(t, pool, p, wallet.Sparks))
}
