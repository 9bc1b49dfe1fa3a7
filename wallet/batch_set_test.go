package wallet_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

// TestDebitSetMatchesPostAtATime: a batch of debits (the set-based
// statement) gives every post the answer, balance_after and ledger seq that
// PostTx would give it, post after post in the batch's lock order, over
// many seeded batches: several debits per wallet with the balance running
// out part-way, a wallet that does not exist, a stored key, a key given
// twice. The twin players take the same posts one PostTx at a time.
// Every batch must have gone through the set statement, not its post by
// post fallback (which gives the same answers). Not parallel: it runs
// alone, so the fallback counter moves only by its batches.
func TestDebitSetMatchesPostAtATime(t *testing.T) {
	ctx := context.Background()
	applied0, fallback0 := debitSets(t)
	pool := newPool(t, 4)
	s := wallet.New(pool, wallet.Options{})
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 11))
		set, one := newTwins(t, s, pool, rng)
		ps := set.batch(rng, fmt.Sprintf("set:%d", seed))
		twin := set.translate(ps, one)
		// One post of the batch is stored before it: a replay.
		stored := rng.IntN(len(ps))
		_, errA := s.Post(ctx, ps[stored])
		_, errB := s.Post(ctx, twin[stored])
		require.Equal(t, errA == nil, errB == nil)
		var got []*wallet.Transaction
		var gotErrs []error
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			got, gotErrs, err = s.PostManyTx(ctx, tx, ps)
			return err
		}))
		want, wantErrs := postOneByOne(t, s, pool, twin)
		for i := range ps {
			require.Equal(t, wantErrs[i] == nil, gotErrs[i] == nil, "seed %d post %d: %v vs %v", seed, i, gotErrs[i], wantErrs[i])
			if wantErrs[i] != nil {
				require.ErrorIs(t, gotErrs[i], wantErrs[i], "seed %d post %d", seed, i)
				continue
			}
			require.Equal(t, want[i].Replayed, got[i].Replayed, "seed %d post %d", seed, i)
			require.Equal(t, want[i].Amount, got[i].Amount, "seed %d post %d", seed, i)
			require.Equal(t, want[i].BalanceAfter, got[i].BalanceAfter, "seed %d post %d", seed, i)
		}
		for k := range set.players {
			require.Equal(t, balance(t, pool, one.players[k], wallet.Sparks), balance(t, pool, set.players[k], wallet.Sparks),
				"seed %d wallet %d", seed, k)
			require.Equal(t, seqs(t, pool, one.players[k]), seqs(t, pool, set.players[k]), "seed %d wallet %d", seed, k)
		}
	}
	applied, fallback := debitSets(t)
	require.Equal(t, fallback0, fallback, "no batch fell back to post by post")
	require.Equal(t, applied0+40, applied, "every batch was one set statement")
}

// debitSets reads billing_wallet_debit_sets_total's applied and fallback.
func debitSets(t *testing.T) (applied, fallback float64) {
	t.Helper()
	c := counters(t, "billing_wallet_debit_sets_total", "outcome")
	return c["applied"], c["fallback"]
}

// twins is a set of players whose wallets start alike.
type twins struct{ players []int64 }

// newTwins makes two sets of four players: three with a Sparks wallet of
// the same random balance, one without any wallet.
func newTwins(t *testing.T, s *wallet.Store, pool *pgxpool.Pool, rng *rand.Rand) (a, b twins) {
	t.Helper()
	for k := range 4 {
		pa, pb := newPlayer(t, pool), newPlayer(t, pool)
		if k < 3 {
			amount := 1 + rng.Int64N(300)
			fund(t, s, pa, wallet.Sparks, amount)
			fund(t, s, pb, wallet.Sparks, amount)
		}
		a.players, b.players = append(a.players, pa), append(b.players, pb)
	}
	return a, b
}

// batch draws 12-30 debits over the four players, one key given twice.
func (w twins) batch(rng *rand.Rand, prefix string) []wallet.PostParams {
	n := 12 + rng.IntN(19)
	ps := make([]wallet.PostParams, n)
	for i := range ps {
		ps[i] = wallet.PostParams{PlayerID: w.players[rng.IntN(len(w.players))], Currency: wallet.Sparks,
			Amount: 1 + rng.Int64N(60), Direction: wallet.Debit, Kind: wallet.KindFunding,
			IdempotencyKey: wallet.CallerKey(fmt.Sprintf("%s:%d", prefix, i))}
	}
	ps[n-1] = ps[rng.IntN(n-1)] // a key given twice in the batch
	return ps
}

