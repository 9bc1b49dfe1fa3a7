package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/wallet"
)

// newIdleEnv is newEnv whose intake enqueues jobs that nothing works
// until startWorker: a job can then be cancelled or discarded before it
// ever ran, as an operator in the River UI (or a crashed attempt at its
// last retry) leaves it.
func newIdleEnv(t *testing.T) *env {
	t.Helper()
	pool := testdb.New(t)
	e := &env{t: t, pool: pool}
	o := webhook.Options{Pool: pool, River: insertOnlyClient(t, pool, false), Providers: intakes(secrets), Logger: discard}
	e.srv = httpServer(t, webhook.NewHandler(o))
	e.second = httpServer(t, webhook.NewHandler(o))
	p, _, err := players.Create(context.Background(), pool, "buyer")
	require.NoError(t, err)
	e.player = p.ID
	return e
}

func (e *env) startWorker() { e.river = startRiver(e.t, e.pool) }

// endJob ends every job of eventID in state (cancelled or discarded)
// before it ran, as the River UI's cancel or a last failed attempt does.
func (e *env) endJob(eventID, state string) {
	e.t.Helper()
	tag, err := e.pool.Exec(context.Background(), `UPDATE river_job SET state = $2, finalized_at = now()
		WHERE args->>'event_id' = $1 AND state = 'available'`, eventID, state)
	require.NoError(e.t, err)
	require.EqualValues(e.t, 1, tag.RowsAffected(), "no available job of %s", eventID)
}

type outcomeRow struct{ Outcome, Ref, Reason, PaymentRef string }

func (e *env) outcome(provider, eventID string) outcomeRow {
	e.t.Helper()
	var o outcomeRow
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `SELECT coalesce(outcome, ''), coalesce(outcome_ref, ''),
		coalesce(outcome_reason, ''), coalesce(payment_ref, '') FROM webhook_events WHERE provider = $1 AND event_id = $2`,
		provider, eventID).Scan(&o.Outcome, &o.Ref, &o.Reason, &o.PaymentRef))
	return o
}

// requireViolation runs the webhook audit and requires check among its
// findings for eventID.
func (e *env) requireViolation(check, eventID string) {
	e.t.Helper()
	vs, err := webhook.Audit(context.Background(), e.pool, webhook.AuditOptions{})
	require.NoError(e.t, err)
	for _, v := range vs {
		if v.Check == check && v.EventID == eventID {
			return
		}
	}
	e.t.Fatalf("audit did not report %s for %s: %v", check, eventID, vs)
}

