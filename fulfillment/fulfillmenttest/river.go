// Package fulfillmenttest starts what tests of the payment path share: a
// real River client working fulfill_order and reverse_payment jobs.
package fulfillmenttest

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
)

// StartRiver starts a River client that works fulfill_order and
// reverse_payment jobs on pool with opts (refunders, clock; Pool and a
// silent Logger are set here), polling fast, and stops it when the test
// ends, before the pool closes.
func StartRiver(t testing.TB, pool *pgxpool.Pool, opts fulfillment.WorkerOptions) *river.Client[pgx.Tx] {
	t.Helper()
	opts.Pool, opts.Logger = pool, slog.New(slog.DiscardHandler)
	workers := river.NewWorkers()
	river.AddWorker(workers, fulfillment.NewWorker(opts))
	river.AddWorker(workers, fulfillment.NewReverseWorker(opts))
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
