package idempotency

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// ReapArgs is the periodic job that deletes expired keys.
type ReapArgs struct{}

// Kind implements river.JobArgs.
func (ReapArgs) Kind() string { return "idempotency_reap" }

// InsertOpts keeps at most one reap per hour however many leaders insert it.
func (ReapArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: time.Hour}}
}

// ReapWorker deletes keys older than TTL at its clock's now.
type ReapWorker struct {
	river.WorkerDefaults[ReapArgs]
	Store *Store
	Now   func() time.Time
}

// Work implements river.Worker.
func (w *ReapWorker) Work(ctx context.Context, _ *river.Job[ReapArgs]) error {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	n, err := w.Store.Reap(ctx, now().Add(-TTL))
	if err != nil {
		return err
	}
	return river.RecordOutput(ctx, map[string]int64{"deleted": n})
}

// WorkerOptions configure Register.
type WorkerOptions struct {
	Pool *pgxpool.Pool
	// Now is the reaper's clock; nil is time.Now.
	Now func() time.Time
}

// Register adds the reaper to workers and returns its periodic job.
func Register(workers *river.Workers, opts WorkerOptions) []*river.PeriodicJob {
	river.AddWorker(workers, &ReapWorker{Store: NewStore(opts.Pool, 0), Now: opts.Now})
	return []*river.PeriodicJob{PeriodicReap()}
}

// PeriodicReap runs the reaper hourly, and once when a leader starts.
func PeriodicReap() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return ReapArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