// translate maps posts of w's players onto o's, with keys of their own.
func (w twins) translate(ps []wallet.PostParams, o twins) []wallet.PostParams {
	out := make([]wallet.PostParams, len(ps))
	for i, p := range ps {
		k := slices.Index(w.players, p.PlayerID)
		p.PlayerID, p.IdempotencyKey = o.players[k], wallet.CallerKey("one:"+p.IdempotencyKey.String())
		out[i] = p
	}
	return out
}

// postOneByOne applies ps with PostTx in one transaction, in the lock order
// PostManyTx uses (player, then batch order), and returns the answers in
// the order of ps.
func postOneByOne(t *testing.T, s *wallet.Store, pool *pgxpool.Pool, ps []wallet.PostParams) ([]*wallet.Transaction, []error) {
	t.Helper()
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ps[a].PlayerID, ps[b].PlayerID) })
	out, errs := make([]*wallet.Transaction, len(ps)), make([]error, len(ps))
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, i := range order {
			out[i], errs[i] = s.PostTx(ctx, tx, ps[i])
		}
		return nil
	}))
	return out, errs
}

// seqs is the ledger seq and balance_after of player's Sparks entries, in
// order: the same post after post whichever path applied them. It also
// requires the entries' transaction ids to ascend with seq, so that a
// wallet's history listed by id (the API's keyset) is its seq order.
func seqs(t *testing.T, pool *pgxpool.Pool, player int64) [][2]int64 {
	t.Helper()
	var ordered bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT coalesce(bool_and(tid > prev), true) FROM (
		SELECT e.transaction_id AS tid, lag(e.transaction_id) OVER (ORDER BY e.seq) AS prev FROM ledger_entries e
		JOIN wallets w ON w.id = e.wallet_id WHERE w.player_id = $1 AND w.currency = 'sparks') x WHERE prev IS NOT NULL`,
		player).Scan(&ordered))
	require.True(t, ordered, "player %d: transaction ids out of seq order", player)
	rows, err := pool.Query(context.Background(), `SELECT e.seq, e.balance_after FROM ledger_entries e
		JOIN wallets w ON w.id = e.wallet_id WHERE w.player_id = $1 AND w.currency = 'sparks' ORDER BY e.seq`, player)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]int64, error) {
		var v [2]int64
		return v, r.Scan(&v[0], &v[1])
	})
	require.NoError(t, err)
	return out
}

// A batch of debits is one round trip (one pipeline holding the set
// statement, which also answers stored keys, between SAVEPOINT and
// RELEASE), however many posts it has, and wallets it touches.
func TestDebitSetIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	traced, qc := tracedPool(t, pool)
	s := wallet.New(traced, wallet.Options{})
	owner, other := newPlayer(t, pool), newPlayer(t, pool)
	fund(t, s, owner, wallet.Sparks, 1000)
	fund(t, s, other, wallet.Sparks, 1000)
	var ps []wallet.PostParams
	for i := range 64 {
		p := owner
		if i%4 == 0 {
			p = other
		}
		ps = append(ps, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 10, Direction: wallet.Debit,
			Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("trips:%d", i))})
	}
	tx := testdb.Begin(t, traced)
	before, batchedBefore := qc.n.Load(), qc.batched.Load()
	out, errs, err := s.PostManyTx(ctx, tx, ps)
	require.NoError(t, err)
	require.Equal(t, int64(1), qc.n.Load()-before, "one pipeline")
	require.Equal(t, int64(3), qc.batched.Load()-batchedBefore, "SAVEPOINT, the set statement, RELEASE")
	for i := range ps {
		require.NoError(t, errs[i])
		require.False(t, out[i].Replayed)
	}
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, int64(1000-48*10), balance(t, pool, owner, wallet.Sparks))
	require.Equal(t, int64(1000-16*10), balance(t, pool, other, wallet.Sparks))
}

// TestDebitSetRace runs 12 batches of the same 40 debits at once, each in
// its own transaction and shuffled order, over wallets that can pay for
// about half of them: each key is applied at most once, every batch that
// got a transaction for a key got the stored one, each balance is its
// funding less what was stored, and the audit (newPool's cleanup) is
// clean. Concurrent winners make set statements fail, so this also drives
// the post-by-post fallback.
func TestDebitSetRace(t *testing.T) {
	t.Parallel()
	const batches, players, perPlayer, funded = 12, 5, 8, 45
	ctx := context.Background()
	pool := newPool(t, batches)
	s := wallet.New(pool, wallet.Options{})
	var ps []wallet.PostParams
	var ids []int64
	for range players {
		p := newPlayer(t, pool)
		ids = append(ids, p)
		fund(t, s, p, wallet.Sparks, funded)
		for k := range perPlayer {
			ps = append(ps, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 5 + int64(k%3), Direction: wallet.Debit,
				Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("setrace:%d:%d", p, k))})
		}
	}
	got := make([]map[string]int64, batches)
	race(batches, func(i int) {
		mine := append([]wallet.PostParams(nil), ps...)
		rand.New(rand.NewPCG(uint64(i), 13)).Shuffle(len(mine), func(a, b int) { mine[a], mine[b] = mine[b], mine[a] })
		got[i] = map[string]int64{}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			out, errs, err := s.PostManyTx(ctx, tx, mine)
			for j := range mine {
				if errs[j] == nil {
					got[i][mine[j].IdempotencyKey.String()] = out[j].ID
				} else {
					require.ErrorIs(t, errs[j], wallet.ErrInsufficientBalance, "batch %d post %d", i, j)
				}
			}
			return err
		}), "batch %d", i)
	})
	stored := map[string]int64{}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, id FROM wallet_transactions WHERE idempotency_key LIKE 'setrace:%'`)
	require.NoError(t, err)
	var key string
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&key, &id}, func() error { stored[key] = id; return nil })
	require.NoError(t, err)
	require.NotEmpty(t, stored)
	for i, g := range got {
		for k, id := range g {
			require.Equal(t, stored[k], id, "batch %d key %s", i, k)
		}
	}
	for _, p := range ids {
		spent := count(t, pool, `SELECT coalesce(-sum(amount), 0) FROM wallet_transactions WHERE player_id = $1 AND idempotency_key LIKE 'setrace:%'`, p)
		require.Equal(t, funded-spent, balance(t, pool, p, wallet.Sparks), "player %d", p)
		require.GreaterOrEqual(t, funded-spent, int64(0))
	}
}

