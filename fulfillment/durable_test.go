package fulfillment_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/durable/durabletest"
	"github.com/fibe-dev/billing/wallet"
)

// errorsSeen is a River error handler that hands each job error to a test.
type errorsSeen chan error

func (e errorsSeen) HandleError(_ context.Context, _ *rivertype.JobRow, err error) *river.ErrorHandlerResult {
	select {
	case e <- err:
	default:
	}
	return nil
}

func (e errorsSeen) HandlePanic(context.Context, *rivertype.JobRow, any, string) *river.ErrorHandlerResult {
	return nil
}

// A fulfilment whose commit (credit, payment row and job completion in
// one transaction) no synchronous standby confirmed is a failed job, not
// a completed one: the worker returns durable.ErrNotDurable, so River
// retries it wherever the completion did not survive. Here the primary
// survives, with the credit and the completion together, once.
func TestFulfilmentNotDurableFailsTheJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	stranded := durabletest.Strand(t, pool.Config().ConnString())
	durabletest.CancelWaits(t, stranded)
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)

	seen := make(errorsSeen, 8)
	opts := fulfillment.WorkerOptions{Pool: stranded, Wallet: wallet.New(stranded, wallet.Options{}),
		Logger: slog.New(slog.DiscardHandler)}
	workers := river.NewWorkers()
	river.AddWorker(workers, fulfillment.NewWorker(opts))
	client, err := river.NewClient(riverpgxv5.New(stranded), &river.Config{
		Queues:       map[string]river.QueueConfig{fulfillment.QueueFulfillment: {MaxWorkers: 2}},
		Workers:      workers,
		ErrorHandler: seen, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), TestOnly: true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = client.Stop(stop)
	})

	o := checkout(t, pool, newPlayer(t, pool), "mana_1000", "stripe")
	pay(t, pool, inserter, "evt_unconfirmed_fulfil", o.ID, o.Amount, o.Currency)
	select {
	case err := <-seen:
		require.ErrorIs(t, err, durable.ErrNotDurable)
	case <-time.After(waitDeadline):
		t.Fatal("the fulfilment job never failed")
	}
	require.Equal(t, o.Mana, manaBalance(t, pool, o.PlayerID), "the primary applied it, once")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'fulfill_order' AND state = 'completed'`))
	requireClean(t, pool)
}
