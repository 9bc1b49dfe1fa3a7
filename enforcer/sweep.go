package enforcer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"golang.org/x/sync/errgroup"
)

// SweepOptions tune one sweep.
type SweepOptions struct {
	// At is the instant whose service day is swept; zero is the clock's now.
	// Operators set it to replay a missed day.
	At time.Time
	// PaidFrom, when set, limits the sweep to Marquees already paid through
	// at least this instant: funding ahead (SweepTick) pays tomorrow only
	// for Marquees whose today is paid, and leaves the others to the sweep
	// of their own day.
	PaidFrom time.Time
	// Progress, when set, is called after each batch with the totals so far.
	Progress func(SweepResult)
	// DryRun enqueues nothing: the sweep pages the due Marquees as it
	// would, and counts as Enqueued those it would enqueue and as
	// AlreadyQueued those whose job for the day is queued already.
	DryRun bool
	// Planned, when set on a dry run, receives each batch's Marquees that
	// would be enqueued (calls are serialised).
	Planned func(ids []int64)
}

// SweepResult summarises a sweep.
type SweepResult struct {
	Day           string        `json:"day"`
	Seen          int           `json:"seen"`           // due Marquees found
	Enqueued      int           `json:"enqueued"`       // fund_day jobs inserted
	AlreadyQueued int           `json:"already_queued"` // skipped: the same (Marquee, day) was queued
	Took          time.Duration `json:"took"`
}

// Sweep enqueues one fund_day job for every running Marquee that is not paid
// through the end of the service day at opts.At. One goroutine pages
// through due Marquees by id (keyset pagination) while a few others insert
// the previous pages, a batch per transaction: memory stays bounded however
// many Marquees there are, and the database works on reads and inserts at
// once. Concurrent sweeps are safe: River's unique index referees.
func (s *Service) Sweep(ctx context.Context, client *river.Client[pgx.Tx], opts SweepOptions) (*SweepResult, error) {
	started := time.Now() // instrumentation only; the logic uses at
	at := opts.At
	if at.IsZero() {
		at = s.now()
	}
	res := &SweepResult{Day: ServiceDay(at, s.tz)}
	end := EndOfServiceDay(at, s.tz)
	var mu sync.Mutex // guards res and the progress callback
	batches := make(chan []int64, s.sweepWorkers)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(batches)
		return s.pageDue(gctx, end, opts.PaidFrom, batches)
	})
	for range s.sweepWorkers {
		g.Go(func() error {
			for ids := range batches {
				enqueued, dup, planned, err := s.sweepBatch(gctx, client, ids, res.Day, opts.DryRun)
				if err != nil {
					return err
				}
				mu.Lock()
				if opts.Planned != nil && len(planned) > 0 {
					opts.Planned(planned)
				}
				res.Seen += len(ids)
				res.Enqueued += enqueued
				res.AlreadyQueued += dup
				res.Took = time.Since(started)
				if opts.Progress != nil {
					opts.Progress(*res)
				}
				mu.Unlock()
			}
			return nil
		})
	}
	err := g.Wait()
	res.Took = time.Since(started)
	if err != nil || opts.DryRun {
		return res, err
	}
	sweepsTotal.Inc()
	sweepDuration.Observe(res.Took.Seconds())
	s.logger.InfoContext(ctx, "enforcer sweep", "day", res.Day, "seen", res.Seen, "enqueued", res.Enqueued,
		"already_queued", res.AlreadyQueued, "took", res.Took.Round(time.Millisecond).String())
	return res, nil
}

