package fulfillment_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// payAll claims an event row and inserts the job of each of args in one
// transaction, so the jobs become available together and the workers
// fetch them in one batch and run them at once.
func payAll(t *testing.T, pool *pgxpool.Pool, client *river.Client[pgx.Tx], args []fulfillment.FulfillOrderArgs) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, a := range args {
		_, err = tx.Exec(ctx, `INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount,
			paid_currency, payload) VALUES ($5, $1, 'checkout.session.completed', $2, $3, $4, '{}')`,
			a.EventID, a.OrderID, a.PaidAmount, a.PaidCurrency, a.Provider)
		require.NoError(t, err)
		_, err = client.InsertTx(ctx, tx, a, nil)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
}

// Audit gap of issue 28: two distinct payments (other Checkout Sessions)
// for one unpaid order, worked at the same moment by concurrent workers.
// The order's row lock decides: exactly one payment mints, every other is
// recorded unapplied and its refund requested once. Without the lock both
// read the order unpaid, the second's credit replays the first's, and the
// order ends with two applied payments.
func TestDistinctPaymentsRaceForOneOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	refunder := &amountRefunder{}
	client := startRiverWith(t, pool, fulfillment.WorkerOptions{Refunders: map[string]fulfillment.Refunder{"stripe": refunder}})
	player := newPlayer(t, pool)
	const rounds, orders, payments = 3, 5, 2 // each round: 10 jobs, one per worker
	jobs := 0
	var all []*fulfillment.Order
	for range rounds {
		var args []fulfillment.FulfillOrderArgs
		for range orders {
			o := checkout(t, pool, player, "mana_1000", "stripe")
			all = append(all, o)
			for p := range payments {
				id := fmt.Sprintf("cs_%d_%d", o.ID, p)
				args = append(args, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_" + id, Provider: "stripe",
					PaidAmount: 999, PaidCurrency: "usd", PaymentID: id})
			}
		}
		payAll(t, pool, client, args)
		jobs += len(args)
		waitJobs(t, pool, jobs)
	}
	for _, o := range all {
		ps, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
		require.NoError(t, err)
		require.Len(t, ps, payments)
		var applied, refunded int
		for _, p := range ps {
			switch p.Status {
			case fulfillment.PaymentApplied:
				applied++
			case fulfillment.PaymentRefunded:
				refunded++
				require.Zero(t, p.ManaMinted)
			}
		}
		require.Equal(t, 1, applied, "order %d: exactly one payment mints", o.ID)
		require.Equal(t, payments-1, refunded, "order %d: every other is unapplied and refunded", o.ID)
	}
	require.Equal(t, int64(rounds*orders*1000), manaBalance(t, pool, player))
	keys := map[string]bool{}
	for _, r := range refunder.all() {
		keys[r.IdempotencyKey] = true
	}
	require.Len(t, keys, rounds*orders*(payments-1), "one refund per unapplied payment")
	requireClean(t, pool)
}
