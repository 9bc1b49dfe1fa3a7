package events

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	attemptsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_event_delivery_attempts_total",
		Help: "Event delivery attempts, by event type and endpoint id.",
	}, []string{"type", "endpoint"})
	failuresTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_event_delivery_failures_total",
		Help: "Event delivery attempts that failed (no answer, a timeout, a non-2xx), by event type and endpoint id.",
	}, []string{"type", "endpoint"})
	endpointsDisabled = promauto.NewCounter(prometheus.CounterOpts{
		Name: "billing_event_endpoints_disabled_total",
		Help: "Event endpoints disabled because every delivery to them failed for the whole retry schedule.",
	})
)

func countAttempt(d *delivery, a attempt) {
	endpoint := strconv.FormatInt(d.endpoint.ID, 10)
	attemptsTotal.WithLabelValues(d.eventType, endpoint).Inc()
	if !a.ok() {
		failuresTotal.WithLabelValues(d.eventType, endpoint).Inc()
	}
}

// Collector exports billing_events_oldest_undelivered_seconds (the age of
// the oldest pending delivery to an enabled endpoint; 0 when none) and
// billing_event_endpoints_disabled (endpoints disabled now), read from the
// database at scrape time so any process can serve them; aggregate with
// max, not sum.
type Collector struct {
	pool             *pgxpool.Pool
	oldest, disabled *prometheus.Desc
}

// NewCollector returns a collector over pool.
func NewCollector(pool *pgxpool.Pool) *Collector {
	return &Collector{pool: pool,
		oldest: prometheus.NewDesc("billing_events_oldest_undelivered_seconds",
			"Age of the oldest event delivery still pending to an enabled endpoint (0: none).", nil, nil),
		disabled: prometheus.NewDesc("billing_event_endpoints_disabled",
			"Event endpoints disabled now (by an operator or after failing the whole retry schedule).", nil, nil)}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.oldest; ch <- c.disabled }

// Collect implements prometheus.Collector; the partial index on pending
// deliveries keeps it cheap.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var age float64
	var disabled int64
	err := c.pool.QueryRow(ctx, `SELECT
		coalesce((SELECT extract(epoch FROM now() - min(d.created_at))::float8 FROM event_deliveries d
			JOIN event_endpoints p ON p.id = d.endpoint_id AND p.enabled WHERE d.state = 'pending'), 0),
		(SELECT count(*) FROM event_endpoints WHERE NOT enabled)`).Scan(&age, &disabled)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.oldest, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(c.disabled, prometheus.GaugeValue, float64(disabled))
}
