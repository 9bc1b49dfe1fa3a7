package rivercomplete_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/platform/rivercomplete"
)

// These tests are the contract of the seam: they hold real jobs running in a
// real River client and complete them three ways (river.JobCompleteTx, the
// reference; ModePilot; ModePerJob). A River upgrade that changes what the
// pilot's statement means fails them.

func TestMain(m *testing.M) { testdb.Main(m) }

type holdArgs struct {
	N int `json:"n"`
}

func (holdArgs) Kind() string { return "rivercomplete_hold" }

// held is a job that is running: its worker waits for release.
type held struct {
	ctx context.Context
	job *river.Job[holdArgs]
}

type holdWorker struct {
	river.WorkerDefaults[holdArgs]
	running chan held
	release chan struct{}
}

func (w *holdWorker) Work(ctx context.Context, job *river.Job[holdArgs]) error {
	w.running <- held{ctx: ctx, job: job}
	select {
	case <-w.release:
	case <-ctx.Done():
	}
	return nil
}

type harness struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	w      *holdWorker
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, ctx: context.Background(), pool: testdb.New(t),
		w: &holdWorker{running: make(chan held, 16), release: make(chan struct{})}}
	workers := river.NewWorkers()
	river.AddWorker(workers, h.w)
	client, err := river.NewClient(riverpgxv5.New(h.pool), &river.Config{
		Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 16}},
		FetchPollInterval: 20 * time.Millisecond, FetchCooldown: 10 * time.Millisecond, JobTimeout: time.Minute,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(h.ctx))
	h.client = client
	t.Cleanup(func() {
		close(h.w.release)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return h
}

// hold inserts n jobs and returns them once all are running, by N.
func (h *harness) hold(n int) []held {
	h.t.Helper()
	for i := range n {
		_, err := h.client.Insert(h.ctx, holdArgs{N: i}, nil)
		require.NoError(h.t, err)
	}
	out := make([]held, n)
	for range n {
		select {
		case j := <-h.w.running:
			out[j.job.Args.N] = j
		case <-time.After(2 * time.Minute):
			require.FailNow(h.t, "jobs did not start running")
		}
	}
	return out
}

func (h *harness) inTx(fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(h.ctx, h.pool, fn)
}

func (h *harness) row(id int64) *rivertype.JobRow {
	h.t.Helper()
	r, err := h.client.JobGet(h.ctx, id)
	require.NoError(h.t, err)
	return r
}

type output struct {
	Outcome string `json:"outcome"`
	N       int    `json:"n"`
}

func one(j held, out any) []rivercomplete.Job[holdArgs] {
	return []rivercomplete.Job[holdArgs]{{Ctx: j.ctx, Job: j.job, Output: out}}
}

// TestCompleteMatchesJobCompleteTx completes one job with JobCompleteTx and
// the others through each mode, and compares them field by field.
func TestCompleteMatchesJobCompleteTx(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	jobs := h.hold(5)
	before := time.Now()
	require.NoError(t, h.inTx(func(tx pgx.Tx) error {
		if err := river.RecordOutput(jobs[0].ctx, output{Outcome: "funded", N: 0}); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](jobs[0].ctx, tx, jobs[0].job)
		return err
	}))
	for mode, idx := range map[rivercomplete.Mode][]int{rivercomplete.ModePilot: {1, 2}, rivercomplete.ModePerJob: {3, 4}} {
		var batch []rivercomplete.Job[holdArgs]
		for _, i := range idx {
			batch = append(batch, one(jobs[i], output{Outcome: "funded", N: i})...)
		}
		require.NoError(t, h.inTx(func(tx pgx.Tx) error { return rivercomplete.Complete(h.ctx, tx, mode, batch) }), mode)
	}
	after := time.Now()

	ref := h.row(jobs[0].job.ID)
	requireCompleted(t, ref, jobs[0], before, after, 0)
	for i := 1; i < len(jobs); i++ {
		got := h.row(jobs[i].job.ID)
		requireCompleted(t, got, jobs[i], before, after, i)
		require.Equal(t, ref.State, got.State, "job %d", i)
		require.Equal(t, ref.Attempt, got.Attempt, "job %d: attempt", i)
		require.Equal(t, ref.Errors, got.Errors, "job %d: errors", i)
		require.Equal(t, ref.AttemptedBy, got.AttemptedBy, "job %d: attempted_by", i)
		require.Equal(t, metadataKeys(t, ref), metadataKeys(t, got), "job %d: metadata keys", i)
	}
}

