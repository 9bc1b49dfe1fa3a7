package wallet_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/wallet"
)

// receivable is minus the player's entries on the receivable account: what
// the ledger says the player owes.
func receivable(t *testing.T, pool *pgxpool.Pool, player int64) int64 {
	t.Helper()
	return -count(t, pool, `SELECT coalesce(sum(e.amount), 0) FROM ledger_entries e
		JOIN wallet_transactions t ON t.id = e.transaction_id WHERE e.account = 'receivable' AND t.player_id = $1`, player)
}

func debtOf(t *testing.T, pool *pgxpool.Pool, player int64) int64 {
	t.Helper()
	n, err := wallet.OutstandingDebt(context.Background(), pool, player)
	require.NoError(t, err)
	require.Equal(t, n, receivable(t, pool, player), "the debts row mirrors the receivable account")
	return n
}

// clawback takes mana back from player in its own transaction.
func clawback(t *testing.T, s *wallet.Store, pool *pgxpool.Pool, player, mana int64, key string) *wallet.Clawback {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	c, err := s.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: player, Mana: mana, Key: wallet.CallerKey(key), Reference: "test"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return c
}

// Mana first, then whole Mana's worth of Sparks at the rate, the rest debt.
func TestClawbackTakesManaThenSparksThenDebt(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	s := wallet.New(pool, wallet.Options{SparksPerMana: 10})
	player := newPlayer(t, pool)
	fund(t, s, player, wallet.Mana, 30)
	fund(t, s, player, wallet.Sparks, 25)

	c := clawback(t, s, pool, player, 50, "cb:1")
	require.Equal(t, wallet.Clawback{Mana: 30, Sparks: 20, Debt: 18}, *c)
	require.Zero(t, balance(t, pool, player, wallet.Mana))
	require.Equal(t, int64(5), balance(t, pool, player, wallet.Sparks))
	require.Equal(t, int64(18), debtOf(t, pool, player))
	var owed *wallet.OutstandingDebtError
	require.ErrorAs(t, wallet.CheckNoDebt(context.Background(), pool, player), &owed)
	require.ErrorIs(t, owed, wallet.ErrOutstandingDebt)

	// A player with nothing at all: everything is debt.
	broke := newPlayer(t, pool)
	require.Equal(t, wallet.Clawback{Debt: 7}, *clawback(t, s, pool, broke, 7, "cb:2"))
	require.Equal(t, int64(7), debtOf(t, pool, broke))
}

// forgiveRacing has ten operators forgive player's debt with one key at
// once and requires one fresh answer, nine replays of it, all of want Mana.
func forgiveRacing(t *testing.T, s *wallet.Store, player int64, key string, want int64) {
	t.Helper()
	results := make([]*wallet.Forgiveness, 10)
	errs := make([]error, 10)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i], errs[i] = s.ForgiveDebt(context.Background(), player, key, "racing") })
	}
	wg.Wait()
	fresh := 0
	for i, f := range results {
		require.NoError(t, errs[i])
		require.Equal(t, player, f.PlayerID)
		require.Equal(t, want, f.Mana)
		if !f.Replayed {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "one call decided, nine replayed it")
}

// Ten operators forgive one debt with one key at once: written off once,
// every answer the same Mana, the wallet unchanged.
func TestForgiveDebtRacingOnOneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 12)
	s := wallet.New(pool, wallet.Options{})
	player := newPlayer(t, pool)
	fund(t, s, player, wallet.Mana, 5)
	clawback(t, s, pool, player, 40, "cb")
	require.Equal(t, int64(35), debtOf(t, pool, player))

	forgiveRacing(t, s, player, "ops-42", 35)
	require.Zero(t, debtOf(t, pool, player))
	require.Zero(t, balance(t, pool, player, wallet.Mana))
	require.NoError(t, wallet.CheckNoDebt(ctx, pool, player))
	require.Equal(t, int64(2), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'debt_write_off'`))

	_, err := s.ForgiveDebt(ctx, newPlayer(t, pool), "ops-42", "another player, same key")
	require.ErrorIs(t, err, wallet.ErrIdempotencyKeyReused)
}

// A key used when the player owed nothing is spent on that answer: ten
// operators racing on it all get "0 forgiven", and replaying it after the
// player falls into debt answers the same 0 and leaves the new debt open.
func TestForgiveNothingSpendsTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 12)
	s := wallet.New(pool, wallet.Options{})
	player := newPlayer(t, pool)

	forgiveRacing(t, s, player, "ops-zero", 0)

	clawback(t, s, pool, player, 12, "cb")
	require.Equal(t, int64(12), debtOf(t, pool, player))
	f, err := s.ForgiveDebt(ctx, player, "ops-zero", "racing")
	require.NoError(t, err)
	require.Equal(t, wallet.Forgiveness{PlayerID: player, Replayed: true, Key: wallet.OperatorKey(wallet.OperatorForgive, "ops-zero").String()}, *f)
	require.Equal(t, int64(12), debtOf(t, pool, player), "a replayed key never forgives a later debt")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'debt_write_off'`))

	_, err = s.ForgiveDebt(ctx, newPlayer(t, pool), "ops-zero", "another player, same key")
	require.ErrorIs(t, err, wallet.ErrIdempotencyKeyReused)
	f, err = s.ForgiveDebt(ctx, player, "ops-new", "a new decision")
	require.NoError(t, err)
	require.Equal(t, int64(12), f.Mana)
	require.Zero(t, debtOf(t, pool, player))
	// The ledger's invariants only: the wallet's primitive writes no
	// debt.forgiven event (fulfillment.ForgiveDebt does, and its tests run
	// the full audit, invariant 12 included).
	audittest.RequireClean(t, pool, audit.Options{LedgerOnly: true})
}

