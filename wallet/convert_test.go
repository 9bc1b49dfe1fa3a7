package wallet_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

func TestConvert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{SparksPerMana: 3})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 100)

	c, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 40, IdempotencyKey: wallet.CallerKey("conv:1")})
	require.NoError(t, err)
	require.False(t, c.Replayed)
	require.Equal(t, int64(-40), c.ManaDebit.Amount)
	require.Equal(t, int64(60), c.ManaDebit.BalanceAfter)
	require.Equal(t, "conv:1"+wallet.ManaDebitSuffix, c.ManaDebit.IdempotencyKey)
	require.Equal(t, int64(120), c.SparksCredit.Amount)
	require.Equal(t, int64(120), c.SparksCredit.BalanceAfter)
	require.Equal(t, "conv:1"+wallet.SparksCreditSuffix, c.SparksCredit.IdempotencyKey)

	again, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 40, IdempotencyKey: wallet.CallerKey("conv:1")})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, c.ManaDebit.ID, again.ManaDebit.ID)
	require.Equal(t, c.SparksCredit.ID, again.SparksCredit.ID)

	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 41, IdempotencyKey: wallet.CallerKey("conv:1")})
	var kr *wallet.KeyReusedError
	require.True(t, errors.As(err, &kr), "got %v", err)
	require.Equal(t, "amount", kr.Field)

	// A plain post may not take a leg's key; one that did (before keys
	// were reserved) is a reuse of the parent key.
	_, err = s.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1, Kind: wallet.KindAdjustment,
		IdempotencyKey: wallet.CallerKey("conv:2" + wallet.SparksCreditSuffix)})
	require.ErrorIs(t, err, wallet.ErrReservedKey)
	takeKey(t, s, pool, p, wallet.Sparks, wallet.Credit, "conv:2"+wallet.SparksCreditSuffix)
	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 1, IdempotencyKey: wallet.CallerKey("conv:2")})
	require.ErrorIs(t, err, wallet.ErrIdempotencyKeyReused)

	// Inside a caller's transaction.
	tx := testdb.Begin(t, pool)
	inTx, err := s.ConvertTx(ctx, tx, wallet.ConvertParams{PlayerID: p, Mana: 10, IdempotencyKey: wallet.CallerKey("conv:3")})
	require.NoError(t, err)
	_, err = s.ConvertTx(ctx, tx, wallet.ConvertParams{PlayerID: p, Mana: 1000, IdempotencyKey: wallet.CallerKey("conv:4")})
	require.ErrorIs(t, err, wallet.ErrInsufficientBalance)
	require.NoError(t, tx.Commit(ctx))
	require.False(t, inTx.Replayed)

	require.Equal(t, int64(50), balance(t, pool, p, wallet.Mana))
	require.Equal(t, int64(151), balance(t, pool, p, wallet.Sparks))

	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 0, IdempotencyKey: wallet.CallerKey("conv:5")})
	require.ErrorIs(t, err, wallet.ErrInvalidAmount)
	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: math.MaxInt64/3 + 1, IdempotencyKey: wallet.CallerKey("conv:6")})
	require.ErrorIs(t, err, wallet.ErrOverflow)
}

func TestConvertLargerThanBalanceChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{SparksPerMana: 2})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 10)
	fund(t, s, p, wallet.Sparks, 5)
	before := count(t, pool, `SELECT count(*) FROM ledger_entries`)
	_, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 11, IdempotencyKey: wallet.CallerKey("big")})
	require.ErrorIs(t, err, wallet.ErrInsufficientBalance)
	require.Equal(t, int64(10), balance(t, pool, p, wallet.Mana))
	require.Equal(t, int64(5), balance(t, pool, p, wallet.Sparks))
	require.Equal(t, before, count(t, pool, `SELECT count(*) FROM ledger_entries`))
	require.Equal(t, int64(1), count(t, pool, `SELECT seq FROM wallets WHERE player_id = $1 AND currency = 'mana'`, p))

	// A failing Sparks leg rolls the Mana leg back: overflow the Sparks wallet.
	fund(t, s, p, wallet.Sparks, math.MaxInt64-5)
	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 1, IdempotencyKey: wallet.CallerKey("overflow")})
	require.ErrorIs(t, err, wallet.ErrOverflow)
	require.Equal(t, int64(10), balance(t, pool, p, wallet.Mana))
	require.Equal(t, int64(0), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`))
	_, err = s.Debit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: math.MaxInt64, Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("drain")})
	require.NoError(t, err)
}

func TestConvertSameKeyRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 20
	pool := newPool(t, n)
	s := wallet.New(pool, wallet.Options{SparksPerMana: 5})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 30) // room for exactly one conversion of 20
	results, errs := make([]*wallet.Conversion, n), make([]error, n)
	race(n, func(i int) {
		results[i], errs[i] = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 20, IdempotencyKey: wallet.CallerKey("conv:race")})
	})
	replays := 0
	for i, err := range errs {
		require.NoError(t, err, "caller %d", i)
		require.Equal(t, results[0].ManaDebit.ID, results[i].ManaDebit.ID)
		require.Equal(t, results[0].SparksCredit.ID, results[i].SparksCredit.ID)
		if results[i].Replayed {
			replays++
		}
	}
	require.Equal(t, n-1, replays)
	require.Equal(t, int64(2), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`))
	require.Equal(t, int64(10), balance(t, pool, p, wallet.Mana))
	require.Equal(t, int64(100), balance(t, pool, p, wallet.Sparks))
}

// Conversions (lock Mana then Sparks), funding debits (Sparks only, also in
// callers' transactions) and purchases (Mana only) racing on one player:
// every operation ends with success or a refusal, never a deadlock.
func TestMixedOperationsNeverDeadlock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const workers, perWorker = 8, 250
	pool := newPool(t, workers)
	s := wallet.New(pool, wallet.Options{SparksPerMana: 2})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 500)
	fund(t, s, p, wallet.Sparks, 500)

	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range perWorker {
				key := fmt.Sprintf("mixed:%d:%d", w, i)
				var err error
				switch rng.IntN(4) {
				case 0:
					_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 1 + rng.Int64N(5), IdempotencyKey: wallet.CallerKey(key)})
				case 1:
					_, err = s.Debit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1 + rng.Int64N(8),
						Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(key)})
				case 2:
					err = debitInTx(ctx, s, pool, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1 + rng.Int64N(8),
						Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(key)})
				case 3:
					_, err = s.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 1 + rng.Int64N(6),
						Kind: wallet.KindPurchase, IdempotencyKey: wallet.CallerKey(key)})
				}
				outcome := "ok"
				if errors.Is(err, wallet.ErrInsufficientBalance) {
					outcome = "insufficient"
				} else if err != nil {
					outcome = err.Error()
				}
				mu.Lock()
				outcomes[outcome]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "operations hung")
	total := 0
	for o, n := range outcomes {
		require.Contains(t, []string{"ok", "insufficient"}, o, "%d operations failed", n)
		total += n
	}
	require.Equal(t, workers*perWorker, total)
	require.Positive(t, outcomes["ok"])
}

