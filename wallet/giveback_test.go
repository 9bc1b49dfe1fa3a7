package wallet_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// giveBack gives mana back for payment 7's step in its own transaction.
func giveBack(s *wallet.Store, pool *pgxpool.Pool, player, mana int64, step int64) (*wallet.GivenBack, error) {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	g, err := s.GiveBackTx(ctx, tx, wallet.GiveBackParams{PlayerID: player, Mana: mana,
		Key: wallet.ReversalKey(7, step, "dp_1"), Reference: "won", Clawbacks: wallet.ReversalPrefix(7)})
	if err != nil {
		return nil, err
	}
	return g, tx.Commit(ctx)
}

// Issue 28, finding 1, in the wallet: Mana given back recovers first what
// a forgiveness wrote off of the debt the payment's clawbacks opened, and
// only the rest reaches the player; ten racing deliveries of one step move
// it once. A forgiveness older than the payment's debt is not charged to
// it.
func TestGiveBackRecoversWriteOffFirst(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 12)
	s := wallet.New(pool, wallet.Options{SparksPerMana: 10})
	player := newPlayer(t, pool)

	// An older debt of another payment, forgiven before this one's.
	clawbackFor(t, s, pool, player, wallet.ReversalKey(6, 1, "re_old"), 50)
	_, err := s.ForgiveDebt(context.Background(), player, "old", "old")
	require.NoError(t, err)

	fund(t, s, player, wallet.Mana, 300)
	clawbackFor(t, s, pool, player, wallet.ReversalKey(7, 1, "dp_1"), 1000) // 300 Mana, 700 debt
	require.Equal(t, int64(700), debtOf(t, pool, player))
	_, err = s.ForgiveDebt(context.Background(), player, "new", "goodwill")
	require.NoError(t, err)

	results := make([]*wallet.GivenBack, 10)
	errs := make([]error, 10)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i], errs[i] = giveBack(s, pool, player, 1000, 2) })
	}
	wg.Wait()
	fresh := 0
	for i, g := range results {
		require.NoError(t, errs[i])
		if !g.Replayed {
			fresh++
			require.Equal(t, int64(700), g.Recovered, "the 700 forgiven since this payment's debt, not the older 50")
		}
	}
	require.Equal(t, 1, fresh)
	require.Equal(t, int64(300), balance(t, pool, player, wallet.Mana), "what was not forgiven reaches the player")
	require.Zero(t, debtOf(t, pool, player))
	require.Equal(t, int64(50), count(t, pool, `SELECT -coalesce(sum(e.amount), 0) FROM ledger_entries e
		JOIN wallet_transactions t ON t.id = e.transaction_id WHERE e.account = 'bad_debt' AND t.player_id = $1`, player),
		"only the older forgiveness stays written off")

	// Nothing is recovered twice: a later give-back of the same payment
	// finds the write-off already recovered.
	g, err := giveBack(s, pool, player, 5, 3)
	require.NoError(t, err)
	require.Zero(t, g.Recovered)
	require.Equal(t, int64(305), balance(t, pool, player, wallet.Mana))
}

func clawbackFor(t *testing.T, s *wallet.Store, pool *pgxpool.Pool, player int64, key wallet.Key, mana int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = s.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: player, Mana: mana, Key: key, Reference: "test"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}
