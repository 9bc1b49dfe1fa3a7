// Package testkit is what billing's tests share beyond a database
// (internal/kit/testdb): a River client that works the test's jobs and stops
// before its pool closes, a watcher of those jobs built on River's own
// event subscription, an injectable clock, and the catalogue fixture.
//
// The kit's rule: a helper any package's tests use lives in internal/kit,
// one package per kind of part (testdb a database, testkit River and
// fixtures, proctest external programs and the inner loop, stripemock and
// providerfake the providers' APIs, arch the layering rules); a helper that
// knows one package's internals lives beside it as <package>test.
// docs/testing.md says which to choose.
package testkit

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// Catalogue is the SKU fixture of the money tests: 999 usd for 1000 Mana,
// 3999 usd for 5000.
func Catalogue() map[string]fulfillment.SKU {
	return map[string]fulfillment.SKU{
		"mana_1000": {Amount: 999, Currency: "usd", Mana: 1000},
		"mana_5000": {Amount: 3999, Currency: "usd", Mana: 5000},
	}
}

// WebhookSecrets are the signing secrets the tests' intake verifies with,
// by provider.
func WebhookSecrets() map[string][]string {
	return map[string][]string{
		"stripe": {"whsec_test_stripe"},
		"paddle": {"pdl_ntfset_test_paddle"},
		"creem":  {"whsec_test_creem"},
	}
}

// Quiet is the logger of the tests' workers and clients.
var Quiet = slog.New(slog.DiscardHandler)

// Clock is a test's injected clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time; pass c.Now where code takes a func() time.Time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// RiverOptions configure StartRiver.
type RiverOptions struct {
	Workers *river.Workers
	// Queues and their worker counts; nil is the fulfilment queue, 10 workers.
	Queues       map[string]int
	PeriodicJobs []*river.PeriodicJob
	// ID names the client (River's Config.ID) when a test runs several.
	ID string
	// FetchPollInterval overrides the fast 20 ms poll.
	FetchPollInterval time.Duration
}

// StartRiver starts a River client working opts' jobs on pool, polling
// fast, with a Watcher of every job it works; it stops the client when the
// test ends, before the pool closes.
func StartRiver(t testing.TB, pool *pgxpool.Pool, opts RiverOptions) (*river.Client[pgx.Tx], *Watcher) {
	t.Helper()
	if opts.Queues == nil {
		opts.Queues = map[string]int{fulfillment.QueueFulfillment: 10}
	}
	queues := map[string]river.QueueConfig{}
	for q, n := range opts.Queues {
		queues[q] = river.QueueConfig{MaxWorkers: n}
	}
	if opts.FetchPollInterval == 0 {
		opts.FetchPollInterval = 20 * time.Millisecond
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID: opts.ID, Queues: queues, Workers: opts.Workers, PeriodicJobs: opts.PeriodicJobs,
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: opts.FetchPollInterval,
		Logger: Quiet, TestOnly: true,
	})
	require.NoError(t, err)
	w := watch(client)
	watchers.Store(client, w)
	if _, taken := watchers.LoadOrStore(pool, w); taken {
		watchers.Store(pool, (*Watcher)(nil)) // two clients on one pool: JobsOn cannot tell
	}
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
		w.stop()
		watchers.Delete(client)
		watchers.Delete(pool)
	})
	return client, w
}

// watchers are the Watchers of the clients StartRiver started, by client
// and by pool.
var watchers sync.Map // *river.Client[pgx.Tx] or *pgxpool.Pool -> *Watcher

// Jobs returns the Watcher of a client StartRiver started, for helpers that
// are handed only the client.
func Jobs(client *river.Client[pgx.Tx]) *Watcher {
	w, ok := watchers.Load(client)
	if !ok {
		panic("testkit: Jobs of a client testkit.StartRiver did not start")
	}
	return w.(*Watcher)
}

// JobsOn returns the Watcher of the one client StartRiver started on pool.
func JobsOn(pool *pgxpool.Pool) *Watcher {
	w, _ := watchers.Load(pool)
	if w, _ := w.(*Watcher); w != nil {
		return w
	}
	panic("testkit: JobsOn a pool without exactly one client testkit.StartRiver started")
}

// FirstAttempt is a job whose first attempt has ended: its state then and
// that attempt's error ("" when it succeeded).
type FirstAttempt struct {
	State string
	Err   string
}

// FirstAttempts waits, up to testdb.WorkDeadline, until n jobs of the
// kinds on pool have ended their first attempt (an error recorded, or the
// job finalized), and returns them in id order. Tests that must see what
// one attempt decided, before any retry, read it here.
func FirstAttempts(t testing.TB, pool *pgxpool.Pool, n int, kinds ...string) []FirstAttempt {
	t.Helper()
	ctx := context.Background()
	for end := time.Now().Add(testdb.WorkDeadline); ; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(end), "%d %v jobs never ended their first attempt", n, kinds)
		rows, err := pool.Query(ctx, `SELECT state, coalesce(errors[1]->>'error', '') FROM river_job
			WHERE kind = ANY($1) AND (errors IS NOT NULL OR finalized_at IS NOT NULL) ORDER BY id`, kinds)
		require.NoError(t, err)
		ended, err := pgx.CollectRows(rows, pgx.RowToStructByPos[FirstAttempt])
		require.NoError(t, err)
		if len(ended) >= n {
			return ended
		}
	}
}
