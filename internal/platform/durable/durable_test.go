package durable_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/durable/durabletest"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// notes creates the tests' table on a session that does not wait for a
// standby: on a stranded pool, DDL would wait like any other commit.
func notes(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc := pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["synchronous_commit"] = "off"
	conn, err := pgx.ConnectConfig(ctx, cc)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS durable_notes (id bigint PRIMARY KEY)`)
	require.NoError(t, err)
}

// TestCommitNotDurable: a commit whose synchronous-replication wait is
// cancelled is applied on the primary (PostgreSQL answers COMMIT), yet
// Commit refuses it with ErrNotDurable and the metric counts it.
func TestCommitNotDurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := durabletest.StrandedPool(t)
	cancelled := durabletest.CancelWaits(t, pool)
	notes(t, pool)
	before := counter(t, "billing_db_commits_not_durable_total")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO durable_notes VALUES (1)`)
	require.NoError(t, err)
	err = durable.Commit(ctx, tx)
	require.ErrorIs(t, err, durable.ErrNotDurable)
	require.Positive(t, cancelled.Load())

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM durable_notes WHERE id = 1`).Scan(&n))
	require.Equal(t, 1, n, "the commit was applied locally: that is the hole")
	require.GreaterOrEqual(t, counter(t, "billing_db_commits_not_durable_total")-before, 1.0)

	// A transaction that writes nothing has nothing to replicate: it never
	// waits, and its commit is not refused, on the same connections.
	for range 5 {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM durable_notes`).Scan(&n))
		require.NoError(t, durable.Commit(ctx, tx))
	}
}