// One key sent for two players at once (five calls each, one owing
// nothing): one player's call decides, that player's others replay it, the
// other player's are refused as a reused key, and only the winner's debt
// may be written off.
func TestForgiveOneKeyTwoPlayersRacing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 12)
	s := wallet.New(pool, wallet.Options{})
	owing, even := newPlayer(t, pool), newPlayer(t, pool)
	clawback(t, s, pool, owing, 9, "cb")

	results := make([]*wallet.Forgiveness, 10)
	errs := make([]error, 10)
	var wg sync.WaitGroup
	for i := range results {
		player := []int64{owing, even}[i%2]
		wg.Go(func() { results[i], errs[i] = s.ForgiveDebt(ctx, player, "ops-both", "racing") })
	}
	wg.Wait()
	var winner int64
	fresh, refused := 0, 0
	for i, f := range results {
		if errs[i] != nil {
			require.ErrorIs(t, errs[i], wallet.ErrIdempotencyKeyReused)
			refused++
			continue
		}
		require.True(t, winner == 0 || winner == f.PlayerID, "one player owns the key")
		winner = f.PlayerID
		if !f.Replayed {
			fresh++
		}
	}
	require.Equal(t, 1, fresh)
	require.Equal(t, 5, refused, "the other player's five calls")
	wantDebt := map[bool]int64{true: 0, false: 9}[winner == owing]
	require.Equal(t, wantDebt, debtOf(t, pool, owing))
	require.Zero(t, debtOf(t, pool, even))
	// Ledger only, as above: a forgiveness's event is fulfillment's.
	audittest.RequireClean(t, pool, audit.Options{LedgerOnly: true})
}

