package enforcer

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/internal/platform/groupcommit"
	"github.com/fibe-dev/billing/internal/platform/rivercomplete"
	"github.com/fibe-dev/billing/wallet"
)

// Options configure a Service.
type Options struct {
	// TZ is the service-day time zone; nil is UTC.
	TZ *time.Location
	// Now is the clock of all funding logic; nil is time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// BatchSize is how many Marquees a sweep reads and enqueues per
	// transaction; 0 is DefaultBatchSize.
	BatchSize int
	// SweepWorkers is how many batches a sweep inserts at once; 0 is
	// DefaultSweepWorkers.
	SweepWorkers int
	// FundBatch caps how many fund_day jobs are funded in one transaction;
	// 0 is DefaultFundBatch.
	FundBatch int
	// Complete is how a batch's fund_day jobs are completed
	// (BILLING_BATCH_COMPLETE); "" is rivercomplete.ModePilot.
	Complete rivercomplete.Mode
	// FundAhead, when positive, makes each periodic sweep within FundAhead
	// of midnight also fund the next day (SweepTick; BILLING_FUND_AHEAD).
	FundAhead time.Duration
}

// Sweep defaults: DefaultBatchSize bounds a sweep's memory and transaction
// size; DefaultSweepWorkers overlaps reading with inserting.
const (
	DefaultBatchSize    = 1000
	DefaultSweepWorkers = 2
)

// Service sweeps and funds Marquees.
type Service struct {
	pool      *pgxpool.Pool
	wallet    *wallet.Store
	tz        *time.Location
	now       func() time.Time
	logger    *slog.Logger
	batchSize int
	// sweepWorkers insert batches concurrently.
	sweepWorkers int
	fundAhead    time.Duration
	complete     rivercomplete.Mode
	hooks        hooks
	// funder group-commits fund_day jobs (fundbatch.go).
	funder *groupcommit.Batcher[fundItem, *FundResult]
}

// hooks let tests fail or inspect a fund_day transaction at its critical
// points; nil in production.
type hooks struct {
	afterPost    func(ctx context.Context, tx pgx.Tx, job *river.Job[FundDayArgs]) error
	beforeCommit func(ctx context.Context, tx pgx.Tx, job *river.Job[FundDayArgs]) error
}

// New returns a Service that debits through w.
func New(pool *pgxpool.Pool, w *wallet.Store, opts Options) *Service {
	s := &Service{pool: pool, wallet: w, tz: opts.TZ, now: opts.Now, logger: opts.Logger, batchSize: opts.BatchSize}
	if s.tz == nil {
		s.tz = time.UTC
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if s.batchSize <= 0 {
		s.batchSize = DefaultBatchSize
	}
	s.fundAhead = opts.FundAhead
	s.complete = cmp.Or(opts.Complete, rivercomplete.ModePilot)
	s.sweepWorkers = opts.SweepWorkers
	if s.sweepWorkers <= 0 {
		s.sweepWorkers = DefaultSweepWorkers
	}
	if opts.FundBatch <= 0 {
		opts.FundBatch = DefaultFundBatch
	}
	s.funder = groupcommit.New(s.fundBatch, groupcommit.Options{MaxBatch: opts.FundBatch})
	return s
}

// TZ is the service-day time zone.
func (s *Service) TZ() *time.Location { return s.tz }

// WorkerOptions configure Register.
type WorkerOptions struct {
	// Service funds the Marquees (required).
	Service *Service
	// Schedule is when the elected leader sweeps; nil declares no periodic
	// sweep (a process that only works fund_day jobs).
	Schedule river.PeriodicSchedule
}

// Register adds the fund_day and sweep workers of opts.Service to workers
// and returns the enforcer's periodic job: the sweep on opts.Schedule.
// Every worker process must declare it (only the elected leader inserts
// it).
func Register(workers *river.Workers, opts WorkerOptions) []*river.PeriodicJob {
	river.AddWorker(workers, &FundDayWorker{svc: opts.Service})
	river.AddWorker(workers, &SweepWorker{svc: opts.Service})
	if opts.Schedule == nil {
		return nil
	}
	return []*river.PeriodicJob{PeriodicSweep(opts.Schedule)}
}

// PeriodicSweep is the enforcer's periodic job. RunOnStart makes a newly
// elected leader sweep at once, so a leader change never skips a tick.
func PeriodicSweep(schedule river.PeriodicSchedule) *river.PeriodicJob {
	return river.NewPeriodicJob(schedule, func() (river.JobArgs, *river.InsertOpts) {
		return SweepArgs{}, nil
	}, &river.PeriodicJobOpts{ID: "enforcer_sweep", RunOnStart: true})
}