// TestDoNotDurable: an autocommit write through Do is refused the same way.
func TestDoNotDurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := durabletest.StrandedPool(t)
	durabletest.CancelWaits(t, pool)
	notes(t, pool)
	err := durable.Do(ctx, pool, func(conn *pgxpool.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO durable_notes VALUES (2)`)
		return err
	})
	require.ErrorIs(t, err, durable.ErrNotDurable)
	err = durable.Do(ctx, pool, func(conn *pgxpool.Conn) error {
		var n int
		return conn.QueryRow(ctx, `SELECT count(*) FROM durable_notes`).Scan(&n)
	})
	require.NoError(t, err, "a read commits nothing to wait for")
}

// TestCommitNotDurableConcurrent: many goroutines share the pool's
// connections; every commit is cancelled (no standby ever confirms), and
// every one of them is refused, none answered as durable, though each
// pooled connection goes back to the pool inside Commit.
func TestCommitNotDurableConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := durabletest.StrandedPool(t)
	durabletest.CancelWaits(t, pool)
	notes(t, pool)
	const n = 24
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for j := range 4 {
				tx, err := pool.Begin(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				if _, err := tx.Exec(ctx, `INSERT INTO durable_notes VALUES ($1)`, 100+i*10+j); err != nil {
					// Give the connection back: a test that fails must not
					// hang in the pool's Close.
					errs[i] = errors.Join(err, tx.Rollback(ctx))
					return
				}
				if err := durable.Commit(ctx, tx); !errors.Is(err, durable.ErrNotDurable) {
					errs[i] = errors.Join(errors.New("commit answered as durable"), err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// TestCommitDurable: on a primary whose commits need no standby, Commit
// is tx.Commit.
func TestCommitDurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(t))
	require.NoError(t, err)
	// testdb's URLs say synchronous_commit=off (the run's cluster may be
	// stranded by another package): a URL that does not say it.
	delete(cfg.ConnConfig.RuntimeParams, "synchronous_commit")
	durable.Configure(cfg, nil)
	require.Equal(t, "on", cfg.ConnConfig.RuntimeParams["synchronous_commit"], "billing's sessions wait for the standby")
	// This package's cluster names a standby that never comes (the
	// stranded tests'): a primary without one is a session that does not
	// wait, which a URL may still ask for.
	cfg, err = pgxpool.ParseConfig(testdb.NewURL(t) + "&synchronous_commit=off")
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 0 // testdb's URLs set one: a URL that does not
	durable.Configure(cfg, nil)
	require.Equal(t, "off", cfg.ConnConfig.RuntimeParams["synchronous_commit"], "the URL's own setting wins")
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	notes(t, pool)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO durable_notes VALUES (3)`)
	require.NoError(t, err)
	require.NoError(t, durable.Commit(ctx, tx))
	require.NoError(t, durable.Do(ctx, pool, func(conn *pgxpool.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO durable_notes VALUES (4)`)
		return err
	}))
	require.Equal(t, durable.DefaultConnectTimeout, cfg.ConnConfig.ConnectTimeout)
	require.Equal(t, durable.DefaultPingTimeout, cfg.PingTimeout)
}

// TestReadOnlyConnectionClosed: a statement that meets a read-only node
// (SQLSTATE 25006) closes its connection, which the pool then drops
// instead of handing it to the next caller.
func TestReadOnlyConnectionClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(t))
	require.NoError(t, err)
	// What a session on a standby, or on a primary that was demoted under
	// it, sees: every write refused as read-only.
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.MaxConns = 1
	durable.Configure(cfg, nil)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	before := counter(t, "billing_db_read_only_connections_closed_total")

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	first := conn.Conn().PgConn()
	_, err = conn.Exec(ctx, `CREATE TABLE durable_ro (id int)`)
	closed := conn.Conn().IsClosed()
	conn.Release()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code)
	require.True(t, closed, "the connection is closed, not kept")

	conn, err = pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(conn.Release) // before the pool's Close, even when a check below fails
	require.NotSame(t, first, conn.Conn().PgConn(), "the pool made a new connection")
	require.GreaterOrEqual(t, counter(t, "billing_db_read_only_connections_closed_total")-before, 1.0)

	// Any other error leaves the connection open.
	_, err = conn.Exec(ctx, `SELECT 1/0`)
	require.Error(t, err)
	require.False(t, conn.Conn().IsClosed())
}

// TestIsSyncRepCancel recognises both forms of the warning and nothing else.
func TestIsSyncRepCancel(t *testing.T) {
	t.Parallel()
	const detail = "The transaction has already committed locally, but might not have been replicated to the standby."
	for _, tc := range []struct {
		n    pgconn.Notice
		want bool
	}{
		{pgconn.Notice{Severity: "WARNING", Message: "canceling wait for synchronous replication due to user request", Detail: detail}, true},
		{pgconn.Notice{Severity: "WARNING", Code: "57P01", Message: "canceling the wait for synchronous replication and terminating connection due to administrator command", Detail: detail}, true},
		{pgconn.Notice{Severity: "WARNING", Message: "there is no transaction in progress"}, false},
		{pgconn.Notice{Severity: "NOTICE", Message: "relation \"x\" already exists, skipping"}, false},
	} {
		require.Equal(t, tc.want, durable.IsSyncRepCancel(&tc.n), tc.n.Message)
	}
}

// TestCommitTimeoutWhileWaiting: a commit left waiting for the standby
// ends with its context (no canceller here), as an error, never a success.
func TestCommitTimeoutWhileWaiting(t *testing.T) {
	t.Parallel()
	pool := durabletest.StrandedPool(t)
	notes(t, pool)
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), `INSERT INTO durable_notes VALUES (5)`)
	require.NoError(t, err)
	var pid int32
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid))
	// The caller's deadline ends while the commit waits for the standby:
	// the test ends it once the server says the commit is waiting there,
	// not after a guessed time.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer cancel()
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var waiting bool
			err := pool.QueryRow(context.Background(),
				`SELECT coalesce(wait_event = 'SyncRep', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
			if err == nil && waiting {
				return
			}
		}
	}()
	err = durable.Commit(ctx, tx)
	require.Error(t, err)
	require.NotErrorIs(t, err, durable.ErrNotDurable, "nothing cancelled the wait: the commit's outcome is unknown")
}

// counter reads a counter of the default registry.
func counter(t *testing.T, name string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestUnavailable: what a failover looks like to the application is told
// apart from ordinary errors.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port, err := procs.FreePort()
	require.NoError(t, err)
	_, refused := pgx.Connect(ctx, fmt.Sprintf("postgres://billing@127.0.0.1:%d/billing?sslmode=disable", port))
	require.Error(t, refused)
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("players: authenticate: %w", refused), true},
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, true},
		{&pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{&pgconn.PgError{Code: "23505"}, false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("read: %w: %w", pgconn.ErrConnClosed, context.DeadlineExceeded), false},
		{durable.ErrNotDurable, false},
		{nil, false},
	} {
		require.Equal(t, tc.want, durable.Unavailable(tc.err), "%v", tc.err)
	}
}
