package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/playground"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/web/idempotency"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestOutcome: the outcome label names what River does with the job next,
// including wrapped cancel and snooze errors and the last attempt.
func TestOutcome(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name         string
		attempt, max int
		err          error
		want         string
	}{
		{"success", 1, 3, nil, "completed"},
		{"success on the last attempt", 3, 3, nil, "completed"},
		{"error with attempts left", 1, 3, boom, "retryable"},
		{"error on the last attempt", 3, 3, boom, "discarded"},
		{"error past the last attempt", 4, 3, boom, "discarded"},
		{"cancel", 1, 3, river.JobCancel(boom), "cancelled"},
		{"wrapped cancel on the last attempt", 3, 3, fmt.Errorf("fulfil: %w", river.JobCancel(boom)), "cancelled"},
		{"snooze", 1, 3, river.JobSnooze(time.Second), "snoozed"},
		{"wrapped snooze on the last attempt", 3, 3, fmt.Errorf("wait: %w", river.JobSnooze(time.Second)), "snoozed"},
	}
	for _, c := range cases {
		job := &rivertype.JobRow{Attempt: c.attempt, MaxAttempts: c.max}
		require.Equal(t, c.want, Outcome(job, c.err), c.name)
	}
}

// TestEveryKindHasAWorkedQueue: each job kind is inserted on a queue the
// worker process works; a drift in a queue name would leave its jobs
// available forever.
func TestEveryKindHasAWorkedQueue(t *testing.T) {
	t.Parallel()
	queues := Queues()
	for _, args := range []river.JobArgs{
		NoopArgs{}, enforcer.SweepArgs{}, enforcer.FundDayArgs{}, fulfillment.FulfillOrderArgs{},
		idempotency.ReapArgs{}, playground.CreateArgs{}, playground.RestartArgs{}, playground.SyncArgs{},
		events.DeliverArgs{},
	} {
		queue := river.QueueDefault
		if o, ok := args.(river.JobArgsWithInsertOpts); ok && o.InsertOpts().Queue != "" {
			queue = o.InsertOpts().Queue
		}
		cfg, ok := queues[queue]
		require.True(t, ok, "%s is inserted on queue %q, which no worker works", args.Kind(), queue)
		require.Positive(t, cfg.MaxWorkers, "%s: queue %q", args.Kind(), queue)
	}
}

// scriptedArgs is a job whose worker answers with the error its args name.
type scriptedArgs struct {
	Answer string `json:"answer"`
}

func (scriptedArgs) Kind() string { return "jobs_test_scripted" }

type scriptedWorker struct {
	river.WorkerDefaults[scriptedArgs]
	blocked atomic.Bool
}

func (w *scriptedWorker) Work(ctx context.Context, job *river.Job[scriptedArgs]) error {
	switch job.Args.Answer {
	case "cancel":
		return river.JobCancel(errors.New("refused"))
	case "fail":
		return errors.New("transient")
	case "block":
		w.blocked.Store(true)
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// worked reads this process's billing_river_jobs_worked_total{kind,outcome}.
func worked(t *testing.T, kind, outcome string) float64 {
	var m dto.Metric
	require.NoError(t, jobsWorked.WithLabelValues(kind, outcome).Write(&m))
	return m.GetCounter().GetValue()
}

func startScripted(t *testing.T) (*Client, *scriptedWorker) {
	t.Helper()
	pool := testdb.New(t)
	w := &scriptedWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := NewClient(pool, Options{Workers: workers, ID: t.Name(), FetchPollInterval: 100 * time.Millisecond,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}}})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() { _ = Stop(context.Background(), client, 5*time.Second) })
	return client, w
}

// TestWorkedJobsAreCounted: the metrics middleware counts every job a real
// River client works by its outcome.
func TestWorkedJobsAreCounted(t *testing.T) {
	t.Parallel()
	client, _ := startScripted(t)
	kind := scriptedArgs{}.Kind()
	before := map[string]float64{}
	for _, o := range []string{"completed", "cancelled", "discarded"} {
		before[o] = worked(t, kind, o)
	}
	ctx := context.Background()
	for _, answer := range []string{"ok", "ok", "cancel", "fail"} {
		_, err := client.Insert(ctx, scriptedArgs{Answer: answer}, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
	}
	want := map[string]float64{"completed": 2, "cancelled": 1, "discarded": 1}
	require.Eventually(t, func() bool {
		for o, n := range want {
			if worked(t, kind, o)-before[o] < n {
				return false
			}
		}
		return true
	}, testdb.WorkDeadline, 20*time.Millisecond)
	for o, n := range want {
		require.Equal(t, n, worked(t, kind, o)-before[o], o)
	}
}

// TestStopCancelsAJobThatOutlivesTheSoftStop: Stop gives running jobs the
// timeout, then cancels their contexts and returns (bounded), so a worker
// process always exits.
func TestStopCancelsAJobThatOutlivesTheSoftStop(t *testing.T) {
	t.Parallel()
	client, w := startScripted(t)
	res, err := client.Insert(context.Background(), scriptedArgs{Answer: "block"}, nil)
	require.NoError(t, err)
	require.Eventually(t, w.blocked.Load, 2*time.Minute, 10*time.Millisecond, "the job never started blocking")
	start := time.Now()
	require.NoError(t, Stop(context.Background(), client, 300*time.Millisecond))
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 300*time.Millisecond, "the soft stop waited")
	require.Less(t, took, 10*time.Second, "the hard stop cancelled the job")
	require.NotZero(t, res.Job.ID)
}
