package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

// TestStatementBaselineRunsWalletsStatement runs baseline (c) through the
// real pgbench: its first-post script debits under fresh keys exactly as
// wallet.Post would (one transaction of -1 per post, the audit clean), and
// its replay script only replays (nothing moves, nothing fails). A
// statement pgbench could not bind, or a replay that posted, fails here
// instead of skewing a ratio.
func TestStatementBaselineRunsWalletsStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	pl, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pl.Close)

	run := "t" + strconv.FormatInt(time.Now().UnixNano(), 36)
	rows, err := pl.Query(ctx, `INSERT INTO players (name) SELECT 'bench-test' FROM generate_series(1, 3) RETURNING id`)
	require.NoError(t, err)
	players, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	store := wallet.New(pl, wallet.Options{SparksPerMana: 1})
	for _, p := range players {
		_, err := store.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 1_000_000,
			Kind: wallet.KindAdjustment, Reference: "seed", IdempotencyKey: wallet.CallerKey(seedKeyPrefix(run) + strconv.FormatInt(p, 10))})
		require.NoError(t, err)
	}
	vars := postVars(players[0], players[2], run)
	totals := func() (n, balance int64) {
		require.NoError(t, pl.QueryRow(ctx, `SELECT (SELECT count(*) FROM wallet_transactions), (SELECT sum(balance) FROM wallets)`).Scan(&n, &balance))
		return n, balance
	}

	posts, err := PgBench(ctx, "statement", url, statementPostScript, 2, time.Second, vars)
	require.NoError(t, err)
	require.Positive(t, posts.Ops)
	n, balance := totals()
	require.Equal(t, 3+posts.Ops, n, "one transaction per pgbench post")
	require.Equal(t, 3_000_000-posts.Ops, balance, "each post debits 1")

	replays, err := PgBench(ctx, "statement_replay", url, statementReplayScript, 2, time.Second, vars)
	require.NoError(t, err)
	require.Positive(t, replays.Ops)
	require.Zero(t, replays.Errors)
	n2, balance2 := totals()
	require.Equal(t, n, n2, "a replay posts nothing")
	require.Equal(t, balance, balance2)

	audit, err := wallet.Audit(ctx, pl, wallet.AuditOptions{})
	require.NoError(t, err)
	require.True(t, audit.Clean(), audit.Summary())
}

// TestStatementScriptsBindEveryParameter: baseline (c) is the wallet's own
// statement with every $n bound to a pgbench variable.
func TestStatementScriptsBindEveryParameter(t *testing.T) {
	t.Parallel()
	for _, s := range []string{statementPostScript, statementReplayScript} {
		require.NotContains(t, s, "$")
		require.Contains(t, s, "FROM prior", "the wallet's folded statement, replay probe included")
	}
	require.True(t, strings.HasPrefix(wallet.DebitStatement(), "WITH prior AS"))
}
