package fulfillment_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/platform/jobhold"
	"github.com/fibe-dev/billing/wallet"
)

// A payment job's worker can reach a former primary, resumed beside its
// successor, while River gives the job out and records its end on the new
// one. There the worker finds neither the order nor the claim: a decision
// made there (an unknown order, a refused reversal) must not count. Here
// the former primary is a second database with the schema and none of the
// primary's rows; before jobhold, the fulfilment was cancelled as an
// unknown order and the reversal as refused, on the primary, with neither
// event's outcome there (invariant 11) and no Mana minted. Now both jobs
// fail with jobhold.ErrNotHeld, write nothing on the former primary, and run
// again on the primary, where the order is fulfilled once and the
// reversal refused with its outcome: the audit is clean.
func TestDecisionOnAFormerPrimaryDoesNotCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, former := testdb.New(t), testdb.New(t)
	inserter, err := river.NewClient(riverpgxv5.New(primary), &river.Config{})
	require.NoError(t, err)

	seen := make(errorsSeen, 8)
	opts := fulfillment.WorkerOptions{Pool: former, Wallet: wallet.New(former, wallet.Options{}),
		Logger: slog.New(slog.DiscardHandler)}
	workers := river.NewWorkers()
	fulfillment.Register(workers, opts)
	astray, err := river.NewClient(riverpgxv5.New(primary), &river.Config{
		Queues:       map[string]river.QueueConfig{fulfillment.QueueFulfillment: {MaxWorkers: 2}},
		Workers:      workers,
		ErrorHandler: seen, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), TestOnly: true,
	})
	require.NoError(t, err)
	require.NoError(t, astray.Start(ctx))

	o := checkout(t, primary, newPlayer(t, primary), "mana_1000", "stripe")
	pay(t, primary, inserter, "evt_on_former_primary", o.ID, o.Amount, o.Currency)
	reverse(t, primary, inserter, fulfillment.ReversePaymentArgs{Provider: "stripe", EventID: "evt_refund_on_former_primary",
		PaymentID: "pi_unknown", ReversalID: "re_1", ReversalKind: fulfillment.ReversalRefund, State: "bogus", Amount: 1, Currency: "usd"})
	// Each job's first attempt ends: before jobhold, in a cancel.
	var first []struct {
		State string
		Err   string
	}
	deadline := time.Now().Add(waitDeadline)
	for len(first) < 2 {
		require.True(t, time.Now().Before(deadline), "the jobs' first attempts never ended")
		rows, err := primary.Query(ctx, `SELECT state, coalesce(errors[1]->>'error', '') FROM river_job
			WHERE kind IN ('fulfill_order', 'reverse_payment') AND (errors IS NOT NULL OR finalized_at IS NOT NULL)`)
		require.NoError(t, err)
		first, err = pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			State string
			Err   string
		}])
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
	}
	for _, j := range first {
		require.NotContains(t, []string{"cancelled", "completed", "discarded"}, j.State, "decided on the former primary: %s", j.Err)
		require.Contains(t, j.Err, jobhold.ErrNotHeld.Error())
	}
	select {
	case err := <-seen:
		require.ErrorIs(t, err, jobhold.ErrNotHeld)
	default:
		t.Fatal("River's error handler saw no error")
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, astray.Stop(stop))
	for _, table := range []string{"payments", "reversal_events", "webhook_events", "wallet_transactions"} {
		require.Zero(t, count(t, former, `SELECT count(*) FROM `+table), "the former primary was written: %s", table)
	}

	startRiver(t, primary)
	jobs := waitJobs(t, primary, 1)
	require.Equal(t, "completed", jobs[0].State, "errors: %v", jobs[0].Errors)
	refund := testkit.JobsOn(primary).Wait(t, testkit.Kind("reverse_payment"), 1, testkit.WaitOptions{})
	require.Equal(t, "cancelled", string(refund[0].State))
	require.Equal(t, o.Mana, manaBalance(t, primary, o.PlayerID))
	require.Equal(t, 1, count(t, primary, `SELECT count(*) FROM webhook_events
		WHERE event_id = 'evt_refund_on_former_primary' AND outcome = 'refused'`))
	requireClean(t, primary)
}
