package fulfillment_test

import (
	"context"
	"testing"
	"time"

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
	workers := river.NewWorkers()
	fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: former, Wallet: wallet.New(former, wallet.Options{}),
		Logger: testkit.Quiet})
	astray, _ := testkit.StartRiver(t, primary, testkit.RiverOptions{Workers: workers})

	o := checkout(t, primary, newPlayer(t, primary), "mana_1000", "stripe")
	pay(t, primary, inserter, "evt_on_former_primary", o.ID, o.Amount, o.Currency)
	reverse(t, primary, inserter, fulfillment.ReversePaymentArgs{Provider: "stripe", EventID: "evt_refund_on_former_primary",
		PaymentID: "pi_unknown", ReversalID: "re_1", ReversalKind: fulfillment.ReversalRefund, State: "bogus", Amount: 1, Currency: "usd"})
	// Each job's first attempt ends: before jobhold, in a cancel.
	first := testkit.FirstAttempts(t, primary, 2, "fulfill_order", "reverse_payment")
	for _, j := range first {
		require.NotContains(t, []string{"cancelled", "completed", "discarded"}, j.State, "decided on the former primary: %s", j.Err)
		require.Contains(t, j.Err, jobhold.ErrNotHeld.Error())
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, astray.Stop(stop))
	for _, table := range []string{"payments", "reversal_events", "webhook_events", "wallet_transactions"} {
		require.Zero(t, count(t, former, `SELECT count(*) FROM `+table), "the former primary was written: %s", table)
	}

	watched := testkit.Jobs(startRiver(t, primary))
	jobs := watched.Wait(t, testkit.Kind("fulfill_order"), 1, testkit.WaitOptions{})
	require.Equal(t, "completed", string(jobs[0].State), "errors: %v", jobs[0].Errors)
	refund := watched.Wait(t, testkit.Kind("reverse_payment"), 1, testkit.WaitOptions{})
	require.Equal(t, "cancelled", string(refund[0].State))
	require.Equal(t, o.Mana, manaBalance(t, primary, o.PlayerID))
	require.Equal(t, 1, count(t, primary, `SELECT count(*) FROM webhook_events
		WHERE event_id = 'evt_refund_on_former_primary' AND outcome = 'refused'`))
	requireClean(t, primary)
}