// Ten concurrent adjustments with one operator key: one credit. A debit
// never goes negative; a Mana credit settles a debt first.
func TestAdjustRacingOnOneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 12)
	s := wallet.New(pool, wallet.Options{})
	player := newPlayer(t, pool)
	var wg sync.WaitGroup
	txs := make([]*wallet.Transaction, 10)
	errs := make([]error, 10)
	for i := range txs {
		wg.Go(func() {
			txs[i], errs[i] = s.Adjust(ctx, wallet.AdjustParams{PlayerID: player, Currency: wallet.Sparks, Amount: 100,
				Reason: "support ticket 7", Key: "adj-7"})
		})
	}
	wg.Wait()
	for i := range txs {
		require.NoError(t, errs[i])
		require.Equal(t, txs[0].ID, txs[i].ID)
	}
	require.Equal(t, int64(100), balance(t, pool, player, wallet.Sparks))
	require.Equal(t, "adjust: support ticket 7", txs[0].Reference)
	require.Equal(t, "operator:adjust:adj-7", txs[0].IdempotencyKey, "stored in the operators' namespace")
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE player_id = $1`, player))

	_, err := s.Adjust(ctx, wallet.AdjustParams{PlayerID: player, Currency: wallet.Sparks, Amount: -101, Reason: "x", Key: "adj-8"})
	require.ErrorIs(t, err, wallet.ErrInsufficientBalance)
	_, err = s.Adjust(ctx, wallet.AdjustParams{PlayerID: player, Currency: wallet.Sparks, Amount: -5, Reason: "x", Key: "adj-7"})
	require.ErrorIs(t, err, wallet.ErrIdempotencyKeyReused)
	_, err = s.Adjust(ctx, wallet.AdjustParams{PlayerID: player, Currency: wallet.Sparks, Amount: 5, Reason: " ", Key: "adj-9"})
	require.ErrorIs(t, err, wallet.ErrInvalidPost)
	_, err = s.Adjust(ctx, wallet.AdjustParams{PlayerID: player, Currency: "gold", Amount: 5, Reason: "x", Key: "adj-10"})
	require.ErrorIs(t, err, wallet.ErrUnknownCurrency)
	require.Equal(t, int64(100), balance(t, pool, player, wallet.Sparks))

	clawback(t, s, pool, player, 130, "cb") // 100 Sparks = 100 Mana at rate 1, 30 owed
	require.Equal(t, int64(30), debtOf(t, pool, player))
	for range 2 { // replayed: settles nothing twice
		_, err = s.Adjust(ctx, wallet.AdjustParams{PlayerID: player, Currency: wallet.Mana, Amount: 50, Reason: "gift", Key: "adj-11"})
		require.NoError(t, err)
	}
	require.Equal(t, int64(20), balance(t, pool, player, wallet.Mana))
	require.Zero(t, debtOf(t, pool, player))
}

// The debt gauges read the debts table at scrape time.
func TestDebtCollector(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 4)
	s := wallet.New(pool, wallet.Options{})
	clawback(t, s, pool, newPlayer(t, pool), 12, "cb:a")
	clawback(t, s, pool, newPlayer(t, pool), 30, "cb:b")
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(wallet.NewDebtCollector(pool)))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	require.Equal(t, map[string]float64{"billing_outstanding_debt_mana": 42, "billing_debtors": 2}, got)
}

// Twenty operators credit the same Mana with one key while the player
// owes: one credit, one settlement of the debt, nineteen replays; the
// full audit is clean.
func TestAdjustManaRacingOnOneKeySettlesOnce(t *testing.T) {
	t.Parallel()
	const n = 20
	ctx := context.Background()
	pool := newPool(t, n+2)
	s := wallet.New(pool, wallet.Options{})
	player := newPlayer(t, pool)
	clawback(t, s, pool, player, 30, "cb")
	txs, errs := make([]*wallet.Transaction, n), make([]error, n)
	race(n, func(i int) {
		txs[i], errs[i] = s.Adjust(ctx, wallet.AdjustParams{PlayerID: player, Currency: wallet.Mana, Amount: 50,
			Reason: "goodwill", Key: "adj-race"})
	})
	replays := 0
	for i := range txs {
		require.NoError(t, errs[i])
		require.Equal(t, txs[0].ID, txs[i].ID)
		if txs[i].Replayed {
			replays++
		}
	}
	require.Equal(t, n-1, replays)
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = 'operator:adjust:adj-race'`))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = 'operator:adjust:adj-race:settle'`))
	require.Equal(t, int64(20), balance(t, pool, player, wallet.Mana))
	require.Zero(t, debtOf(t, pool, player))
	audittest.RequireClean(t, pool, audit.Options{})
}

// A Mana credit that settles only part of a debt, replayed with its key,
// settles nothing more: the debt, its receivable mirror and the wallet stay
// where the first credit left them, and the replay reports 0 settled.
func TestPartialSettlementReplaysSettleNothingMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 3)
	s := wallet.New(pool, wallet.Options{})
	player := newPlayer(t, pool)
	clawback(t, s, pool, player, 100, "cb")
	require.Equal(t, int64(100), debtOf(t, pool, player))
	credit := wallet.PostParams{PlayerID: player, Currency: wallet.Mana, Amount: 30, Kind: wallet.KindPurchase,
		Reference: "order:1", IdempotencyKey: wallet.FulfilmentKey(1), Account: wallet.AccountManaIssued}
	settle := func() (*wallet.Transaction, int64) {
		tx := testdb.Begin(t, pool)
		tr, settled, err := s.CreditSettlingTx(ctx, tx, credit)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		return tr, settled
	}
	first, settled := settle()
	require.False(t, first.Replayed)
	require.Equal(t, int64(30), settled)
	require.Equal(t, int64(70), debtOf(t, pool, player))
	for range 3 {
		again, settled := settle()
		require.True(t, again.Replayed)
		require.Equal(t, first.ID, again.ID)
		require.Zero(t, settled)
		require.Equal(t, int64(70), debtOf(t, pool, player), "a replay settled more")
		require.Zero(t, balance(t, pool, player, wallet.Mana))
	}
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'debt_settlement'`))
}
