// Package durabletest reproduces, on the tests' own PostgreSQL, the commit
// that synchronous replication acknowledges without a standby: the
// database's sessions wait for a synchronous standby that never connects,
// and a canceller cancels each wait (pg_cancel_backend on wait_event
// SyncRep), which is what pg_auto_failover's keeper does to the commits
// waiting when it turns synchronous replication off. PostgreSQL then
// answers each such COMMIT as a success with its "canceling wait for
// synchronous replication" warning. No formation is needed.
package durabletest

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/platform/durable"
)

// AbsentStandby is the synchronous standby the test cluster is told to
// wait for; nothing ever connects under that name.
const AbsentStandby = "billing_absent_standby"

// StrandedPool returns a pool, configured with durable.Configure, on a
// fresh migrated database (testdb) whose every commit that writes waits
// for AbsentStandby. Nothing ends those waits but a cancel: start
// CancelWaits, or each such commit holds its caller until its context
// ends. The package's TestMain must call testdb.Main.
//
// synchronous_standby_names is a setting of the whole cluster; only
// sessions with synchronous_commit on wait, and the tests' own cluster runs
// with it off, so the package's other databases are unaffected, but for a
// pool configured with durable.Configure, which turns it on unless the URL
// sets it (add synchronous_commit=off to such a pool's URL in a package
// that strands). On a shared server (BILLING_TEST_DATABASE_URL) that would
// not hold, and the test is skipped.
func StrandedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Strand(t, testdb.NewURL(t))
}

// Strand is StrandedPool on the existing test database at url: a second
// pool beside the test's own, whose commits wait where the test's do not.
func Strand(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	if os.Getenv("BILLING_TEST_DATABASE_URL") != "" {
		t.Skip("durabletest changes synchronous_standby_names cluster-wide: not on a shared BILLING_TEST_DATABASE_URL server")
	}
	ctx := context.Background()
	requireAbsentStandby(t, ctx)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	cfg.MaxConns = 40
	durable.Configure(cfg, nil)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// requireAbsentStandby names AbsentStandby as the cluster's synchronous
// standby and waits (bounded) until new sessions see it.
func requireAbsentStandby(t testing.TB, ctx context.Context) {
	t.Helper()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+AbsentStandby+"'"); err != nil {
		t.Fatalf("durabletest: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatalf("durabletest: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := pgx.Connect(ctx, testdb.AdminURL())
		if err != nil {
			t.Fatal(err)
		}
		var names string
		err = c.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&names)
		c.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if names == AbsentStandby {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("durabletest: synchronous_standby_names still %q 10s after the reload", names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait is one commit's wait for the standby: the session, and the
// transaction that waits (its xid and start).
type wait struct {
	pid int32
	txn string
}

// cancelWaiting cancels each wait of db's sessions for the standby, once.
// A cancel is a signal the session acts on when it is next scheduled, so
// on a busy machine the next look may still show the wait it ends; a
// second cancel would then hit the session's next statement (an INSERT of
// its next transaction), which is no commit's wait. Each wait is counted
// before it is cancelled: the cancelled commit answers its caller at
// once, and a test reading the count after that answer must find it
// counted (nothing else ends these waits, so none is counted that is not
// then cancelled).
func cancelWaiting(ctx context.Context, conn *pgx.Conn, db string, n *atomic.Int64, done map[wait]bool) {
	rows, err := conn.Query(ctx, `SELECT pid, coalesce(backend_xid::text, '') || '@' || coalesce(xact_start::text, '')
		FROM pg_stat_activity WHERE datname = $1 AND wait_event = 'SyncRep'`, db)
	if err != nil {
		return
	}
	waits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wait, error) {
		var w wait
		err := r.Scan(&w.pid, &w.txn)
		return w, err
	})
	if err != nil {
		return
	}
	for _, w := range waits {
		if done[w] {
			continue
		}
		done[w] = true
		n.Add(1)
		_, _ = conn.Exec(ctx, `SELECT pg_cancel_backend($1)`, w.pid)
	}
}

// CancelWaits cancels, every few milliseconds until t ends, every session
// of pool's database waiting for the synchronous standby, and returns the
// count of waits it cancelled.
func CancelWaits(t testing.TB, pool *pgxpool.Pool) *atomic.Int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int64
	done := make(chan struct{})
	db := pool.Config().ConnConfig.Database
	go func() {
		defer close(done)
		conn, err := pgx.Connect(ctx, testdb.AdminURL())
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		cancelled := map[wait]bool{}
		for ctx.Err() == nil {
			cancelWaiting(ctx, conn, db, &n, cancelled)
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &n
}