// pageDue sends the ids of due Marquees, batchSize at a time, in id order.
func (s *Service) pageDue(ctx context.Context, end, paidFrom time.Time, out chan<- []int64) error {
	var after int64
	var from *time.Time
	if !paidFrom.IsZero() {
		from = &paidFrom
	}
	for {
		ids, err := dueMarquees(ctx, s.pool, after, end, from, s.batchSize)
		if err != nil || len(ids) == 0 {
			return err
		}
		select {
		case out <- ids:
		case <-ctx.Done():
			return ctx.Err()
		}
		if len(ids) < s.batchSize {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// sweepBatch enqueues ids' jobs for day, or on a dry run only says which
// it would enqueue.
func (s *Service) sweepBatch(ctx context.Context, client *river.Client[pgx.Tx], ids []int64, day string, dryRun bool) (enqueued, dup int, planned []int64, err error) {
	if !dryRun {
		enqueued, dup, err = s.enqueueBatch(ctx, client, ids, day)
		return enqueued, dup, nil, err
	}
	planned, err = notQueued(ctx, s.pool, ids, day)
	return len(planned), len(ids) - len(planned), planned, err
}

// notQueued returns the ids among ids whose fund_day job for day is not in
// a state that makes River skip a new one (fundDayUniqueStates): the jobs
// a sweep would insert. The args containment uses River's GIN index.
func notQueued(ctx context.Context, db DB, ids []int64, day string) ([]int64, error) {
	states := make([]string, len(fundDayUniqueStates))
	for i, st := range fundDayUniqueStates {
		states[i] = string(st)
	}
	rows, err := db.Query(ctx, `SELECT id FROM unnest($1::bigint[]) AS m(id)
		WHERE NOT EXISTS (SELECT 1 FROM river_job j WHERE j.kind = 'fund_day'
			AND j.args @> jsonb_build_object('marquee_id', m.id, 'day', $2::text) AND j.state::text = ANY($3))
		ORDER BY id`, ids, day, states)
	if err != nil {
		return nil, fmt.Errorf("enforcer: dry run: queued fund_day jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("enforcer: dry run: queued fund_day jobs: %w", err)
	}
	return out, nil
}

// enqueueBatch inserts the fund_day jobs of ids for day in one transaction
// and returns how many were new and how many already queued.
func (s *Service) enqueueBatch(ctx context.Context, client *river.Client[pgx.Tx], ids []int64, day string) (enqueued, dup int, err error) {
	// Keyset pagination yields each id once, so the batch holds no two
	// identical unique jobs (River refuses those, SQLSTATE 21000); the map
	// guards the invariant should the query ever change.
	seen := make(map[int64]struct{}, len(ids))
	params := make([]river.InsertManyParams, 0, len(ids))
	for _, id := range ids {
		if _, ok := seen[id]; ok {
			continue
		}
		seen[id] = struct{}{}
		params = append(params, river.InsertManyParams{Args: FundDayArgs{MarqueeID: id, Day: day}})
	}
	for attempt := 1; ; attempt++ {
		enqueued, dup, err = insertBatch(ctx, s.pool, client, params)
		if !isDeadlock(err) {
			break
		}
		sweepDeadlocks.Inc()
		if attempt == sweepBatchAttempts {
			break
		}
		s.logger.WarnContext(ctx, "enforcer sweep: batch chosen as a deadlock victim, running it again",
			"day", day, "marquees", len(params), "attempt", attempt, "err", err)
		select {
		case <-time.After(time.Duration(attempt) * sweepDeadlockPause):
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	if err != nil {
		return 0, 0, err
	}
	jobsEnqueued.Add(float64(enqueued))
	jobsSkippedDuplicate.Add(float64(dup))
	return enqueued, dup, nil
}

// A sweep's batch locks the fund_day rows already queued for its Marquees,
// in Marquee order (River's unique insert updates the row it conflicts
// with), while a funding batch completing its jobs locks the same rows in
// its own order; the two can deadlock, and PostgreSQL then aborts one of
// them. Funding is retried by River; a sweep batch only inserts unique
// jobs, so running it again is safe, and it is run again a few times, after
// a short pause that lets the other transaction finish, before the sweep
// gives up (an operator's `billing sweep` would otherwise fail for a race
// it cannot act on).
const (
	sweepBatchAttempts = 5
	sweepDeadlockPause = 20 * time.Millisecond
)

// insertBatch inserts params in one transaction and counts the new and the
// already queued jobs.
func insertBatch(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], params []river.InsertManyParams) (enqueued, dup int, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		results, err := client.InsertManyTx(ctx, tx, params)
		if err != nil {
			return fmt.Errorf("enforcer: enqueue fund_day batch: %w", err)
		}
		for _, r := range results {
			if r.UniqueSkippedAsDuplicate {
				dup++
			} else {
				enqueued++
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return enqueued, dup, nil
}

// deadlockDetected is SQLSTATE deadlock_detected.
const deadlockDetected = "40P01"

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == deadlockDetected
}

// dueMarquees returns ids of running Marquees after `after`, in id order,
// whose paid_through does not reach end.
func dueMarquees(ctx context.Context, db DB, after int64, end time.Time, paidFrom *time.Time, limit int) ([]int64, error) {
	rows, err := db.Query(ctx, `SELECT id FROM marquees
		WHERE desired_state = 'running' AND id > $1 AND (paid_through IS NULL OR paid_through < $2)
		AND ($4::timestamptz IS NULL OR paid_through >= $4)
		ORDER BY id LIMIT $3`, after, end, limit, paidFrom)
	if err != nil {
		return nil, fmt.Errorf("enforcer: due marquees: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("enforcer: due marquees: %w", err)
	}
	return ids, nil
}

// SweepArgs is the periodic sweep job.
type SweepArgs struct{}

// Kind implements river.JobArgs.
func (SweepArgs) Kind() string { return "enforcer_sweep" }

// InsertOpts implements river.JobArgsWithInsertOpts. Sweeps are not unique:
// a sweep whose worker died would stay "running" until River rescues it and
// would block every sweep meanwhile; overlapping sweeps are harmless.
func (SweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: river.QueueDefault, MaxAttempts: sweepMaxAttempts}
}

// A sweep fails only when the database does (a failover, an outage), and
// the next scheduled sweep would do its work anyway. So it retries soon and
// for longer than a failover takes, rather than being discarded while the
// primary changes: a discarded job pages an operator (BillingJobsDiscarded)
// for nothing. With these values its retries span about four minutes, the
// waits alone, each at most a minute, so a sweep follows the database's
// return within a minute.
const (
	sweepMaxAttempts = 10
	sweepRetryStep   = 5 * time.Second
	sweepRetryCap    = time.Minute
)

// SweepWorker works the periodic sweep.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	svc *Service
}

// The sweep runs under the client's job timeout (BILLING_JOB_TIMEOUT, 1m by
// default), far longer than a sweep needs: it only pages Marquees and
// enqueues jobs (`billing-lab bench funding --sweep-marquees N` times one). A
// longer per-kind timeout would also delay River's rescue of a sweep whose
// leader was killed mid-run by that long, since the rescuer waits out the
// job's timeout first. A timed-out or rescued sweep is simply run again: it
// only enqueues unique jobs.

// NextRetry backs off linearly (5 s, 10 s, ... at most a minute) instead of
// River's attempt^4, which would leave the day unswept for minutes after the
// database is back.
func (w *SweepWorker) NextRetry(job *river.Job[SweepArgs]) time.Time {
	return time.Now().Add(sweepRetryDelay(job.Attempt))
}

func sweepRetryDelay(attempt int) time.Duration {
	return min(time.Duration(attempt)*sweepRetryStep, sweepRetryCap)
}

// Work implements river.Worker.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	_, err := w.svc.SweepTick(ctx, river.ClientFromContext[pgx.Tx](ctx))
	return err
}

// SweepTick is one tick of the periodic sweep: the current service day,
// then, when funding ahead is on (Options.FundAhead) and the next day
// begins within it, the next day for the Marquees whose current day is
// paid. Tomorrow's debit then happens before midnight, so a funded Marquee
// stays funded across it instead of answering 402 until the first sweep of
// the new day. Each day keeps its own job and wallet key: funding ahead
// can never pay a day twice.
func (s *Service) SweepTick(ctx context.Context, client *river.Client[pgx.Tx]) ([]*SweepResult, error) {
	now := s.now()
	today, err := s.Sweep(ctx, client, SweepOptions{At: now})
	if err != nil || s.fundAhead <= 0 {
		return []*SweepResult{today}, err
	}
	next := now.Add(s.fundAhead)
	if ServiceDay(next, s.tz) == today.Day {
		return []*SweepResult{today}, nil
	}
	ahead, err := s.Sweep(ctx, client, SweepOptions{At: next, PaidFrom: EndOfServiceDay(now, s.tz)})
	return []*SweepResult{today, ahead}, err
}
