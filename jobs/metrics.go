package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fibe-dev/billing/fulfillment"
)

var (
	jobsWorked = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_river_jobs_worked_total",
		Help: "River jobs worked by this process, by kind and outcome (completed, retryable, discarded, cancelled, snoozed).",
	}, []string{"kind", "outcome"})
	jobDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "billing_river_job_duration_seconds",
		Help:    "Time spent in a River worker, by kind and outcome.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"kind", "outcome"})
)

// init exports zeros for the money jobs' outcomes, so an alert on
// increase() sees the first cancelled fulfilment (a payment mismatch).
func init() {
	for _, kind := range []string{fulfillment.FulfillOrderArgs{}.Kind(), fulfillment.ReversePaymentArgs{}.Kind()} {
		for _, o := range []string{"completed", "retryable", "discarded", "cancelled", "snoozed"} {
			jobsWorked.WithLabelValues(kind, o)
		}
	}
}

func metricsMiddleware() rivertype.Middleware {
	return river.WorkerMiddlewareFunc(func(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
		start := time.Now()
		err := doInner(ctx)
		outcome := Outcome(job, err)
		jobsWorked.WithLabelValues(job.Kind, outcome).Inc()
		jobDuration.WithLabelValues(job.Kind, outcome).Observe(time.Since(start).Seconds())
		return err
	})
}

// Outcome names what River will do with a job that returned err.
func Outcome(job *rivertype.JobRow, err error) string {
	var cancel *river.JobCancelError
	var snooze *river.JobSnoozeError
	switch {
	case err == nil:
		return "completed"
	case errors.As(err, &cancel):
		return "cancelled"
	case errors.As(err, &snooze):
		return "snoozed"
	case job.Attempt >= job.MaxAttempts:
		return "discarded"
	default:
		return "retryable"
	}
}

// StateCollector exports the number of River jobs by kind and state, read
// from the database at scrape time, so any process (web or worker) can
// answer "how many fund_day jobs are retryable right now?".
type StateCollector struct {
	pool *pgxpool.Pool
	desc *prometheus.Desc
}

// NewStateCollector returns a collector over pool; register it once.
func NewStateCollector(pool *pgxpool.Pool) *StateCollector {
	return &StateCollector{pool: pool, desc: prometheus.NewDesc("billing_river_jobs",
		"River jobs currently in the database, by kind and state.", []string{"kind", "state"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, `SELECT kind, state::text, count(*) FROM river_job GROUP BY 1, 2`)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var kind, state string
		var n float64
		if err := rows.Scan(&kind, &state, &n); err != nil {
			ch <- prometheus.NewInvalidMetric(c.desc, err)
			return
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, n, kind, state)
	}
}
