package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type stepArgs struct {
	Name string `json:"name"`
	Mode string `json:"mode"` // tx, cancel, flaky, constraint
}

func (stepArgs) Kind() string { return "testkit_step" }

type stepWorker struct {
	river.WorkerDefaults[stepArgs]
	db interface {
		Begin(context.Context) (pgx.Tx, error)
	}
	flaky atomic.Int64
}

func (w *stepWorker) Work(ctx context.Context, job *river.Job[stepArgs]) error {
	switch job.Args.Mode {
	case "tx": // completed in the worker's own transaction
		tx, err := w.db.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return err
		}
		return tx.Commit(ctx)
	case "cancel":
		return river.JobCancel(errors.New("no"))
	case "flaky":
		if w.flaky.Add(1) == 1 {
			return errors.New("connection reset by peer")
		}
		return nil
	case "constraint":
		return fmt.Errorf("insert: ERROR: new row violates check constraint (SQLSTATE 23514)")
	}
	return nil
}

func start(t *testing.T) (*river.Client[pgx.Tx], *testkit.Watcher) {
	pool := testdb.New(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, &stepWorker{db: pool})
	return testkit.StartRiver(t, pool, testkit.RiverOptions{Workers: workers,
		Queues: map[string]int{river.QueueDefault: 4}})
}

func insert(t *testing.T, client *river.Client[pgx.Tx], name, mode string) {
	t.Helper()
	_, err := client.Insert(context.Background(), stepArgs{Name: name, Mode: mode},
		&river.InsertOpts{MaxAttempts: 3})
	require.NoError(t, err)
}

// The watcher sees jobs completed in the worker's transaction, cancelled
// ones and ones that succeed on a retry, through River's events.
func TestWaitSeesEveryEnding(t *testing.T) {
	t.Parallel()
	client, w := start(t)
	for _, mode := range []string{"tx", "cancel", "plain"} {
		insert(t, client, mode, mode)
	}
	jobs := w.Wait(t, testkit.Kind("testkit_step"), 3, testkit.WaitOptions{})
	require.Len(t, jobs, 3)
	states := map[rivertype.JobState]int{}
	for _, j := range jobs {
		states[j.State]++
	}
	require.Equal(t, map[rivertype.JobState]int{rivertype.JobStateCompleted: 2, rivertype.JobStateCancelled: 1}, states)
	one := w.Wait(t, testkit.KindWithArg("testkit_step", "name", "cancel"), 1, testkit.WaitOptions{})
	require.Equal(t, rivertype.JobStateCancelled, one[0].State)
}

// A constraint violation fails the wait at once, and so does any failed
// attempt in a strict wait; a lenient wait sees a flaky job succeed.
func TestWaitFailsFast(t *testing.T) {
	t.Parallel()
	client, w := start(t)
	insert(t, client, "c", "constraint")
	start := time.Now()
	_, err := w.Await(testkit.KindWithArg("testkit_step", "name", "c"), 1, testkit.WaitOptions{Timeout: time.Minute})
	require.ErrorContains(t, err, "no retry mends")
	require.Less(t, time.Since(start), 20*time.Second)

	insert(t, client, "f", "flaky")
	_, err = w.Await(testkit.KindWithArg("testkit_step", "name", "f"), 1, testkit.WaitOptions{Strict: true, Timeout: time.Minute})
	require.ErrorContains(t, err, "connection reset")
}

func TestWaitLenientRetries(t *testing.T) {
	t.Parallel()
	client, w := start(t)
	insert(t, client, "f", "flaky")
	jobs := w.Wait(t, testkit.KindWithArg("testkit_step", "name", "f"), 1, testkit.WaitOptions{Timeout: time.Minute})
	require.Equal(t, rivertype.JobStateCompleted, jobs[0].State)
	require.Len(t, jobs[0].Errors, 1)
}

func TestClock(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	c := testkit.NewClock(at)
	c.Add(time.Hour)
	require.Equal(t, at.Add(time.Hour), c.Now())
	c.Set(at)
	require.Equal(t, at, c.Now())
}
