package events

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

// TestGuardFormsAgree: the guard over an array of players fails exactly
// when the one-player guard fails for one of them (a batch of players
// judges each as a post of one would), on players not low, low without
// a row, and recovered from a recorded low.
func TestGuardFormsAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	ws := wallet.New(pool, wallet.Options{})
	player := func(sparks int64, recordedLow bool) int64 {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('p') RETURNING id`).Scan(&id))
		_, err := pool.Exec(ctx, `INSERT INTO marquees (player_id, name, plan, daily_price) VALUES ($1, 'm', 'standard', 100)`, id)
		require.NoError(t, err)
		if sparks > 0 {
			_, err = ws.Credit(ctx, wallet.PostParams{PlayerID: id, Currency: wallet.Sparks, Amount: sparks,
				Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprint("seed-", id))})
			require.NoError(t, err)
		}
		if recordedLow {
			_, err = pool.Exec(ctx, `INSERT INTO low_balance_state (player_id, low, crossings) VALUES ($1, true, 1)`, id)
			require.NoError(t, err)
		}
		return id
	}
	fails := func(players []int64) bool {
		sql, args := LowBalance{}.SparksGuardSQL(players)
		_, err := pool.Exec(ctx, sql, args...)
		var pgErr *pgconn.PgError
		if err != nil {
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, wallet.GuardSQLState, pgErr.Code)
		}
		return err != nil
	}
	fine, lowNoRow, recovered, stillLow := player(1000, false), player(100, false), player(1000, true), player(100, true)
	for _, p := range []int64{fine, lowNoRow, recovered, stillLow} {
		require.Equal(t, p == lowNoRow || p == recovered, fails([]int64{p}), "player %d alone", p)
	}
	require.False(t, fails([]int64{fine, stillLow}))
	require.True(t, fails([]int64{fine, lowNoRow}))
	require.True(t, fails([]int64{stillLow, recovered}))
}
