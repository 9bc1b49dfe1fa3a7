package fulfillment_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/audit"
	"github.com/fibe-dev/billing/internal/audit/audittest"
	"github.com/fibe-dev/billing/internal/testdb"
	"github.com/fibe-dev/billing/players"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var catalogue = map[string]fulfillment.SKU{
	"mana_1000": {Amount: 999, Currency: "usd", Mana: 1000},
	"mana_5000": {Amount: 3999, Currency: "usd", Mana: 5000},
}

// startRiver starts a River client that works fulfill_order jobs on pool
// and stops it when the test ends (before the pool closes).
func startRiver(t *testing.T, pool *pgxpool.Pool) *river.Client[pgx.Tx] {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, fulfillment.NewWorker(fulfillment.WorkerOptions{
		Pool: pool, Logger: slog.New(slog.DiscardHandler)}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{fulfillment.QueueFulfillment: {MaxWorkers: 10}},
		Workers:           workers,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		TestOnly:          true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return client
}

func newPlayer(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	p, _, err := players.Create(context.Background(), pool, "buyer")
	require.NoError(t, err)
	return p.ID
}

// pay does what webhook intake does for a completed payment: claim an event
// row and insert its job, in one transaction.
func pay(t *testing.T, pool *pgxpool.Pool, client *river.Client[pgx.Tx], eventID string, orderID, amount int64, currency string) {
	t.Helper()
	ctx := context.Background()
	tx := testdb.Begin(t, pool)
	_, err := tx.Exec(ctx, `INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount,
		paid_currency, payload) VALUES ('stripe', $1, 'checkout.session.completed', $2, $3, $4, '{}')`,
		eventID, orderID, amount, currency)
	require.NoError(t, err)
	_, err = client.InsertTx(ctx, tx, fulfillment.FulfillOrderArgs{OrderID: orderID, EventID: eventID,
		Provider: "stripe", PaidAmount: amount, PaidCurrency: currency}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

type jobRow struct {
	State  string
	Errors []string
}

// waitJobs waits until n fulfill_order jobs exist and all are finalized,
// and returns them in id order.
func waitJobs(t *testing.T, pool *pgxpool.Pool, n int) []jobRow {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rows, err := pool.Query(ctx, `SELECT state::text, coalesce((SELECT array_agg(e->>'error') FROM jsonb_array_elements(to_jsonb(errors)) e), '{}')
			FROM river_job WHERE kind = 'fulfill_order' ORDER BY id`)
		require.NoError(t, err)
		jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[jobRow])
		require.NoError(t, err)
		done := len(jobs) == n
		for _, j := range jobs {
			done = done && (j.State == "completed" || j.State == "cancelled" || j.State == "discarded")
		}
		if done {
			return jobs
		}
		if time.Now().After(deadline) {
			t.Fatalf("fulfill_order jobs not finalized in time: %+v (want %d)", jobs, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func manaBalance(t *testing.T, pool *pgxpool.Pool, playerID int64) int64 {
	t.Helper()
	b, err := wallet.New(pool, wallet.Options{}).Balances(context.Background(), playerID)
	require.NoError(t, err)
	return b[wallet.Mana]
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// requireClean runs the full audit: every invariant.
func requireClean(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	audittest.RequireClean(t, pool, audit.Options{})
}
