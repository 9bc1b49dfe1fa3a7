package wallet_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// TestPostManyTxAnswersEachPostLikePostTx puts every kind of answer in one
// batch: each post gets what PostTx would have said, refusals change
// nothing, and the caller's transaction commits the rest.
func TestPostManyTxAnswersEachPostLikePostTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 4)
	s := wallet.New(pool, wallet.Options{})
	rich, poor, fresh := newPlayer(t, pool), newPlayer(t, pool), newPlayer(t, pool)
	fund(t, s, rich, wallet.Sparks, 1000)
	fund(t, s, poor, wallet.Sparks, 10)
	stored, err := s.Debit(ctx, wallet.PostParams{PlayerID: rich, Currency: wallet.Sparks, Amount: 100,
		Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey("stored")})
	require.NoError(t, err)
	fund(t, s, fresh, wallet.Mana, math.MaxInt64-5)

	debit := func(p, amount int64, key string) wallet.PostParams {
		return wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: amount, Direction: wallet.Debit,
			Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(key)}
	}
	ps := []wallet.PostParams{
		debit(rich, 100, "a"),      // 0 applied
		debit(poor, 50, "b"),       // 1 insufficient
		debit(rich, 100, "stored"), // 2 replay of a stored key
		debit(rich, 999, "stored"), // 3 the stored key with another amount
		debit(rich, -5, "c"),       // 4 invalid amount
		{PlayerID: fresh, Currency: wallet.Sparks, Amount: 7, Direction: wallet.Credit, // 5 creates a wallet
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("d")},
		debit(rich, 100, "a"), // 6 the batch's own key again: a replay of 0
		{PlayerID: fresh, Currency: wallet.Mana, Amount: 10, Direction: wallet.Credit, // 7 overflow
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("e")},
		debit(poor, 10, "f"),   // 8 applied after the failures
		debit(999_999, 1, "g"), // 9 no such player: refused
	}
	var out []*wallet.Transaction
	var errs []error
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		out, errs, err = s.PostManyTx(ctx, tx, ps)
		return err
	}))

	require.NoError(t, errs[0])
	require.False(t, out[0].Replayed)
	require.Equal(t, int64(-100), out[0].Amount)
	require.ErrorIs(t, errs[1], wallet.ErrInsufficientBalance)
	require.NoError(t, errs[2])
	require.True(t, out[2].Replayed)
	require.Equal(t, stored.ID, out[2].ID)
	var reused *wallet.KeyReusedError
	require.ErrorAs(t, errs[3], &reused)
	require.Equal(t, "amount", reused.Field)
	require.ErrorIs(t, errs[4], wallet.ErrInvalidAmount)
	require.NoError(t, errs[5])
	require.Equal(t, int64(7), out[5].BalanceAfter)
	require.NoError(t, errs[6])
	require.True(t, out[6].Replayed)
	require.Equal(t, out[0].ID, out[6].ID)
	require.ErrorIs(t, errs[7], wallet.ErrOverflow)
	require.NoError(t, errs[8])
	require.Equal(t, int64(0), out[8].BalanceAfter)
	require.ErrorIs(t, errs[9], wallet.ErrInsufficientBalance, "a debit never creates a wallet")

	require.Equal(t, int64(1000-100-100), balance(t, pool, rich, wallet.Sparks))
	require.Equal(t, int64(0), balance(t, pool, poor, wallet.Sparks))
	require.Equal(t, int64(7), balance(t, pool, fresh, wallet.Sparks))
	require.Equal(t, int64(math.MaxInt64-5), balance(t, pool, fresh, wallet.Mana))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key IN ('b','c','e','g')`))
}

// TestPostManyTxRace runs 12 batches at once over the same 40 keys, each
// batch in its own transaction and its own shuffled order: every key is
// applied exactly once, every batch sees every key (applied or replayed),
// nobody deadlocks, and the audit (newPool's cleanup) is clean.
func TestPostManyTxRace(t *testing.T) {
	t.Parallel()
	const batches, players, perPlayer = 12, 10, 4
	ctx := context.Background()
	pool := newPool(t, batches)
	s := wallet.New(pool, wallet.Options{})
	var ps []wallet.PostParams
	for range players {
		p := newPlayer(t, pool)
		fund(t, s, p, wallet.Sparks, 1000)
		for k := range perPlayer {
			dir := wallet.Debit
			if k%2 == 1 {
				dir = wallet.Credit
			}
			ps = append(ps, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 10, Direction: dir,
				Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("race:%d:%d", p, k))})
		}
	}
	type answer struct {
		ids  map[string]int64
		errs []error
		err  error
	}
	answers := make([]answer, batches)
	race(batches, func(i int) {
		mine := append([]wallet.PostParams(nil), ps...)
		rand.New(rand.NewPCG(uint64(i), 7)).Shuffle(len(mine), func(a, b int) { mine[a], mine[b] = mine[b], mine[a] })
		a := answer{ids: map[string]int64{}}
		a.err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			out, errs, err := s.PostManyTx(ctx, tx, mine)
			for j := range mine {
				if errs[j] == nil {
					a.ids[mine[j].IdempotencyKey.String()] = out[j].ID
				}
			}
			a.errs = errs
			return err
		})
		answers[i] = a
	})
	for i, a := range answers {
		require.NoError(t, a.err, "batch %d", i)
		for j, err := range a.errs {
			require.NoError(t, err, "batch %d post %d", i, j)
		}
		require.Equal(t, answers[0].ids, a.ids, "batch %d answered with other transactions", i)
	}
	require.Equal(t, int64(len(ps)), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key LIKE 'race:%'`))
	require.Equal(t, int64(2*len(ps)), count(t, pool,
		`SELECT count(*) FROM ledger_entries e JOIN wallet_transactions t ON t.id = e.transaction_id WHERE t.idempotency_key LIKE 'race:%'`))
	require.Equal(t, int64(players*1000), count(t, pool, `SELECT sum(balance) FROM wallets WHERE currency = 'sparks'`),
		"two debits and two credits of 10 per player")
}
