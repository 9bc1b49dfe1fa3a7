package wallet_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/semaphore"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// conns bounds the connections the package's parallel tests hold at once,
// below the test server's max_connections (100).
var conns = semaphore.NewWeighted(90)

var fundSeq atomic.Int64

// newPool gives t a fresh migrated database and a pool of n connections,
// opened up front so that n goroutines really run on n connections.
func newPool(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, conns.Acquire(ctx, int64(n)+1)) // +1 for the database's admin clone
	t.Cleanup(func() { conns.Release(int64(n) + 1) })
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(t))
	require.NoError(t, err)
	cfg.MaxConns, cfg.MinConns = int32(n), int32(n)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// Released by a defer, so a failed Acquire cannot leave the others
	// checked out and hang pool.Close.
	held := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, c)
	}
	// Every test ends with the audit: registered first, so it runs after
	// the test's own cleanups but before the pool closes.
	t.Cleanup(func() {
		if !t.Failed() {
			requireClean(t, pool)
		}
	})
	return pool
}

// requireClean runs the audit's ledger invariants (1-3): these tests post
// funding and purchase kinds without Marquees or orders, on purpose, which
// the domain invariants would rightly flag.
func requireClean(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	audittest.RequireClean(t, pool, audit.Options{LedgerOnly: true})
}

func newPlayer(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`INSERT INTO players (name) VALUES ('p') RETURNING id`).Scan(&id))
	return id
}

func balance(t *testing.T, pool *pgxpool.Pool, player int64, c wallet.Currency) int64 {
	t.Helper()
	var b int64
	err := pool.QueryRow(context.Background(),
		`SELECT coalesce((SELECT balance FROM wallets WHERE player_id = $1 AND currency = $2), 0)`, player, string(c)).Scan(&b)
	require.NoError(t, err)
	return b
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// fund credits amount of c to player with a fresh adjustment key.
func fund(t *testing.T, s *wallet.Store, player int64, c wallet.Currency, amount int64) {
	t.Helper()
	_, err := s.Credit(context.Background(), wallet.PostParams{PlayerID: player, Currency: c, Amount: amount,
		Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("fund:%d:%s:%d", player, c, fundSeq.Add(1)))})
	require.NoError(t, err)
}

// takeKey posts 1 of c in direction d to player under key as a plain
// adjustment, as a post could before the wallet reserved leg keys: it posts
// under a fresh key, then its row is renamed to key.
func takeKey(t *testing.T, s *wallet.Store, pool *pgxpool.Pool, player int64, c wallet.Currency, d wallet.Direction, key string) {
	t.Helper()
	ctx := context.Background()
	seed := fmt.Sprintf("take:%d", fundSeq.Add(1))
	_, err := s.Post(ctx, wallet.PostParams{PlayerID: player, Currency: c, Amount: 1, Direction: d,
		Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(seed)})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE wallet_transactions SET idempotency_key = $2 WHERE idempotency_key = $1`, seed, key)
	require.NoError(t, err)
}

func testdbURL(t *testing.T) string { return testdb.NewURL(t) }
