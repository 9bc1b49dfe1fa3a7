// Package testdb gives tests a migrated PostgreSQL database on a real
// server: by default a transaction rolled back when the test ends (Tx), or,
// for a test that must commit, a database of its own (New).
//
// A package's TestMain calls Main. The test binaries of one `go test` run
// share one throwaway cluster started from the machine's PostgreSQL
// binaries (see internal/dev/pglocal; as root it runs as the postgres
// user): the first binary to need it starts it, with the run's migrated
// template database, and it stops within a second of the run's end, or of
// its last binary's, whether the binaries ended or died (shared.go says
// how). Each binary's database names carry its pid and a random part, so
// binaries running at once never collide.
//
// Choose the fixture by what the test must do:
//
//   - Tx: reads and writes in one transaction (most domain tests). Nothing
//     commits; every test sees only its own rows.
//   - New (NewURL, NewPool): a database cloned from the template, for a
//     test that commits: River workers, races between sessions, durable
//     commits, a process under test. A clone costs about 0.1 s.
//   - EmptyURL: an unmigrated database, for migration tests.
//
// Set BILLING_TEST_DATABASE_URL to use an existing server instead (its role
// needs CREATEDB); each binary then builds a template of its own on it.
//
// Part of the test kit (one package per kind of part; docs/testing.md).
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/migrations"
)

var (
	admin    *pgxpool.Pool // on a database of the server we may CREATE DATABASE from
	adminURL string
	urlFor   func(string) string
	template string // migrated template database name
	strategy string // CREATE DATABASE's STRATEGY clause, "" before PostgreSQL 15
	prefix   string // of this binary's database names: unique on a shared server
	seq      atomic.Int64
	ready    bool
)

// A test binary started as a run's keeper (shared.go) is that and nothing
// else: it keeps the cluster from init, before any TestMain does work of
// its own (cmd/billing's builds the binary).
func init() {
	if dir := os.Getenv(keeperEnv); dir != "" {
		os.Exit(keep(dir))
	}
}

// Main runs the package's tests against a real PostgreSQL and exits.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run runs the package's tests against a real PostgreSQL and returns
// their exit code, for a TestMain with cleanup of its own to do before
// it exits (os.Exit runs no deferred call).
func Run(m *testing.M) int {
	// `go test -fuzz` re-runs the test binary as fuzz workers, which only
	// call the fuzz target: start no cluster there. One would inherit the
	// worker's pipes to the fuzz coordinator and, orphaned when the worker
	// is killed, keep them open, so the coordinator waits forever.
	if slices.Contains(os.Args[1:], "-test.fuzzworker") || fuzzOnly() {
		return m.Run()
	}
	stop, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testdb:", err)
		return 1
	}
	code := m.Run()
	stop()
	return code
}

// fuzzOnly reports whether this binary runs only to fuzz: -test.fuzz
// names a target and -test.run=^$ leaves out every test, as
// scripts/fuzz-short runs it. Fuzz targets take no database, so it joins
// no cluster either: .ci/run fuzzes at the lowest priority beside the
// simulator's histories, where a cluster of its own would be a start
// (initdb, the template's migrations) for nothing.
func fuzzOnly() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	fuzz, run := flag.Lookup("test.fuzz"), flag.Lookup("test.run")
	return fuzz != nil && run != nil && fuzz.Value.String() != "" && run.Value.String() == "^$"
}

func setup() (func(), error) {
	prefix = fmt.Sprintf("billing_%d_%s", os.Getpid(), randomHex())
	if ext := os.Getenv("BILLING_TEST_DATABASE_URL"); ext != "" {
		return setupExternal(ext)
	}
	var base string
	leave, err := joinRun(func(port int) error {
		base = fmt.Sprintf("postgres://billing:billing@127.0.0.1:%d/", port)
		urlFor = func(db string) string { return base + db + "?" + urlParams }
		return openAdmin(urlFor("billing"), runTemplate)
	})
	if err != nil {
		return nil, fmt.Errorf("the run's cluster: %w", err)
	}
	ready = true
	return func() {
		dropShared()
		admin.Close()
		leave()
	}, nil
}

