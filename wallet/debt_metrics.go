package wallet

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// DebtCollector exports billing_outstanding_debt_mana (all open debts, in
// Mana) and billing_debtors, read from the database at scrape time so any
// process can serve them; aggregate with max, not sum.
type DebtCollector struct {
	pool          *pgxpool.Pool
	mana, debtors *prometheus.Desc
}

// NewDebtCollector returns a collector over pool.
func NewDebtCollector(pool *pgxpool.Pool) *DebtCollector {
	return &DebtCollector{pool: pool,
		mana:    prometheus.NewDesc("billing_outstanding_debt_mana", "Mana owed by players after refunds and chargebacks.", nil, nil),
		debtors: prometheus.NewDesc("billing_debtors", "Players with an open debt.", nil, nil)}
}

// Describe implements prometheus.Collector.
func (c *DebtCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.mana; ch <- c.debtors }

// Collect implements prometheus.Collector. The partial index on open debts
// keeps it cheap: only owing players are read.
func (c *DebtCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var total, n int64
	err := c.pool.QueryRow(ctx, `SELECT coalesce(sum(outstanding), 0), count(*) FROM debts WHERE outstanding > 0`).Scan(&total, &n)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.mana, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.mana, prometheus.GaugeValue, float64(total))
	ch <- prometheus.MustNewConstMetric(c.debtors, prometheus.GaugeValue, float64(n))
}
