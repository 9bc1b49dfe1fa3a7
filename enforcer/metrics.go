package enforcer

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	sweepsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "billing_enforcer_sweeps_total",
		Help: "Enforcer sweeps completed.",
	})
	sweepDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "billing_enforcer_sweep_duration_seconds",
		Help:    "Time a sweep took to page through Marquees and enqueue their fund_day jobs.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
	jobsEnqueued = promauto.NewCounter(prometheus.CounterOpts{
		Name: "billing_enforcer_jobs_enqueued_total",
		Help: "fund_day jobs inserted by sweeps.",
	})
	jobsSkippedDuplicate = promauto.NewCounter(prometheus.CounterOpts{
		Name: "billing_enforcer_jobs_skipped_duplicate_total",
		Help: "fund_day jobs a sweep found already queued (River unique skip).",
	})
	sweepDeadlocks = promauto.NewCounter(prometheus.CounterOpts{
		Name: "billing_enforcer_sweep_deadlocks_total",
		Help: "Sweep batch transactions PostgreSQL aborted as a deadlock's victim; a batch is run again until its fifth attempt.",
	})
	fundingsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_fundings_total",
		Help: "fund_day outcomes committed: funded, already_paid, insufficient, stopped.",
	}, []string{"outcome"})
	fundingLag = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "billing_funding_lag_seconds",
		Help:    "How far into its service day a Marquee got funded.",
		Buckets: []float64{1, 5, 15, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 25 * 3600},
	})
	fundBatchSize = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "billing_funding_batch_size",
		Help:    "fund_day jobs funded together in one transaction (group commit); mostly 1 means the funding queue runs too few workers to batch.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})
)

func init() {
	for _, o := range []Outcome{OutcomeFunded, OutcomeAlreadyPaid, OutcomeInsufficient, OutcomeStopped, OutcomeNotDue} {
		fundingsTotal.WithLabelValues(string(o)) // export zeros, so rate() works from the first scrape
	}
}

// UnfundedCollector exports billing_marquees_unfunded: running Marquees not
// funded at scrape time, read from the database so any process can serve it.
// Register one per process (e.g. beside jobs.StateCollector in web).
type UnfundedCollector struct {
	pool *pgxpool.Pool
	now  func() time.Time
	desc *prometheus.Desc
}

// NewUnfundedCollector returns a collector over pool; now nil is time.Now.
func NewUnfundedCollector(pool *pgxpool.Pool, now func() time.Time) *UnfundedCollector {
	if now == nil {
		now = time.Now
	}
	return &UnfundedCollector{pool: pool, now: now, desc: prometheus.NewDesc("billing_marquees_unfunded",
		"Running Marquees whose paid_through is not after now (the API answers 402 for them).", nil, nil)}
}

// Describe implements prometheus.Collector.
func (c *UnfundedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *UnfundedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	n, err := CountUnfunded(ctx, c.pool, c.now())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}

// CountUnfunded counts running Marquees not funded at now.
func CountUnfunded(ctx context.Context, db DB, now time.Time) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM marquees
		WHERE desired_state = 'running' AND (paid_through IS NULL OR paid_through <= $1)`, now).Scan(&n)
	return n, err
}