// runTemplate is the run cluster's template: built once, by the first
// binary to join, under the run's start lock.
const runTemplate = "billing_tpl"

// setupExternal uses the server at url, with a template of this binary's
// own: other runs may share that server.
func setupExternal(url string) (func(), error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("BILLING_TEST_DATABASE_URL: %w", err)
	}
	urlFor = func(db string) string {
		return fmt.Sprintf("postgres://%s:%s@%s:%d/%s?%s", cfg.User, cfg.Password, cfg.Host, cfg.Port, db, urlParams)
	}
	adminURL = url
	if err := openAdmin(url, prefix+"_tpl"); err != nil {
		return nil, err
	}
	ready = true
	return func() {
		dropShared()
		dropDatabase(template)
		admin.Close()
	}, nil
}

// openAdmin connects to url and makes sure the template tpl exists.
func openAdmin(url, tpl string) error {
	ctx := context.Background()
	var err error
	if admin == nil {
		if admin, err = pgxpool.New(ctx, url); err != nil {
			return err
		}
	}
	adminURL, template = url, tpl
	var version int
	if err := admin.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return fmt.Errorf("testdb: connect: %w", err)
	}
	if version >= 150000 {
		// Measured on PostgreSQL 15: a clone by file copy takes half the
		// time of the default WAL_LOG, and its drop a third.
		strategy = " STRATEGY FILE_COPY"
	}
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", tpl).Scan(&exists); err != nil || exists {
		return err
	}
	return buildTemplate(ctx, tpl)
}

// buildTemplate migrates a database under another name and renames it, so
// that a binary that dies halfway leaves no template half built.
func buildTemplate(ctx context.Context, tpl string) error {
	building := prefix + "_build"
	if err := adminExec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, urlFor(building))
	if err != nil {
		return err
	}
	_, err = migrations.Migrate(ctx, pool, nil)
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return adminExec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", pgx.Identifier{building}.Sanitize(), pgx.Identifier{tpl}.Sanitize()))
}

func adminExec(ctx context.Context, sql string) error {
	if _, err := admin.Exec(ctx, sql); err != nil {
		return fmt.Errorf("testdb: %s: %w", sql, err)
	}
	return nil
}

func dropDatabase(name string) {
	_ = adminExec(context.Background(), fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize()))
}

func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// clone creates database name from the template.
func clone(ctx context.Context, name string) error {
	sql := fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s%s", pgx.Identifier{name}.Sanitize(), pgx.Identifier{template}.Sanitize(), strategy)
	for attempt := 0; ; attempt++ {
		err := adminExec(ctx, sql)
		// 55006: another session is connected to the template (a
		// concurrent CREATE DATABASE of it, on old servers): try again.
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt == 50 {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NewURL creates a migrated database for t, dropped when t ends, and returns
// its connection URL.
func NewURL(t testing.TB) string {
	t.Helper()
	if !ready {
		t.Fatal("testdb: call testdb.Main(m) from the package's TestMain")
	}
	name := fmt.Sprintf("%s_%d", prefix, seq.Add(1))
	if err := clone(context.Background(), name); err != nil {
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
	name := fmt.Sprintf("%s_empty_%d", prefix, seq.Add(1))
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

// urlParams end every test database's URL. connect_timeout: billing's
// default (durable.DefaultConnectTimeout, 5 s) is for production; with
// two suites at once a SCRAM exchange took longer, and a test (or a
// billing command it runs) failed to connect where it was only slow.
const urlParams = "sslmode=disable&synchronous_commit=off&connect_timeout=60"

// WorkDeadline bounds a test's wait for work done outside its goroutine on
// the test database (a River job worked, a request finished, a session
// reaching a lock). A wait ends as soon as the work is done; this only
// decides when stuck work fails the test, so it is generous: a busy
// machine is slow, not wrong (with two suites at once, load 50, eleven
// River jobs took more than 2 minutes).
const WorkDeadline = 5 * time.Minute
