package events_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

// BenchmarkSparksDebit measures what the low-balance observer adds to a
// Sparks debit: "none" is the wallet without an observer (the code path
// before it), "lowbalance" with events.LowBalance. post is Debit (one
// autocommit statement without an observer, a transaction of its own
// with one); posttx is PostTx in the caller's transaction (as the API's
// conversions and the clawbacks post); batch is PostBatchTx of 50 debits of 50 players in one
// transaction. Players hold 1e12 Sparks and one Marquee, so none crosses.
func BenchmarkSparksDebit(b *testing.B) {
	pool := testdb.NewPool(b, 4)
	ctx := context.Background()
	var players []int64
	seed := wallet.New(pool, wallet.Options{})
	for range 50 {
		var id int64
		require.NoError(b, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('p') RETURNING id`).Scan(&id))
		_, err := pool.Exec(ctx, `INSERT INTO marquees (player_id, name, plan, daily_price) VALUES ($1, 'm', 'standard', 100)`, id)
		require.NoError(b, err)
		_, err = seed.Credit(ctx, wallet.PostParams{PlayerID: id, Currency: wallet.Sparks, Amount: 1e12,
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("seed-%d", id))})
		require.NoError(b, err)
		players = append(players, id)
	}
	stores := []struct {
		name string
		s    *wallet.Store
	}{{"none", seed}, {"lowbalance", wallet.New(pool, wallet.Options{Observer: events.LowBalance{Days: 3}})}}
	n := 0
	debit := func(p int64) wallet.PostParams {
		n++
		return wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Direction: wallet.Debit, Amount: 1,
			Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("bench-%d", n))}
	}
	for _, st := range stores {
		b.Run("post/"+st.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				_, err := st.s.Post(ctx, debit(players[i%len(players)]))
				require.NoError(b, err)
			}
		})
		b.Run("posttx/"+st.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := st.s.PostTx(ctx, tx, debit(players[i%len(players)]))
					return err
				}))
			}
		})
		b.Run("batch/"+st.name, func(b *testing.B) {
			for b.Loop() {
				ps := make([]wallet.PostParams, len(players))
				for j, p := range players {
					ps[j] = debit(p)
				}
				require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, _, err := st.s.PostBatchTx(ctx, tx, ps)
					return err
				}))
			}
		})
	}
}
