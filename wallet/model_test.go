package wallet_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// model is the expected state of a few players that one goroutine owns.
type model struct {
	balances map[int64]map[wallet.Currency]int64
	posts    []modelPost    // applied posts, to replay
	convs    []modelConvert // applied conversions, to replay
	refused  []wallet.PostParams
}

type modelPost struct {
	params wallet.PostParams
	id     int64
}

type modelConvert struct {
	params            wallet.ConvertParams
	debitID, creditID int64
}

// TestRandomizedAgainstModel interleaves credits, debits (also inside
// callers' transactions that sometimes roll back), conversions, replays,
// reused keys and retried refusals from 4 goroutines, each owning its own
// players so that its model is exact, and compares every outcome and the
// final balances. WALLET_MODEL_SEED reruns a given seed.
func TestRandomizedAgainstModel(t *testing.T) {
	t.Parallel()
	seed := uint64(20260101)
	if s := os.Getenv("WALLET_MODEL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seed = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (rerun with WALLET_MODEL_SEED=%d)", seed, seed)
		}
	})
	const goroutines, playersEach, ops, rate = 4, 3, 150, 3
	pool := newPool(t, goroutines)
	s := wallet.New(pool, wallet.Options{SparksPerMana: rate})
	models := make([]*model, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		m := &model{balances: map[int64]map[wallet.Currency]int64{}}
		for range playersEach {
			m.balances[newPlayer(t, pool)] = map[wallet.Currency]int64{}
		}
		models[g] = m
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := range ops {
				if err := m.step(context.Background(), s, pool, rng, fmt.Sprintf("g%d:op%d", g, i), rate); err != nil {
					errs[g] = fmt.Errorf("seed %d goroutine %d op %d: %w", seed, g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for _, m := range models {
		for player, want := range m.balances {
			got, err := s.Balances(context.Background(), player)
			require.NoError(t, err)
			require.Equal(t, want[wallet.Mana], got[wallet.Mana], "seed %d player %d mana", seed, player)
			require.Equal(t, want[wallet.Sparks], got[wallet.Sparks], "seed %d player %d sparks", seed, player)
			report, err := wallet.Audit(context.Background(), pool, wallet.AuditOptions{PlayerID: player})
			require.NoError(t, err)
			require.True(t, report.Clean(), report.String())
		}
	}
}

func (m *model) player(rng *rand.Rand) int64 {
	ids := slices.Sorted(maps.Keys(m.balances)) // map order is random; the pick must not be
	return ids[rng.IntN(len(ids))]
}

func (m *model) step(ctx context.Context, s *wallet.Store, pool *pgxpool.Pool, rng *rand.Rand, key string, rate int64) error {
	currencies := []wallet.Currency{wallet.Mana, wallet.Sparks}
	switch op := rng.IntN(10); {
	case op <= 1: // credit
		p := wallet.PostParams{PlayerID: m.player(rng), Currency: currencies[rng.IntN(2)], Amount: 1 + rng.Int64N(50),
			Direction: wallet.Credit, Kind: wallet.KindPurchase, IdempotencyKey: wallet.CallerKey(key)}
		return m.post(ctx, s, p, nil)
	case op <= 3: // debit
		p := wallet.PostParams{PlayerID: m.player(rng), Currency: currencies[rng.IntN(2)], Amount: 1 + rng.Int64N(60),
			Direction: wallet.Debit, Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(key)}
		return m.post(ctx, s, p, nil)
	case op == 4: // a debit in a caller's transaction that may roll back
		p := wallet.PostParams{PlayerID: m.player(rng), Currency: wallet.Sparks, Amount: 1 + rng.Int64N(40),
			Direction: wallet.Debit, Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(key)}
		return m.post(ctx, s, p, &txChoice{pool: pool, commit: rng.IntN(3) > 0})
	case op == 5: // convert
		return m.convert(ctx, s, wallet.ConvertParams{PlayerID: m.player(rng), Mana: 1 + rng.Int64N(20), IdempotencyKey: wallet.CallerKey(key)}, rate)
	case op == 6 && len(m.posts) > 0: // replay a post
		return m.post(ctx, s, m.posts[rng.IntN(len(m.posts))].params, nil)
	case op == 7 && len(m.convs) > 0: // replay a conversion
		return m.convert(ctx, s, m.convs[rng.IntN(len(m.convs))].params, rate)
	case op == 8 && len(m.posts) > 0: // reuse a key with another amount
		p := m.posts[rng.IntN(len(m.posts))].params
		p.Amount++
		_, err := s.Post(ctx, p)
		if !errors.Is(err, wallet.ErrIdempotencyKeyReused) {
			return fmt.Errorf("reused key %q: got %v", p.IdempotencyKey, err)
		}
		return nil
	case op == 9 && len(m.refused) > 0: // retry a refused debit
		i := rng.IntN(len(m.refused))
		p := m.refused[i]
		m.refused = append(m.refused[:i], m.refused[i+1:]...)
		return m.post(ctx, s, p, nil)
	}
	return nil
}

type txChoice struct {
	pool   *pgxpool.Pool
	commit bool
}

// post applies p and checks the outcome against the model.
func (m *model) post(ctx context.Context, s *wallet.Store, p wallet.PostParams, in *txChoice) error {
	var prior *modelPost
	for i := range m.posts {
		if m.posts[i].params.IdempotencyKey == p.IdempotencyKey {
			prior = &m.posts[i]
		}
	}
	var t *wallet.Transaction
	var err error
	committed := true
	if in == nil {
		t, err = s.Post(ctx, p)
	} else {
		tx, berr := in.pool.Begin(ctx)
		if berr != nil {
			return berr
		}
		t, err = s.PostTx(ctx, tx, p)
		committed = in.commit
		if in.commit {
			if cerr := tx.Commit(ctx); cerr != nil {
				return cerr
			}
		} else if rerr := tx.Rollback(ctx); rerr != nil {
			return rerr
		}
	}
	bal := m.balances[p.PlayerID]
	delta := p.Amount
	if p.Direction == wallet.Debit {
		delta = -p.Amount
	}
	switch {
	case prior != nil:
		if err != nil || !t.Replayed || t.ID != prior.id {
			return fmt.Errorf("replay of %q: got %+v, %v", p.IdempotencyKey, t, err)
		}
	case bal[p.Currency]+delta < 0:
		if !errors.Is(err, wallet.ErrInsufficientBalance) {
			return fmt.Errorf("debit %d of %d %s: want insufficient, got %+v, %v", p.Amount, bal[p.Currency], p.Currency, t, err)
		}
		if committed {
			m.refused = append(m.refused, p)
		}
	default:
		if err != nil || t.Replayed || t.BalanceAfter != bal[p.Currency]+delta {
			return fmt.Errorf("post %+v on %d: got %+v, %v", p, bal[p.Currency], t, err)
		}
		if committed {
			bal[p.Currency] += delta
			m.posts = append(m.posts, modelPost{params: p, id: t.ID})
		}
	}
	return nil
}

func (m *model) convert(ctx context.Context, s *wallet.Store, p wallet.ConvertParams, rate int64) error {
	var prior *modelConvert
	for i := range m.convs {
		if m.convs[i].params.IdempotencyKey == p.IdempotencyKey {
			prior = &m.convs[i]
		}
	}
	c, err := s.Convert(ctx, p)
	bal := m.balances[p.PlayerID]
	switch {
	case prior != nil:
		if err != nil || !c.Replayed || c.ManaDebit.ID != prior.debitID || c.SparksCredit.ID != prior.creditID {
			return fmt.Errorf("replay of conversion %q: got %+v, %v", p.IdempotencyKey, c, err)
		}
	case bal[wallet.Mana] < p.Mana:
		if !errors.Is(err, wallet.ErrInsufficientBalance) {
			return fmt.Errorf("conversion of %d with %d Mana: want insufficient, got %v", p.Mana, bal[wallet.Mana], err)
		}
	default:
		if err != nil || c.Replayed || c.ManaDebit.BalanceAfter != bal[wallet.Mana]-p.Mana ||
			c.SparksCredit.BalanceAfter != bal[wallet.Sparks]+p.Mana*rate {
			return fmt.Errorf("conversion %+v on %v: got %+v, %v", p, bal, c, err)
		}
		bal[wallet.Mana] -= p.Mana
		bal[wallet.Sparks] += p.Mana * rate
		m.convs = append(m.convs, modelConvert{params: p, debitID: c.ManaDebit.ID, creditID: c.SparksCredit.ID})
	}
	return nil
}