// debitInTx is how the enforcer funds a day: the debit and its own rows in
// one transaction.
func debitInTx(ctx context.Context, s *wallet.Store, pool *pgxpool.Pool, p wallet.PostParams) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := s.DebitTx(ctx, tx, p); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// A player who owes Mana may not convert, whoever asks (Convert and
// ConvertTx alike): *OutstandingDebtError with the debt, before the
// balance (refused for the debt with Mana enough and with too little), and
// nothing moves. A conversion made before the debt still replays; once
// the debt is forgiven the player converts again.
func TestConvertRefusedWhileOwing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 3)
	s := wallet.New(pool, wallet.Options{SparksPerMana: 2})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 10)
	done, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 4, IdempotencyKey: wallet.CallerKey("before")})
	require.NoError(t, err)
	clawback(t, s, pool, p, 20, "cb") // 6 Mana, 8 Sparks (4 Mana's worth), 10 owed
	fund(t, s, p, wallet.Mana, 50)    // a credit that settles nothing: Mana beside the debt
	before := snapshot(t, pool)
	for _, mana := range []int64{5, 500} {
		_, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: mana, IdempotencyKey: wallet.CallerKey("while")})
		var owed *wallet.OutstandingDebtError
		require.ErrorAs(t, err, &owed, "%d Mana", mana)
		require.Equal(t, int64(10), owed.Mana)
		tx := testdb.Begin(t, pool)
		_, err = s.ConvertTx(ctx, tx, wallet.ConvertParams{PlayerID: p, Mana: mana, IdempotencyKey: wallet.CallerKey("while-tx")})
		require.ErrorIs(t, err, wallet.ErrOutstandingDebt, "%d Mana", mana)
		require.NoError(t, tx.Commit(ctx), "the caller's transaction stays usable")
	}
	require.Equal(t, before, snapshot(t, pool))
	again, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 4, IdempotencyKey: wallet.CallerKey("before")})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, done.ManaDebit.ID, again.ManaDebit.ID)

	_, err = s.ForgiveDebt(ctx, p, "ops-1", "support")
	require.NoError(t, err)
	_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 5, IdempotencyKey: wallet.CallerKey("while")})
	require.NoError(t, err)
	require.Equal(t, int64(45), balance(t, pool, p, wallet.Mana))
}

// Conversions racing a clawback that opens a debt, while plain credits
// keep Mana in the wallet: no conversion happens while the debt is open.
// Every conversion's Mana debit comes before the clawback in the Mana
// wallet's ledger order (its seq), and every conversion asked after it is
// refused for the debt, never for the balance.
func TestConvertNeverWhileADebtIsOpen(t *testing.T) {
	t.Parallel()
	const converters, funders, rounds = 6, 2, 60
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := newPool(t, converters+funders+2)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 200)
	var converted, owing sync.WaitGroup
	converted.Add(1)
	var once sync.Once
	refused := make([]int, converters)
	var wg sync.WaitGroup
	for c := range converters {
		wg.Go(func() {
			for i := range rounds {
				_, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 1, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("race:%d:%d", c, i))})
				switch {
				case err == nil:
					once.Do(converted.Done)
				case errors.Is(err, wallet.ErrOutstandingDebt):
					refused[c]++
				default:
					require.NoError(t, err)
				}
			}
		})
	}
	owing.Add(1)
	wg.Go(func() {
		defer owing.Done()
		converted.Wait()
		clawback(t, s, pool, p, 100_000, "race-cb")
	})
	for f := range funders {
		wg.Go(func() {
			for i := range rounds {
				_, err := s.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 5, Kind: wallet.KindAdjustment,
					IdempotencyKey: wallet.CallerKey(fmt.Sprintf("race-fund:%d:%d", f, i))})
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err())
	// The Mana wallet's order: the clawback's debt leg against the last
	// conversion.
	seqOf := func(where string) int64 {
		return count(t, pool, `SELECT coalesce(max(e.seq), 0) FROM ledger_entries e JOIN wallet_transactions t ON t.id = e.transaction_id
			WHERE e.wallet_id IS NOT NULL AND t.currency = 'mana' AND t.player_id = $1 AND `+where, p)
	}
	debtAt, lastConversion := seqOf(`t.kind = 'debt'`), seqOf(`t.kind = 'conversion'`)
	require.Positive(t, debtAt, "the clawback opened a debt")
	require.Positive(t, lastConversion)
	require.Less(t, lastConversion, debtAt, "a conversion after the debt opened")
	total := 0
	for _, n := range refused {
		total += n
	}
	require.Positive(t, total, "conversions were asked while the debt was open")
	require.Positive(t, debtOf(t, pool, p))
}
