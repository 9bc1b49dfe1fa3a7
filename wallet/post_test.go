package wallet_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

func TestPostCreditDebitAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 4)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)

	c, err := s.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 100,
		Kind: wallet.KindPurchase, Reference: "order:1", IdempotencyKey: wallet.FulfilmentKey(1)})
	require.NoError(t, err)
	require.False(t, c.Replayed)
	require.Equal(t, int64(100), c.Amount)
	require.Equal(t, int64(100), c.BalanceAfter)
	require.Equal(t, wallet.Mana, c.Currency)
	require.Equal(t, p, c.PlayerID)
	require.NotZero(t, c.WalletID)

	d, err := s.Debit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 30,
		Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("adj:1")})
	require.NoError(t, err)
	require.Equal(t, int64(-30), d.Amount)
	require.Equal(t, int64(70), d.BalanceAfter)
	require.Equal(t, c.WalletID, d.WalletID)

	again, err := s.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 100,
		Kind: wallet.KindPurchase, Reference: "order:1", IdempotencyKey: wallet.FulfilmentKey(1)})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, c.ID, again.ID)
	require.Equal(t, int64(100), again.BalanceAfter, "the stored transaction, not a new one")

	bal, err := s.Balances(ctx, p)
	require.NoError(t, err)
	require.Equal(t, map[wallet.Currency]int64{wallet.Mana: 70, wallet.Sparks: 0}, bal)

	list, err := s.Transactions(ctx, p, wallet.Mana, wallet.ListParams{})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, d.ID, list[0].ID, "newest first")
	page, err := s.Transactions(ctx, p, wallet.Mana, wallet.ListParams{Limit: 1, BeforeID: d.ID})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, c.ID, page[0].ID)

	require.Equal(t, int64(4), count(t, pool, `SELECT count(*) FROM ledger_entries`))
	require.Equal(t, int64(-100), count(t, pool,
		`SELECT sum(amount) FROM ledger_entries WHERE account = $1`, wallet.AccountManaIssued))
}

func TestPostValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	ok := wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1, Direction: wallet.Credit,
		Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("k")}
	cases := []struct {
		name   string
		mutate func(*wallet.PostParams)
		want   error
	}{
		{"empty key", func(p *wallet.PostParams) { p.IdempotencyKey = wallet.CallerKey("") }, wallet.ErrInvalidKey},
		{"long key", func(p *wallet.PostParams) { p.IdempotencyKey = wallet.CallerKey(strings.Repeat("k", 256)) }, wallet.ErrInvalidKey},
		{"zero amount", func(p *wallet.PostParams) { p.Amount = 0 }, wallet.ErrInvalidAmount},
		{"negative amount", func(p *wallet.PostParams) { p.Amount = -5 }, wallet.ErrInvalidAmount},
		{"currency", func(p *wallet.PostParams) { p.Currency = "gold" }, wallet.ErrUnknownCurrency},
		{"direction", func(p *wallet.PostParams) { p.Direction = "sideways" }, wallet.ErrInvalidPost},
		{"kind", func(p *wallet.PostParams) { p.Kind = "" }, wallet.ErrInvalidPost},
		{"kind without account", func(p *wallet.PostParams) { p.Kind = "bonus" }, wallet.ErrInvalidPost},
		{"unknown player", func(p *wallet.PostParams) { p.PlayerID = p.PlayerID + 1000 }, wallet.ErrUnknownPlayer},
	}
	for _, tc := range cases {
		bad := ok
		tc.mutate(&bad)
		_, err := s.Post(ctx, bad)
		require.ErrorIs(t, err, tc.want, tc.name)
	}
	require.Equal(t, int64(0), count(t, pool, `SELECT count(*) FROM wallet_transactions`))

	// A kind outside the known set posts against the account it names.
	custom := ok
	custom.Kind, custom.Account = "bonus", "promotions"
	_, err := s.Post(ctx, custom)
	require.NoError(t, err)
	_, err = s.Post(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1, Direction: wallet.Debit,
		Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(strings.Repeat("k", 255))})
	require.NoError(t, err, "255 bytes is a valid key")
}

func TestKeyReusedWithOtherParamsWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{})
	p, other := newPlayer(t, pool), newPlayer(t, pool)
	orig := wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 100, Direction: wallet.Credit,
		Kind: wallet.KindPurchase, IdempotencyKey: wallet.FulfilmentKey(7)}
	_, err := s.Post(ctx, orig)
	require.NoError(t, err)

	cases := map[string]func(*wallet.PostParams){
		"amount":    func(p *wallet.PostParams) { p.Amount = 50 },
		"currency":  func(p *wallet.PostParams) { p.Currency = wallet.Sparks },
		"direction": func(p *wallet.PostParams) { p.Direction = wallet.Debit },
		"kind":      func(p *wallet.PostParams) { p.Kind = wallet.KindAdjustment },
		"player":    func(p *wallet.PostParams) { p.PlayerID = other },
	}
	for field, mutate := range cases {
		reused := orig
		mutate(&reused)
		_, err := s.Post(ctx, reused)
		require.ErrorIs(t, err, wallet.ErrIdempotencyKeyReused, field)
		var kr *wallet.KeyReusedError
		require.True(t, errors.As(err, &kr), field)
		require.Equal(t, field, kr.Field)
		require.Equal(t, orig.IdempotencyKey.String(), kr.Key)

		tx := testdb.Begin(t, pool)
		_, err = s.PostTx(ctx, tx, reused)
		require.ErrorIs(t, err, wallet.ErrIdempotencyKeyReused, field)
		require.NoError(t, tx.Commit(ctx))
	}
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions`))
	require.Equal(t, int64(2), count(t, pool, `SELECT count(*) FROM ledger_entries`))
	require.Equal(t, int64(100), balance(t, pool, p, wallet.Mana))
	require.Equal(t, int64(0), balance(t, pool, p, wallet.Sparks))
	require.Equal(t, int64(0), count(t, pool, `SELECT count(*) FROM wallets WHERE player_id = $1`, other))
}

// The enforcer's contract: a refused debit records nothing, so its key
// runs again after a top-up, and then moves Sparks exactly once.
func TestRefusedDebitRunsAgainAfterTopUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	funding := wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 100,
		Kind: wallet.KindFunding, IdempotencyKey: wallet.FundingKey(9, "2026-01-02")}

	_, err := s.Debit(ctx, funding)
	require.ErrorIs(t, err, wallet.ErrInsufficientBalance, "no wallet at all")
	fund(t, s, p, wallet.Sparks, 40)
	_, err = s.Debit(ctx, funding)
	require.ErrorIs(t, err, wallet.ErrInsufficientBalance, "not enough")
	tx := testdb.Begin(t, pool)
	_, err = s.DebitTx(ctx, tx, funding)
	require.ErrorIs(t, err, wallet.ErrInsufficientBalance, "not enough, in a caller's transaction")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, int64(0), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = $1`, funding.IdempotencyKey.String()))

	fund(t, s, p, wallet.Sparks, 70)
	first, err := s.Debit(ctx, funding)
	require.NoError(t, err)
	require.False(t, first.Replayed, "the key runs again after the top-up")
	require.Equal(t, int64(10), first.BalanceAfter)
	again, err := s.Debit(ctx, funding)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, int64(10), balance(t, pool, p, wallet.Sparks))
}

func TestPostTxFollowsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	credit := wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 5, Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("c1")}

	tx := testdb.Begin(t, pool)
	_, err := s.CreditTx(ctx, tx, credit)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, int64(0), count(t, pool, `SELECT count(*) FROM wallet_transactions`), "rolled back with the caller")

	tx = testdb.Begin(t, pool)
	_, err = s.DebitTx(ctx, tx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 1, Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey("d1")})
	require.ErrorIs(t, err, wallet.ErrInsufficientBalance)
	first, err := s.CreditTx(ctx, tx, credit)
	require.NoError(t, err, "the caller's transaction survives a refused post")
	replay, err := s.CreditTx(ctx, tx, credit)
	require.NoError(t, err)
	require.True(t, replay.Replayed, "the caller sees its own uncommitted post")
	require.Equal(t, first.ID, replay.ID)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, int64(5), balance(t, pool, p, wallet.Mana))
}

func TestOverflowIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Sparks, math.MaxInt64)
	_, err := s.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1, Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("o")})
	require.ErrorIs(t, err, wallet.ErrOverflow)
	tx := testdb.Begin(t, pool)
	_, err = s.CreditTx(ctx, tx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1, Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("o")})
	require.ErrorIs(t, err, wallet.ErrOverflow)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, int64(math.MaxInt64), balance(t, pool, p, wallet.Sparks))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions`))
	// Drain it again so the per-currency total of the audit stays within bigint.
	_, err = s.Debit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: math.MaxInt64, Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("drain")})
	require.NoError(t, err)
}
