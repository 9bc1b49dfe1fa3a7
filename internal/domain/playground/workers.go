package playground

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/jobhold"
)

// CreateArgs moves a new playground to running.
type CreateArgs struct {
	PlaygroundID int64 `json:"playground_id"`
}

// Kind implements river.JobArgs; stable, it is stored in river_job.
func (CreateArgs) Kind() string { return "playground_create" }

// RestartArgs records a restart.
type RestartArgs struct {
	PlaygroundID int64 `json:"playground_id"`
}

// Kind implements river.JobArgs.
func (RestartArgs) Kind() string { return "playground_restart" }

// SyncArgs records a sync.
type SyncArgs struct {
	PlaygroundID int64 `json:"playground_id"`
}

// Kind implements river.JobArgs.
func (SyncArgs) Kind() string { return "playground_sync" }

// The row change each job makes; $1 is the playground, $2 the job's now.
const (
	createSQL  = `UPDATE playgrounds SET status = 'running', running_at = COALESCE(running_at, $2) WHERE id = $1 RETURNING ` + columns
	restartSQL = `UPDATE playgrounds SET restarted_at = $2, restart_count = restart_count + 1 WHERE id = $1 RETURNING ` + columns
	syncSQL    = `UPDATE playgrounds SET synced_at = $2, sync_count = sync_count + 1 WHERE id = $1 RETURNING ` + columns
)

// WorkerOptions configure the workers.
type WorkerOptions struct {
	Pool *pgxpool.Pool
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Register adds the create, restart and sync workers to workers.
// Playgrounds have no periodic job.
func Register(workers *river.Workers, opts WorkerOptions) []*river.PeriodicJob {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	river.AddWorker(workers, &CreateWorker{opts: opts})
	river.AddWorker(workers, &RestartWorker{opts: opts})
	river.AddWorker(workers, &SyncWorker{opts: opts})
	return nil
}

// CreateWorker works CreateArgs.
type CreateWorker struct {
	river.WorkerDefaults[CreateArgs]
	opts WorkerOptions
}

// Work implements river.Worker.
func (w *CreateWorker) Work(ctx context.Context, job *river.Job[CreateArgs]) error {
	return work(ctx, w.opts, job, job.Args.PlaygroundID, createSQL)
}

// RestartWorker works RestartArgs.
type RestartWorker struct {
	river.WorkerDefaults[RestartArgs]
	opts WorkerOptions
}

// Work implements river.Worker.
func (w *RestartWorker) Work(ctx context.Context, job *river.Job[RestartArgs]) error {
	return work(ctx, w.opts, job, job.Args.PlaygroundID, restartSQL)
}

// SyncWorker works SyncArgs.
type SyncWorker struct {
	river.WorkerDefaults[SyncArgs]
	opts WorkerOptions
}

// Work implements river.Worker.
func (w *SyncWorker) Work(ctx context.Context, job *river.Job[SyncArgs]) error {
	return work(ctx, w.opts, job, job.Args.PlaygroundID, syncSQL)
}

// work applies update to the playground, records it as the job's output and
// completes the job, all in one transaction. A missing playground or a
// Marquee no longer funded cancels the job (visible in the River UI and as
// a cancelled request) rather than retrying it.
func work[T river.JobArgs](ctx context.Context, opts WorkerOptions, job *river.Job[T], id int64, update string) error {
	now := opts.Now()
	tx, err := opts.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// A former primary, answering beside its successor during a failover,
	// may lack the playground or its funding: no cancel is decided there.
	if err := jobhold.LockTx(ctx, tx, job.JobRow); err != nil {
		return err
	}
	pg, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM playgrounds WHERE id = $1 FOR UPDATE`, id))
	if err != nil {
		return cancelIfNotFound(err, id)
	}
	m, err := enforcer.GetMarquee(ctx, tx, pg.PlayerID, pg.MarqueeID)
	if err != nil {
		return err
	}
	if !enforcer.Funded(m, now) {
		return river.JobCancel(fmt.Errorf("playground %d: marquee %d: %w", id, m.ID, enforcer.ErrNotFunded))
	}
	if pg, err = scan(tx.QueryRow(ctx, update, id, now)); err != nil {
		return err
	}
	if err := river.RecordOutput(ctx, OutputOf(pg)); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("playground: complete job: %w", err)
	}
	return durable.Commit(ctx, tx)
}

func cancelIfNotFound(err error, id int64) error {
	if errors.Is(err, ErrNotFound) {
		return river.JobCancel(fmt.Errorf("playground %d: %w", id, err))
	}
	return err
}

// Output is what a playground job records as its River output: the
// playground after the job, which GET /v1/requests/{id} answers as the
// request's result. It is a stored format, like the jobs' args, so its
// names never change.
type Output struct {
	ID           int64      `json:"id,string"`
	MarqueeID    int64      `json:"marquee_id,string"`
	Name         string     `json:"name"`
	Status       string     `json:"status"`
	CreatedAt    time.Time  `json:"created_at"`
	RunningAt    *time.Time `json:"running_at"`
	RestartedAt  *time.Time `json:"restarted_at"`
	RestartCount int        `json:"restart_count"`
	SyncedAt     *time.Time `json:"synced_at"`
	SyncCount    int        `json:"sync_count"`
}

// OutputOf is p as a job records it.
func OutputOf(p *Playground) Output {
	return Output{ID: p.ID, MarqueeID: p.MarqueeID, Name: p.Name, Status: p.Status, CreatedAt: p.CreatedAt,
		RunningAt: p.RunningAt, RestartedAt: p.RestartedAt, RestartCount: p.RestartCount, SyncedAt: p.SyncedAt,
		SyncCount: p.SyncCount}
}