// TestDebitSetConcurrentBatchesOneWallet: 8 batches of different keys at
// once, all debiting the same two wallets (one owner's Marquees funded by
// several workers at midnight), each wallet able to pay for about half of
// them. Every set statement locks the wallets before reading their
// balances, so no update is lost: each balance is its funding less exactly
// what was stored, never negative, and the audit (newPool's cleanup:
// gapless seq, balance_after chains, sums) is clean. No batch may fall back
// to post by post: without the lock, a batch working from a stale balance
// would collide on (wallet_id, seq) and be redone post by post, correct but
// hiding the race. Not parallel, so the fallback counter is its own.
func TestDebitSetConcurrentBatchesOneWallet(t *testing.T) {
	const batches, perBatch, funded = 8, 10, 400
	applied0, fallback0 := debitSets(t)
	ctx := context.Background()
	pool := newPool(t, batches)
	s := wallet.New(pool, wallet.Options{})
	owners := []int64{newPlayer(t, pool), newPlayer(t, pool)}
	for _, p := range owners {
		fund(t, s, p, wallet.Sparks, funded)
	}
	applied := make([]int, batches)
	race(batches, func(i int) {
		var ps []wallet.PostParams
		for k := range perBatch {
			ps = append(ps, wallet.PostParams{PlayerID: owners[k%2], Currency: wallet.Sparks, Amount: 10, Direction: wallet.Debit,
				Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("onewallet:%d:%d", i, k))})
		}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, errs, err := s.PostManyTx(ctx, tx, ps)
			for j, e := range errs {
				if e == nil {
					applied[i]++
				} else {
					require.ErrorIs(t, e, wallet.ErrInsufficientBalance, "batch %d post %d", i, j)
				}
			}
			return err
		}), "batch %d", i)
	})
	total := 0
	for _, n := range applied {
		total += n
	}
	require.Equal(t, 2*funded/10, total, "every Spark spent, none twice: 40 of the 80 debits fit")
	for _, p := range owners {
		spent := count(t, pool, `SELECT coalesce(-sum(amount), 0) FROM wallet_transactions WHERE player_id = $1 AND idempotency_key LIKE 'onewallet:%'`, p)
		require.Equal(t, funded-spent, balance(t, pool, p, wallet.Sparks), "player %d", p)
		require.Zero(t, balance(t, pool, p, wallet.Sparks), "player %d: 40 debits of 10 wanted 400 each", p)
	}
	setsApplied, fallback := debitSets(t)
	require.Equal(t, fallback0, fallback, "no batch fell back to post by post")
	require.Equal(t, applied0+batches, setsApplied)
}
