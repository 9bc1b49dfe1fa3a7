package enforcer_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/semaphore"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/internal/platform/rivercomplete"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// conns bounds the connections the package's parallel tests hold at once,
// below the test server's max_connections (100).
var conns = semaphore.NewWeighted(90)

var (
	utc     = time.UTC
	newYork = mustLocation("America/New_York")
	quiet   = slog.New(slog.DiscardHandler)
)

func mustLocation(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// env is one test's database, wallet, clock and enforcer service.
type env struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	wallet *wallet.Store
	clock  *testkit.Clock
	tz     *time.Location
	svc    *enforcer.Service
	plans  map[string]enforcer.Plan
	broken bool // the test breaks invariant 4 on purpose
}

// newEnv gives t a fresh database with a pool of n connections; every test
// ends with the wallet audit and the funding invariant.
func newEnv(t *testing.T, n int, tz *time.Location, now time.Time) *env {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, conns.Acquire(ctx, int64(n)+1))
	t.Cleanup(func() { conns.Release(int64(n) + 1) })
	pool := testdb.NewPool(t, int32(n))
	e := &env{t: t, ctx: ctx, pool: pool, wallet: wallet.New(pool, wallet.Options{}), clock: testkit.NewClock(now),
		tz: tz, plans: enforcer.DefaultPlans()}
	e.svc = enforcer.New(pool, e.wallet, enforcer.Options{TZ: tz, Now: e.clock.Now, Logger: quiet, BatchSize: 100,
		Complete: completeMode(t)})
	t.Cleanup(func() {
		if !t.Failed() && !e.broken {
			e.requireClean()
		}
	})
	return e
}

// bothCompletes runs test once per way of completing a batch's jobs, as
// subtests named after the mode (completeMode reads it back).
func bothCompletes(t *testing.T, test func(t *testing.T)) {
	t.Parallel()
	for _, mode := range []rivercomplete.Mode{rivercomplete.ModePilot, rivercomplete.ModePerJob} {
		t.Run(string(mode), test)
	}
}

// completeMode is the mode a bothCompletes subtest is named after, else the
// default.
func completeMode(t *testing.T) rivercomplete.Mode {
	name := t.Name()
	if mode, err := rivercomplete.ParseMode(name[strings.LastIndex(name, "/")+1:]); err == nil {
		return mode
	}
	return rivercomplete.ModePilot
}

// requireClean runs the full audit: every invariant, funding in the
// test's service-day time zone.
func (e *env) requireClean() {
	e.t.Helper()
	audittest.RequireClean(e.t, e.pool, audit.Options{TZ: e.tz})
}

func (e *env) count(sql string, args ...any) int64 {
	e.t.Helper()
	var n int64
	require.NoError(e.t, e.pool.QueryRow(e.ctx, sql, args...).Scan(&n))
	return n
}

// player creates a player holding sparks Sparks.
func (e *env) player(sparks int64) int64 {
	e.t.Helper()
	var id int64
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `INSERT INTO players (name) VALUES ('p') RETURNING id`).Scan(&id))
	if sparks > 0 {
		e.credit(id, sparks)
	}
	return id
}

var creditSeq sync.Mutex
var creditN int

func (e *env) credit(player, sparks int64) {
	e.t.Helper()
	creditSeq.Lock()
	creditN++
	key := fmt.Sprintf("test-credit:%d:%d", player, creditN)
	creditSeq.Unlock()
	_, err := e.wallet.Credit(e.ctx, wallet.PostParams{PlayerID: player, Currency: wallet.Sparks, Amount: sparks,
		Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(key), Account: wallet.AccountAdjustments})
	require.NoError(e.t, err)
}

func (e *env) sparks(player int64) int64 {
	e.t.Helper()
	return e.count(`SELECT coalesce((SELECT balance FROM wallets WHERE player_id = $1 AND currency = 'sparks'), 0)`, player)
}

// marquee creates a Marquee on the standard plan (100 Sparks a day).
func (e *env) marquee(player int64) *enforcer.Marquee {
	e.t.Helper()
	m, err := enforcer.CreateMarquee(e.ctx, e.pool, e.plans, enforcer.CreateParams{PlayerID: player, Name: "m", Plan: "standard"})
	require.NoError(e.t, err)
	return m
}

func (e *env) get(m *enforcer.Marquee) *enforcer.Marquee {
	e.t.Helper()
	got, err := enforcer.GetMarquee(e.ctx, e.pool, m.PlayerID, m.ID)
	require.NoError(e.t, err)
	return got
}

// debits counts the funding debits of a Marquee.
func (e *env) debits(marqueeID int64) int64 {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'funding' AND reference LIKE $1`,
		fmt.Sprintf("marquee:%d:%%", marqueeID))
}

// clientOpts tune a test River client.
type clientOpts struct {
	id       string
	svc      *enforcer.Service // whose workers to run; nil: insert-only
	workers  *river.Workers    // overrides svc
	periodic []*river.PeriodicJob
	// maxWorkers of the funding queue; 0 is 8.
	maxWorkers int
}

// client starts a River client on e's database, stopped at cleanup.
func (e *env) client(o clientOpts) *river.Client[pgx.Tx] {
	e.t.Helper()
	workers := o.workers
	if workers == nil && o.svc != nil {
		workers = river.NewWorkers()
		enforcer.Register(workers, enforcer.WorkerOptions{Service: o.svc})
	}
	if workers == nil { // insert-only
		client, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{ID: o.id, Logger: quiet})
		require.NoError(e.t, err)
		return client
	}
	client, _ := testkit.StartRiver(e.t, e.pool, testkit.RiverOptions{ID: o.id, Workers: workers, PeriodicJobs: o.periodic,
		FetchPollInterval: 50 * time.Millisecond,
		Queues:            map[string]int{enforcer.QueueFunding: cmp.Or(o.maxWorkers, 8), river.QueueDefault: 2}})
	return client
}

// waitIdle waits until no fund_day or sweep job is waiting or running.
// The deadline is at least waitDeadline whatever the caller names (its d
// says how long the work takes on a quiet machine): a busy machine is slow,
// not wrong.
func (e *env) waitIdle(d time.Duration) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		return e.count(`SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`) == 0
	}, max(d, waitDeadline), 20*time.Millisecond, "River's jobs never all finished")
}

// waitDeadline bounds every wait for a condition in these tests: seconds
// on an idle machine; funding 500 Marquees from three clients took over
// two minutes at load 50 on two cores.
const waitDeadline = 5 * time.Minute

// fundDayJobs returns the fund_day jobs of a Marquee, oldest first.
func (e *env) fundDayJobs(marqueeID int64) []jobRow {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT id, state::text, attempt, coalesce(array_length(errors, 1), 0),
		args->>'day', coalesce(metadata->>'output', '') FROM river_job
		WHERE kind = 'fund_day' AND (args->>'marquee_id')::bigint = $1 ORDER BY id`, marqueeID)
	require.NoError(e.t, err)
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[jobRow])
	require.NoError(e.t, err)
	return jobs
}

type jobRow struct {
	ID      int64
	State   string
	Attempt int
	Errors  int
	Day     string
	Output  string
}