// requireCompleted checks one completed row against the running job it was.
func requireCompleted(t *testing.T, r *rivertype.JobRow, j held, before, after time.Time, n int) {
	t.Helper()
	require.Equal(t, rivertype.JobStateCompleted, r.State, "job %d", n)
	require.Equal(t, j.job.Attempt, r.Attempt, "job %d: completion keeps the running attempt", n)
	require.Equal(t, 1, r.Attempt, "job %d", n)
	require.NotNil(t, r.FinalizedAt, "job %d", n)
	require.False(t, r.FinalizedAt.Before(before.Add(-time.Second)) || r.FinalizedAt.After(after.Add(time.Second)),
		"job %d finalized at %v, completed between %v and %v", n, r.FinalizedAt, before, after)
	require.True(t, r.ScheduledAt.Equal(j.job.ScheduledAt), "job %d: scheduled_at unchanged", n)
	require.Empty(t, r.Errors, "job %d", n)
	var got output
	require.NoError(t, json.Unmarshal(r.Output(), &got), "job %d output %s", n, r.Output())
	require.Equal(t, output{Outcome: "funded", N: n}, got, "job %d", n)
}

func metadataKeys(t *testing.T, r *rivertype.JobRow) []string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(r.Metadata, &m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// TestCompleteRefusesJobNoLongerRunning: a job cancelled while its batch ran
// is left as it is and the batch is refused with ErrNotRunning, whatever
// the mode, alone or beside a running job.
func TestCompleteRefusesJobNoLongerRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, mode := range []rivercomplete.Mode{rivercomplete.ModePilot, rivercomplete.ModePerJob} {
		jobs := h.hold(2)
		gone := jobs[1]
		_, err := h.pool.Exec(h.ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, gone.job.ID)
		require.NoError(t, err)
		for _, batch := range [][]rivercomplete.Job[holdArgs]{
			one(gone, output{N: 1}),
			append(one(jobs[0], output{N: 0}), one(gone, output{N: 1})...),
		} {
			err := h.inTx(func(tx pgx.Tx) error { return rivercomplete.Complete(h.ctx, tx, mode, batch) })
			require.ErrorIs(t, err, rivercomplete.ErrNotRunning, "%s, batch of %d", mode, len(batch))
			require.Equal(t, rivertype.JobStateCancelled, h.row(gone.job.ID).State, mode)
			require.Nil(t, h.row(gone.job.ID).Output(), mode)
			require.Equal(t, rivertype.JobStateRunning, h.row(jobs[0].job.ID).State, "%s: rolled back", mode)
		}
		require.NoError(t, h.inTx(func(tx pgx.Tx) error {
			return rivercomplete.Complete(h.ctx, tx, mode, one(jobs[0], output{N: 0}))
		}))
		require.Equal(t, rivertype.JobStateCompleted, h.row(jobs[0].job.ID).State, mode)
		// Renumber for the next mode's hold: its jobs start at N=0 again.
	}
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]rivercomplete.Mode{"": rivercomplete.ModePilot, "pilot": rivercomplete.ModePilot, "per_job": rivercomplete.ModePerJob} {
		got, err := rivercomplete.ParseMode(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := rivercomplete.ParseMode("both")
	require.ErrorIs(t, err, rivercomplete.ErrMode)
	require.Contains(t, fmt.Sprint(err), `"both"`)
}