// Finding 4: a claimed event whose job was cancelled or discarded before
// it decided is left with no outcome; ledger verify names it, and the
// provider's redelivery re-enqueues its work from the stored payload under
// the same claim: the refund claws the Mana back, the payment mints.
func TestRedeliveryRedrivesOrphanedEvent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ kind, state string }{
		{"reverse_payment", "cancelled"}, {"reverse_payment", "discarded"},
		{"fulfill_order", "cancelled"}, {"fulfill_order", "discarded"},
	} {
		t.Run(c.kind+" "+c.state, func(t *testing.T) {
			t.Parallel()
			e := newIdleEnv(t)
			o := e.order("mana_1000", "stripe")
			order := strconv.FormatInt(o.ID, 10)
			pay := providerevents.CompletedEvent("stripe", "evt_pay", o.ID, 999, "usd")
			refund := providerevents.ReversalEvent("stripe", "evt_refund", providerevents.OrderPaymentID("stripe", order),
				"ch_1", "refund", "succeeded", 999, "usd")
			require.Equal(t, "claimed", e.deliver("stripe", pay).status())
			require.Equal(t, "claimed", e.deliver("stripe", refund).status())
			orphan, body := "evt_refund", refund
			if c.kind == "fulfill_order" {
				orphan, body = "evt_pay", pay
			}
			e.endJob(orphan, c.state)
			e.startWorker()
			if c.kind == "reverse_payment" {
				require.Equal(t, "completed", e.waitEventJobs("fulfill_order", "evt_pay")[0].State)
				require.Equal(t, int64(1000), e.mana(), "paid, the refund's job never ran")
			} else {
				require.Equal(t, "completed", e.waitEventJobs("reverse_payment", "evt_refund")[0].State)
				require.Equal(t, "waiting", e.outcome("stripe", "evt_refund").Outcome)
			}
			require.Empty(t, e.outcome("stripe", orphan).Outcome)
			e.requireViolation("event_without_outcome", orphan)

			require.Equal(t, "duplicate", e.deliver("stripe", body).status())
			require.Equal(t, "completed", e.waitEventJobs(c.kind, orphan)[0].State)
			require.Zero(t, e.mana(), "minted once and clawed back in full, whatever ran first")
			require.Equal(t, "applied", e.outcome("stripe", "evt_pay").Outcome)
			require.Equal(t, "applied", e.outcome("stripe", "evt_refund").Outcome)
			e.requireClean()

			// Decided now: a further redelivery enqueues nothing.
			require.Equal(t, "duplicate", e.deliver("stripe", body).status())
			require.Equal(t, 2, e.count(`SELECT count(*)::int FROM river_job WHERE args->>'event_id' = $1`, orphan))
			e.requireClean()
		})
	}
}

