package reconcile

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fibe-dev/billing/internal/provider"
)

// DefaultTimeout bounds one run when no reconcile_timeout is configured: a
// listing of three days of events may take longer than a money job's
// default timeout.
const DefaultTimeout = 10 * time.Minute

// DefaultWindow is how far back the periodic job lists: longer than the
// providers' own webhook retry windows (Stripe retries for up to three days),
// so an event is still listed when its last delivery attempt has failed.
const DefaultWindow = 72 * time.Hour

// Args is the periodic reconciliation of one provider.
type Args struct {
	Provider string `json:"provider"`
}

// Kind implements river.JobArgs.
func (Args) Kind() string { return "reconcile_provider" }

// InsertOpts: one pending run per provider at a time. A run is idempotent
// (every claim is claim-once), so a failed or rescued run is retried soon
// and often rather than discarded: attempts are cheap, and a discarded run
// leaves lost webhooks unrecovered until the next scheduled run.
func (Args) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: maxAttempts, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled}}}
}

const (
	maxAttempts = 10
	// retryStep and retryCap shape the linear backoff of NextRetry.
	retryStep = 5 * time.Second
	retryCap  = time.Minute
)

// Worker runs Args.
type Worker struct {
	river.WorkerDefaults[Args]
	Reconciler *Reconciler
	Window     time.Duration
	Now        func() time.Time
	// RunTimeout bounds one run; 0 means DefaultTimeout.
	RunTimeout time.Duration
}

// Timeout is RunTimeout. It also decides how soon River's rescuer may
// retry a run whose worker died: not before this has passed.
func (w *Worker) Timeout(*river.Job[Args]) time.Duration { return cmp.Or(w.RunTimeout, DefaultTimeout) }

// NextRetry backs off linearly (5s, 10s, ... up to a minute) instead of
// River's attempt^4: a run is idempotent, and the default would wait
// minutes before recovering a lost payment after two failed runs.
func (w *Worker) NextRetry(job *river.Job[Args]) time.Time {
	return time.Now().Add(min(time.Duration(job.Attempt)*retryStep, retryCap))
}

// Work lists the provider's events of the last Window and claims the lost ones.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	client := river.ClientFromContext[pgx.Tx](ctx)
	_, err := w.Reconciler.Run(ctx, client, job.Args.Provider, w.Now().Add(-w.Window), false)
	return err
}

// WorkerOptions configure Register.
type WorkerOptions struct {
	Pool *pgxpool.Pool
	// Listers list events, by provider (provider.Select of the program's
	// registry).
	Listers map[string]Lister
	// Schedule is when the leader reconciles each provider that lists
	// events; nil declares no periodic run.
	Schedule river.PeriodicSchedule
	// RunTimeout bounds one run; 0 means DefaultTimeout.
	RunTimeout time.Duration
	Now        func() time.Time // nil is time.Now
	Logger     *slog.Logger     // nil is slog.Default()
}

// Register adds the reconcile worker to workers and returns one periodic
// job per provider of opts.Listers that lists events (its API does, and
// its driver has an API key), on opts.Schedule. Only River's leader
// inserts periodic jobs, so one process reconciles at a time.
func Register(workers *river.Workers, opts WorkerOptions) []*river.PeriodicJob {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	w := &Worker{Reconciler: New(Options{Pool: opts.Pool, Listers: opts.Listers, Logger: opts.Logger}),
		Window: DefaultWindow, Now: opts.Now, RunTimeout: opts.RunTimeout}
	river.AddWorker(workers, w)
	if opts.Schedule == nil {
		return nil
	}
	var periodic []*river.PeriodicJob
	for _, p := range provider.Names() {
		if l := opts.Listers[p]; l == nil || l.Available(provider.Listing) != nil {
			continue
		}
		periodic = append(periodic, river.NewPeriodicJob(opts.Schedule,
			func() (river.JobArgs, *river.InsertOpts) { return Args{Provider: p}, nil },
			&river.PeriodicJobOpts{ID: "reconcile_" + p}))
	}
	return periodic
}
