package events

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/jobhold"
)

// QueueEvents is the River queue delivery jobs run on: slow receivers
// wait here, never on the money queues.
const QueueEvents = "events"

// DefaultSchedule is the wait after each failed attempt: 11 retries, 12
// attempts over about three days (71.6 hours plus the attempts'
// own time), each wait jittered by up to 10% either way.
var DefaultSchedule = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour,
	10 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour, 14 * time.Hour}

// DefaultTimeout bounds one attempt's request, answer included.
const DefaultTimeout = 10 * time.Second

// maxAttempts is River's bound on a delivery job. The worker ends a
// delivery itself after its schedule (len(schedule)+1 attempts); this
// only stops a job whose schedule was lengthened past it.
const maxAttempts = 25

// DeliverArgs is the job delivering one event to one endpoint.
type DeliverArgs struct {
	DeliveryID int64 `json:"delivery_id"`
}

// Kind implements river.JobArgs; stable, it is stored in river_job.
func (DeliverArgs) Kind() string { return "deliver_event" }

// InsertOpts puts the job on the events queue.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueEvents, MaxAttempts: maxAttempts}
}

// WorkerOptions configure the delivery worker.
type WorkerOptions struct {
	Pool *pgxpool.Pool
	// Timeout bounds one request (0: DefaultTimeout).
	Timeout time.Duration
	// Schedule is the wait after each failed attempt (nil: DefaultSchedule);
	// after its last, the delivery has failed.
	Schedule []time.Duration
	Now      func() time.Time // nil: time.Now
	Logger   *slog.Logger     // nil: slog.Default()
}

// Register adds the deliver_event worker to workers.
func Register(workers *river.Workers, opts WorkerOptions) []*river.PeriodicJob {
	river.AddWorker(workers, NewWorker(opts))
	return nil
}

// Worker works DeliverArgs.
type Worker struct {
	river.WorkerDefaults[DeliverArgs]
	pool     *pgxpool.Pool
	client   *http.Client
	timeout  time.Duration
	schedule []time.Duration
	now      func() time.Time
	logger   *slog.Logger
}

// NewWorker returns the deliver_event worker.
func NewWorker(opts WorkerOptions) *Worker {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Schedule == nil {
		opts.Schedule = DefaultSchedule
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	return &Worker{pool: opts.Pool, timeout: opts.Timeout, schedule: opts.Schedule, now: opts.Now, logger: opts.Logger,
		client: &http.Client{Transport: transport, Timeout: opts.Timeout,
			// A redirect is the receiver's answer, not a place to send the
			// event to: a 3xx is a failed attempt.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Timeout bounds the job: the request and the recording of its attempt.
func (w *Worker) Timeout(*river.Job[DeliverArgs]) time.Duration { return w.timeout + 30*time.Second }

// NextRetry is the schedule's wait after the job's attempt, jittered.
func (w *Worker) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	return w.now().Add(w.delay(job.Args.DeliveryID, job.Attempt))
}

// delay is the wait after attempt (1-based) of delivery id: the schedule's,
// moved by up to 10% either way by a jitter derived from both, so that
// deliveries failing together do not retry together, and so that the
// delivery row can show the same next attempt River schedules.
func (w *Worker) delay(id int64, attempt int) time.Duration {
	i := min(max(attempt, 1), len(w.schedule)) - 1
	h := fnv.New64a()
	_, _ = h.Write([]byte(strconv.FormatInt(id, 10) + ":" + strconv.Itoa(attempt)))
	frac := float64(h.Sum64()%10001)/10000*0.2 - 0.1
	d := w.schedule[i]
	return d + time.Duration(float64(d)*frac)
}

// Work sends the delivery once, outside any transaction, then records
// the attempt in a short one of its own.
func (w *Worker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	d, err := loadDelivery(ctx, w.pool, job.Args.DeliveryID)
	if errors.Is(err, pgx.ErrNoRows) {
		return w.missing(ctx, job)
	}
	if err != nil {
		return err
	}
	if d.state != statePending {
		return nil // delivered or ended by an earlier run whose completion was lost
	}
	if !d.endpoint.Enabled {
		if err := endDelivery(ctx, w.pool, d.id); err != nil {
			return err
		}
		return river.JobCancel(fmt.Errorf("events: endpoint %d is disabled; resend the event once it is enabled", d.endpoint.ID))
	}
	a := w.send(ctx, d)
	last := job.Attempt > len(w.schedule)
	if err := w.record(ctx, d, a, job.Attempt, last); err != nil {
		return err
	}
	countAttempt(d, a)
	switch {
	case a.ok():
		return nil
	case last:
		return river.JobCancel(fmt.Errorf("events: delivery %d of %s failed its whole schedule: %w", d.id, d.eventID, a.failure()))
	}
	return a.failure()
}

// missing cancels the job of a delivery that does not exist, once the
// server that gave the job out says so (jobhold): a former primary,
// answering for a moment beside its successor during a failover, lacks
// the deliveries written since it lost its role, and a cancel decided
// there would leave the event undelivered.
func (w *Worker) missing(ctx context.Context, job *river.Job[DeliverArgs]) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := jobhold.LockTx(ctx, tx, job.JobRow); err != nil {
		return err
	}
	_, err = loadDelivery(ctx, tx, job.Args.DeliveryID)
	switch {
	case err == nil:
		return fmt.Errorf("events: delivery %d is on the job's server though the first read found none (it reached a former primary); the job runs again", job.Args.DeliveryID)
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return err
	}
	return river.JobCancel(fmt.Errorf("events: delivery %d does not exist", job.Args.DeliveryID))
}