// N redeliveries (through two web processes) and operator redrives of one
// orphaned refund, at once: one job is re-enqueued, the Mana clawed back
// once, and the audit is clean.
func TestRedriveRaceEnqueuesOnce(t *testing.T) {
	t.Parallel()
	e := newIdleEnv(t)
	o := e.order("mana_1000", "creem")
	order := strconv.FormatInt(o.ID, 10)
	refund := providerevents.ReversalEvent("creem", "evt_refund", providerevents.OrderPaymentID("creem", order),
		"rf_1", "refund", "succeeded", 999, "usd")
	require.Equal(t, "claimed", e.deliver("creem", providerevents.CompletedEvent("creem", "evt_pay", o.ID, 999, "usd")).status())
	require.Equal(t, "claimed", e.deliver("creem", refund).status())
	e.endJob("evt_refund", "cancelled")
	e.startWorker()
	require.Equal(t, "completed", e.waitEventJobs("fulfill_order", "evt_pay")[0].State)
	claimer := webhook.NewClaimer(webhook.Options{Pool: e.pool, River: e.river, Providers: intakes(secrets), Logger: discard})

	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	redriven := make([]bool, n)
	srvs := []*httptest.Server{e.srv, e.second}
	for i := range n {
		wg.Go(func() {
			if i%2 == 0 {
				redriven[i], errs[i] = claimer.Redrive(context.Background(), "creem", "evt_refund")
				return
			}
			status, err := tryDeliver(srvs[i/2%2], "creem", refund)
			if err == nil && status != "duplicate" {
				err = fmt.Errorf("answered %q", status)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, "completed", e.waitEventJobs("reverse_payment", "evt_refund")[0].State)
	require.Equal(t, 2, e.count(`SELECT count(*)::int FROM river_job WHERE args->>'event_id' = 'evt_refund'`),
		"the cancelled job and one re-enqueued")
	require.Zero(t, e.mana())
	require.Equal(t, "applied", e.outcome("creem", "evt_refund").Outcome)
	require.Equal(t, 8, e.count(`SELECT duplicate_deliveries::int FROM webhook_events WHERE event_id = 'evt_refund'`),
		"redrives are not deliveries")
	e.requireClean()
}

// Finding 5: a signed event whose envelope reads but whose object cannot
// be applied is answered 2xx, claimed, and recorded refused with its
// reason (naming the payment it names, for its timeline); nothing moves,
// no job runs, and a redelivery is a duplicate.
func TestUnappliableEventIsRefusedOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, paymentID := e.buy("stripe")
	po, txn := e.buy("paddle")
	paddleBad := bytes.Replace(providerevents.ReversalEvent("paddle", "evt_paddle_total", txn, "adj_1", "refund", "succeeded", 999, "usd"),
		[]byte(`"total":"999"`), []byte(`"total":"9.99"`), 1)
	require.Contains(t, string(paddleBad), `"total":"9.99"`)
	for _, c := range []struct {
		provider, eventID, reason, paymentRef string
		body                                  []byte
	}{
		{"stripe", "evt_neg_refund", "non-negative amount", paymentID, []byte(`{"id":"evt_neg_refund","type":"charge.refunded",` +
			`"data":{"object":{"id":"ch_1","amount_refunded":-999,"currency":"usd","payment_intent":"` + paymentID + `"}}}`)},
		{"stripe", "evt_dispute_no_id", "dispute id", paymentID, []byte(`{"id":"evt_dispute_no_id","type":"charge.dispute.created",` +
			`"data":{"object":{"amount":999,"currency":"usd","status":"needs_response","payment_intent":"` + paymentID + `"}}}`)},
		{"paddle", "evt_paddle_total", "not an integer", txn, paddleBad},
		{"stripe", "evt_no_order", "order id", "", []byte(`{"id":"evt_no_order","type":"checkout.session.completed",` +
			`"data":{"object":{"amount_total":999,"currency":"usd","payment_status":"paid","metadata":{"order_id":"abc"}}}}`)},
	} {
		a := e.deliver(c.provider, c.body)
		require.Equal(t, 200, a.Status, "%s: %v", c.eventID, a.Body)
		require.Equal(t, "claimed", a.status())
		got := e.outcome(c.provider, c.eventID)
		require.Equal(t, "refused", got.Outcome, c.eventID)
		require.Contains(t, got.Reason, c.reason, c.eventID)
		require.Equal(t, c.paymentRef, got.PaymentRef, c.eventID)
		require.Equal(t, "duplicate", e.deliver(c.provider, c.body).status())
	}
	require.Equal(t, int64(2000), e.mana(), "nothing moved")
	require.Zero(t, e.count(`SELECT count(*)::int FROM reversal_events`))
	require.Zero(t, e.count(`SELECT count(*)::int FROM river_job WHERE kind = 'reverse_payment'`))
	require.Equal(t, o.Mana, e.orderStatus(o.ID).Mana)
	require.Equal(t, po.Mana, e.orderStatus(po.ID).Mana)
	refused, err := webhook.List(context.Background(), e.pool, webhook.ListParams{Outcome: "refused"})
	require.NoError(t, err)
	require.Len(t, refused, 4)
	e.requireClean()
}

// The single-delivery claim (claimOne: reconciliation's path, and every
// delivery of a failed batch) inserts its job inside the claim's
// transaction: a COMMIT that fails after the job insert leaves neither the
// claim nor the job. (A job inserted on its own connection would survive
// the failed COMMIT, and the event would be fulfilled with no claim.)
func TestClaimOneCommitFailureLeavesNoJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.order("mana_1000", "paddle")
	body := providerevents.CompletedEvent("paddle", "evt_commit_fails", o.ID, 999, "usd")
	ev, err := intakes(secrets)["paddle"].Parse(body)
	require.NoError(t, err)
	opts := webhook.Options{Pool: e.pool, River: insertOnlyClient(t, e.pool, false), Logger: discard}
	var jobsSeen int
	webhook.OnBeforeCommit(&opts, func(ctx context.Context, tx pgx.Tx) {
		// The job is in: count it here, then poison the transaction so its
		// COMMIT answers ROLLBACK.
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'event_id' = 'evt_commit_fails'`).Scan(&jobsSeen))
		_, _ = tx.Exec(ctx, `SELECT 1/0`)
	})
	won, err := webhook.NewClaimer(opts).Claim(context.Background(), ev, body)
	require.Error(t, err)
	require.False(t, won)
	require.Equal(t, 1, jobsSeen, "the hook runs after the job insert")
	require.Zero(t, e.events(), "the failed commit left a claim")
	require.Zero(t, e.count(`SELECT count(*)::int FROM river_job`), "the failed commit left a job")
	e.requireClean()
}

// A refund naming a payment billing never saw waits for it (outcome
// waiting); after its grace period decide-pending refuses it, on the event
// and as its outcome, and a later payment does not revive it. A payment
// for an order that does not exist is refused; one that does not match its
// order too, with the reason.
func TestWaitingAndRefusedOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	o := e.order("mana_1000", "paddle")
	txn := providerevents.OrderPaymentID("paddle", strconv.FormatInt(o.ID, 10))
	refund := providerevents.ReversalEvent("paddle", "evt_early", txn, "adj_1", "refund", "succeeded", 999, "usd")
	require.Equal(t, "claimed", e.deliver("paddle", refund).status())
	require.Equal(t, "completed", e.waitEventJobs("reverse_payment", "evt_early")[0].State)
	require.Equal(t, outcomeRow{Outcome: "waiting", Reason: "payment " + txn + " is not known yet", PaymentRef: txn},
		e.outcome("paddle", "evt_early"))

	w := fulfillment.NewReverseWorker(fulfillment.WorkerOptions{Pool: e.pool, Wallet: wallet.New(e.pool, wallet.Options{}),
		Logger: discard})
	refused, err := w.RefuseUnknown(ctx, fulfillment.UnknownPaymentGrace)
	require.NoError(t, err)
	require.Empty(t, refused, "within its grace period it waits")
	_, err = e.pool.Exec(ctx, `UPDATE reversal_events SET received_at = now() - interval '73 hours'`)
	require.NoError(t, err)
	refused, err = w.RefuseUnknown(ctx, fulfillment.UnknownPaymentGrace)
	require.NoError(t, err)
	require.Equal(t, []fulfillment.EventKey{{Provider: "paddle", EventID: "evt_early"}}, refused)
	require.Equal(t, "refused", e.outcome("paddle", "evt_early").Outcome)
	require.Equal(t, fulfillment.ReasonUnknownPayment, e.outcome("paddle", "evt_early").Reason)
	e.requireClean()

	require.Equal(t, "claimed", e.deliver("paddle", providerevents.CompletedEvent("paddle", "evt_pay", o.ID, 999, "usd")).status())
	require.Equal(t, "completed", e.waitEventJobs("fulfill_order", "evt_pay")[0].State)
	require.Equal(t, int64(1000), e.mana(), "a refused refund claws nothing back")
	require.Equal(t, "refused", e.outcome("paddle", "evt_early").Outcome)
	require.Contains(t, e.outcome("paddle", "evt_pay").Ref, "wallet_transaction:")

	require.Equal(t, "claimed", e.deliver("creem", providerevents.CompletedEvent("creem", "evt_ghost", 987654, 999, "usd")).status())
	require.Equal(t, "cancelled", e.waitEventJobs("fulfill_order", "evt_ghost")[0].State)
	require.Equal(t, outcomeRow{Outcome: "refused", Reason: "order 987654 does not exist"}, e.outcome("creem", "evt_ghost"))

	m := e.order("mana_1000", "stripe")
	require.Equal(t, "claimed", e.deliver("stripe", providerevents.CompletedEvent("stripe", "evt_short", m.ID, 1, "usd")).status())
	require.Equal(t, "cancelled", e.waitEventJobs("fulfill_order", "evt_short")[0].State)
	require.Equal(t, "refused", e.outcome("stripe", "evt_short").Outcome)
	require.Contains(t, e.outcome("stripe", "evt_short").Reason, "paid 1 usd, order snapshot is 999 usd")
	e.requireClean()
}
