// Package jobs is the River runtime: the client, its queues, the error
// handler, job metrics and the no-op job.
//
// Each domain package owns its job args (with a stable Kind()), its worker
// and its Register function; the composition root (cmd/billing) registers
// them all into one bundle that NewClient runs. The web
// process builds a client without queues: it inserts jobs (InsertTx) and
// serves the River UI, but never works them.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/platform/telemetry"
)

// Queue names. Money paths get their own queues so a flood of one kind of
// work cannot starve the other. Each is defined once, by the domain whose
// jobs insert into it (their InsertOpts), and only named here, so the
// worker's queue configuration cannot drift from where jobs are sent.
const (
	QueueFunding     = enforcer.QueueFunding
	QueueFulfillment = fulfillment.QueueFulfillment
	QueueEvents      = events.QueueEvents
	QueueDefault     = river.QueueDefault
)

// Queues is the worker process's queue configuration. The money queues
// fetch with a 10 ms cooldown instead of River's 100 ms: a producer fetches
// at most once per cooldown and at most MaxWorkers jobs at a time, so
// River's default caps a queue near MaxWorkers*10 jobs/s, whatever the
// database could do: too few for the backlog of Marquees after midnight.
//
// The funding queue runs 300 jobs at once although they hold no connection
// while running: fund_day jobs are group-committed (enforcer/fundbatch.go),
// two transactions at a time, and a batch can only be as large as the jobs
// running together, so more workers mean fuller batches and fewer commits
// per job (docs/decisions/0005-group-commit.md; `billing-lab bench funding
// --max-workers N` measures it against the wallet's own debit rate).
func Queues() map[string]river.QueueConfig {
	const moneyCooldown = 10 * time.Millisecond
	return map[string]river.QueueConfig{
		QueueFunding:     {MaxWorkers: 300, FetchCooldown: moneyCooldown},
		QueueFulfillment: {MaxWorkers: 20, FetchCooldown: moneyCooldown},
		// Deliveries wait on receivers, never on the database: their own
		// queue, so a slow endpoint holds no money job back.
		QueueEvents:  {MaxWorkers: 50},
		QueueDefault: {MaxWorkers: 20},
	}
}

// Client is the River client type used throughout.
type Client = river.Client[pgx.Tx]

// Options configure NewClient.
type Options struct {
	Logger *slog.Logger
	// Workers and PeriodicJobs are nil for an insert-only (web) client.
	Workers      *river.Workers
	PeriodicJobs []*river.PeriodicJob
	// Queues overrides Queues() (tests use small ones); ignored without Workers.
	Queues map[string]river.QueueConfig
	// ID names the client in River's leader election and logs.
	ID string
	// FetchPollInterval overrides River's (tests shorten it).
	FetchPollInterval time.Duration
	// JobTimeout and RescueStuckJobsAfter override River's defaults (1m, 1h).
	JobTimeout           time.Duration
	RescueStuckJobsAfter time.Duration
}

// NewClient builds the River client over pool.
func NewClient(pool *pgxpool.Pool, opts Options) (*Client, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	cfg := &river.Config{
		ID:                opts.ID,
		Logger:            logger,
		ErrorHandler:      &errorHandler{logger: logger},
		Middleware:        append([]rivertype.Middleware{metricsMiddleware()}, telemetry.RiverMiddleware()...),
		FetchPollInterval: opts.FetchPollInterval,
		JobTimeout:        opts.JobTimeout,
		// River rescues a job left `running` by a dead process after this;
		// its default of an hour would leave a payment waiting that long.
		RescueStuckJobsAfter: opts.RescueStuckJobsAfter,
	}
	if opts.Workers != nil {
		cfg.Workers = opts.Workers
		cfg.PeriodicJobs = opts.PeriodicJobs
		cfg.Queues = opts.Queues
		if cfg.Queues == nil {
			cfg.Queues = Queues()
		}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("jobs: new client: %w", err)
	}
	return client, nil
}

// Stop stops a started client: a soft stop (running jobs finish) bounded by
// timeout, then a hard stop that cancels their contexts.
func Stop(ctx context.Context, client *Client, timeout time.Duration) error {
	soft, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := client.Stop(soft)
	if err == nil {
		return nil
	}
	hard, cancelHard := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelHard()
	if herr := client.StopAndCancel(hard); herr != nil {
		return fmt.Errorf("jobs: hard stop: %w", herr)
	}
	return nil
}

// errorHandler logs every job error with its kind and attempt, so retries are
// visible in logs as well as in the River UI.
type errorHandler struct{ logger *slog.Logger }

func (h *errorHandler) HandleError(ctx context.Context, job *rivertype.JobRow, err error) *river.ErrorHandlerResult {
	level := slog.LevelWarn
	var cancel *river.JobCancelError
	if errors.As(err, &cancel) || job.Attempt >= job.MaxAttempts {
		level = slog.LevelError
	}
	h.logger.Log(ctx, level, "job failed", "job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt,
		"max_attempts", job.MaxAttempts, "error", err.Error())
	return nil
}

func (h *errorHandler) HandlePanic(ctx context.Context, job *rivertype.JobRow, panicVal any, trace string) *river.ErrorHandlerResult {
	h.logger.ErrorContext(ctx, "job panicked", "job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt,
		"panic", fmt.Sprint(panicVal), "trace", trace)
	return nil
}
