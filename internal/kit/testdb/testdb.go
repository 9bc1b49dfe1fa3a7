// Package testdb gives every test its own freshly migrated PostgreSQL
// database on a real server.
//
// A package's TestMain calls Main. It starts one throwaway cluster from the
// machine's PostgreSQL binaries (see internal/dev/pglocal; as root it runs as the
// postgres user), migrates a template database once, and stops the cluster
// when the tests end. A test binary that dies instead (a -timeout panic,
// SIGINT, SIGKILL) takes its cluster and its directory with it: pglocal's
// watchdog notices and stops them within a second. New then clones the template per test in a few tens of
// milliseconds. Set BILLING_TEST_DATABASE_URL to use an existing server
// instead (its role needs CREATEDB).
package testdb

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/internal/dev/pglocal"
	"github.com/fibe-dev/billing/migrations"
)

var (
	adminURL string // a database on the server we may CREATE DATABASE from
	urlFor   func(string) string
	template string     // migrated template database name
	createMu sync.Mutex // CREATE DATABASE ... TEMPLATE conflicts when concurrent
	seq      atomic.Int64
	ready    bool
)

// Main runs the package's tests against a real PostgreSQL and exits.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// `go test -fuzz` re-runs the test binary as fuzz workers, which only
	// call the fuzz target: start no cluster there. One would inherit the
	// worker's pipes to the fuzz coordinator and, orphaned when the worker
	// is killed, keep them open, so the coordinator waits forever.
	if slices.Contains(os.Args[1:], "-test.fuzzworker") {
		return m.Run()
	}
	stop, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testdb:", err)
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testdb: stop:", err)
	}
	return code
}

func setup() (func() error, error) {
	stop := func() error { return nil }
	if ext := os.Getenv("BILLING_TEST_DATABASE_URL"); ext != "" {
		adminURL = ext
		cfg, err := pgx.ParseConfig(ext)
		if err != nil {
			return nil, fmt.Errorf("BILLING_TEST_DATABASE_URL: %w", err)
		}
		urlFor = func(db string) string {
			c := cfg.Copy()
			return fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", c.User, c.Password, c.Host, c.Port, db)
		}
	} else {
		dir, err := os.MkdirTemp("", "billing-testdb-")
		if err != nil {
			return nil, err
		}
		srv, err := pglocal.Start(pglocal.Options{Dir: dir, Fast: true, Ephemeral: true})
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		adminURL, urlFor = srv.URL(), srv.DatabaseURL
		stop = func() error {
			err := srv.Stop()
			os.RemoveAll(dir)
			return err
		}
	}
	template = fmt.Sprintf("billing_tpl_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if err := buildTemplate(); err != nil {
		_ = stop()
		return nil, err
	}
	ready = true
	inner := stop
	return func() error {
		dropDatabase(template)
		return inner()
	}, nil
}

func buildTemplate() error {
	ctx := context.Background()
	if err := adminExec(ctx, fmt.Sprintf("CREATE DATABASE %s", pgx.Identifier{template}.Sanitize())); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, urlFor(template))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool, nil); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return nil
}

func adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("testdb: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("testdb: %s: %w", sql, err)
	}
	return nil
}

func dropDatabase(name string) {
	_ = adminExec(context.Background(), fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize()))
}

// NewURL creates a migrated database for t, dropped when t ends, and returns
// its connection URL.
func NewURL(t testing.TB) string {
	t.Helper()
	if !ready {
		t.Fatal("testdb: call testdb.Main(m) from the package's TestMain")
	}
	name := fmt.Sprintf("%s_%d", template, seq.Add(1))
	createMu.Lock()
	err := adminExec(context.Background(), fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{template}.Sanitize()))
	createMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropDatabase(name) })
	return urlFor(name)
}

// New creates a migrated database for t and returns a pool on it (up to 80
// connections, so tests can race many goroutines each on its own connection).
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPool(t, 80)
}

// NewPool is New with a pool of at most maxConns connections: for tests of
// what happens when connections run out, and for tests that run many
// parallel copies of themselves under the server's max_connections.
func NewPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return PoolOn(t, NewURL(t), maxConns)
}

// PoolOn opens a pool of at most maxConns connections on url, closed when
// the test ends.
func PoolOn(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// AdminURL is a database on the test server that tests may use to create
// their own databases (for example a fresh, unmigrated one).
func AdminURL() string { return adminURL }

// URLFor is the URL of database name on the test server.
func URLFor(name string) string { return urlFor(name) }

// EmptyURL creates an empty (unmigrated) database, dropped when t ends.
func EmptyURL(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("billing_empty_%d_%d", os.Getpid(), seq.Add(1))
	if err := adminExec(context.Background(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropDatabase(name) })
	return urlFor(name)
}

// Beginner is what Begin needs: a pool or a connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Begin starts a transaction for t and registers its rollback as a cleanup
// at once. A test that fails while holding it (require stops the test
// before any later Rollback line) then gives its connection back, so the
// pool's Close in an earlier cleanup does not wait forever. Rolling back a
// committed transaction is a no-op.
func Begin(t testing.TB, db Beginner) pgx.Tx {
	t.Helper()
	tx, err := db.Begin(context.Background())
	if err != nil {
		t.Fatalf("testdb: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}
