package playground_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/domain/playground"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/platform/jobhold"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixture struct {
	pool    *pgxpool.Pool
	client  *river.Client[pgx.Tx]
	now     time.Time
	player  int64
	marquee int64
}

// newFixture makes a player with a Marquee, funded for now's day when funded.
func newFixture(t *testing.T, funded bool) *fixture {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	p, _, err := players.Create(ctx, pool, "p")
	require.NoError(t, err)
	m, err := enforcer.CreateMarquee(ctx, pool, enforcer.DefaultPlans(), enforcer.CreateParams{PlayerID: p.ID, Name: "m", Plan: "standard"})
	require.NoError(t, err)
	f := &fixture{pool: pool, client: client, now: time.Now().UTC(), player: p.ID, marquee: m.ID}
	if funded {
		w := wallet.New(pool, wallet.Options{})
		_, err := w.Credit(ctx, wallet.PostParams{PlayerID: p.ID, Currency: wallet.Sparks, Amount: 100,
			Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("grant")})
		require.NoError(t, err)
		svc := enforcer.New(pool, w, enforcer.Options{Now: func() time.Time { return f.now }})
		_, err = svc.FundDay(ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: enforcer.ServiceDay(f.now, time.UTC)})
		require.NoError(t, err)
	}
	return f
}

func (f *fixture) inTx(t *testing.T, fn func(tx pgx.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx := testdb.Begin(t, f.pool)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (f *fixture) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

func TestGateRefusesAndEnqueuesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	err := f.inTx(t, func(tx pgx.Tx) error {
		_, err := playground.CreateTx(context.Background(), tx, f.client, playground.CreateParams{PlayerID: f.player, MarqueeID: f.marquee}, f.now)
		return err
	})
	require.ErrorIs(t, err, enforcer.ErrNotFunded)
	require.Equal(t, 0, f.count(t, `SELECT count(*) FROM playgrounds`))
	require.Equal(t, 0, f.count(t, `SELECT count(*) FROM river_job`))

	err = f.inTx(t, func(tx pgx.Tx) error {
		_, err := playground.CreateTx(context.Background(), tx, f.client, playground.CreateParams{PlayerID: f.player + 1, MarqueeID: f.marquee}, f.now)
		return err
	})
	require.ErrorIs(t, err, enforcer.ErrNotFound, "another player's Marquee")
}

// Each job records its transition once, in the transaction that completes
// it; the output is the playground as recorded.
func TestWorkersRecordTransitions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := context.Background()
	var enq *playground.Enqueued
	require.NoError(t, f.inTx(t, func(tx pgx.Tx) (err error) {
		enq, err = playground.CreateTx(ctx, tx, f.client, playground.CreateParams{PlayerID: f.player, MarqueeID: f.marquee, Name: "pg"}, f.now)
		return err
	}))
	require.Equal(t, playground.StatusProvisioning, enq.Playground.Status)
	require.Equal(t, "playground_create", enq.Job.Kind)

	opts := playground.WorkerOptions{Pool: f.pool, Now: func() time.Time { return f.now.Add(time.Minute) }}
	workers := river.NewWorkers()
	require.Empty(t, playground.Register(workers, opts), "playgrounds have no periodic job")
	// A real River client, so each worker completes its job with JobCompleteTx in its own transaction.
	client, err := river.NewClient(riverpgxv5.New(f.pool), &river.Config{Workers: workers,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}}, FetchPollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	defer func() { _ = client.Stop(ctx) }()
	waitDone := func(id int64) *rivertype.JobRow {
		t.Helper()
		var job *rivertype.JobRow
		require.Eventually(t, func() bool {
			job, err = client.JobGet(ctx, id)
			require.NoError(t, err)
			return job.State == rivertype.JobStateCompleted
		}, testdb.WorkDeadline, 20*time.Millisecond)
		return job
	}
	job := waitDone(enq.Job.ID)
	var out playground.Output
	require.NoError(t, json.Unmarshal(job.Output(), &out))
	require.Equal(t, playground.StatusRunning, out.Status)

	var wg sync.WaitGroup
	ids := make(chan int64, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, f.inTx(t, func(tx pgx.Tx) error {
				op := playground.RestartTx
				if i%2 == 1 {
					op = playground.SyncTx
				}
				e, err := op(ctx, tx, f.client, f.player, enq.Playground.ID, f.now)
				if err == nil {
					ids <- e.Job.ID
				}
				return err
			}))
		}()
	}
	wg.Wait()
	close(ids)
	for id := range ids {
		waitDone(id)
	}
	pg, err := playground.Get(ctx, f.pool, f.player, enq.Playground.ID)
	require.NoError(t, err)
	require.Equal(t, 3, pg.RestartCount)
	require.Equal(t, 3, pg.SyncCount)
	require.NotNil(t, pg.RunningAt)
	require.WithinDuration(t, f.now.Add(time.Minute), *pg.SyncedAt, time.Millisecond)
	_, err = playground.Get(ctx, f.pool, f.player+1, enq.Playground.ID)
	require.ErrorIs(t, err, playground.ErrNotFound)
}

// A playground job's worker can reach a former primary during a failover,
// one that lacks the playground: the job is not cancelled there as "not
// found" (jobhold), and, worked again against the primary, completes.
func TestWorkerOnAFormerPrimaryDoesNotCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := context.Background()
	var enq *playground.Enqueued
	require.NoError(t, f.inTx(t, func(tx pgx.Tx) (err error) {
		enq, err = playground.CreateTx(ctx, tx, f.client, playground.CreateParams{PlayerID: f.player, MarqueeID: f.marquee, Name: "pg"}, f.now)
		return err
	}))
	start := func(pool *pgxpool.Pool) *river.Client[pgx.Tx] {
		workers := river.NewWorkers()
		playground.Register(workers, playground.WorkerOptions{Pool: pool, Now: func() time.Time { return f.now }})
		client, _ := testkit.StartRiver(t, f.pool, testkit.RiverOptions{Workers: workers, Queues: map[string]int{river.QueueDefault: 2}})
		return client
	}
	astray := start(testdb.New(t))
	first := testkit.FirstAttempts(t, f.pool, 1, enq.Job.Kind)[0]
	require.NotEqual(t, "cancelled", first.State, "cancelled on the former primary: %s", first.Err)
	require.Contains(t, first.Err, jobhold.ErrNotHeld.Error())
	require.NoError(t, astray.Stop(ctx))

	start(f.pool)
	require.Eventually(t, func() bool {
		job, err := f.client.JobGet(ctx, enq.Job.ID)
		return err == nil && job.State == rivertype.JobStateCompleted
	}, testdb.WorkDeadline, 20*time.Millisecond, "the job never completed on the primary")
}
