package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/proctest"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/stripe"
	"github.com/fibe-dev/billing/wallet"
)

// waitEventJobs waits until every job of kind whose args name eventID is
// finalized (at least one), and returns them. Test goroutine only.
func (e *env) waitEventJobs(kind, eventID string) []jobRow {
	e.t.Helper()
	jobs, err := e.awaitEventJobs(kind, eventID)
	require.NoError(e.t, err)
	return jobs
}

// awaitEventJobs is waitEventJobs for any goroutine: it returns an error
// instead of failing the test.
func (e *env) awaitEventJobs(kind, eventID string) ([]jobRow, error) {
	jobs, err := testkit.Jobs(e.river).Await(testkit.KindWithArg(kind, "event_id", eventID), 1, testkit.WaitOptions{})
	return rows(jobs), err
}

// tryDeliver signs and posts body to srv, returning the answer's status
// field; safe from any goroutine.
func tryDeliver(srv *httptest.Server, provider string, body []byte) (string, error) {
	h, v := sign(provider, body, time.Now())
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/"+provider, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(h, v)
	res, err := srv.Client().Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return "", fmt.Errorf("answer %d: %w", res.StatusCode, err)
	}
	if res.StatusCode != http.StatusOK {
		// A refusal is problem+json, whose status is a number: say it whole.
		return "", fmt.Errorf("answer %d: %s", res.StatusCode, raw)
	}
	var a struct{ Status string }
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("answer %d: %w", res.StatusCode, err)
	}
	return a.Status, nil
}

// buy creates an order through provider and pays it with the order's one
// payment; it returns the order and its provider payment id.
func (e *env) buy(provider string) (*fulfillment.Order, string) {
	e.t.Helper()
	o := e.order("mana_1000", provider)
	evt := fmt.Sprintf("evt_pay_%s_%d", provider, o.ID)
	require.Equal(e.t, "claimed", e.deliver(provider, providerevents.CompletedEvent(provider, evt, o.ID, 999, "usd")).status())
	require.Equal(e.t, "completed", e.waitEventJobs("fulfill_order", evt)[0].State)
	return o, providerevents.OrderPaymentID(provider, strconv.FormatInt(o.ID, 10))
}

// deliverConcurrently posts n copies of body at once, alternately to the
// env's server and to a second web process over the same database, and
// returns how many were answered claimed and duplicate; safe from any
// goroutine.
func (e *env) deliverConcurrently(provider string, body []byte, n int) (claimed, duplicate int, err error) {
	statuses, errs := make([]string, n), make([]error, n)
	srvs := []*httptest.Server{e.srv, e.second}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { statuses[i], errs[i] = tryDeliver(srvs[i%2], provider, body) })
	}
	wg.Wait()
	for i, s := range statuses {
		switch {
		case errs[i] != nil:
			err = errs[i]
		case s == "claimed":
			claimed++
		case s == "duplicate":
			duplicate++
		}
	}
	return claimed, duplicate, err
}

func (e *env) walletOf(player int64) map[wallet.Currency]int64 {
	e.t.Helper()
	b, err := wallet.New(e.pool, wallet.Options{}).Balances(context.Background(), player)
	require.NoError(e.t, err)
	return b
}

// Every new event type, 10 concurrent copies per provider: one claim, one
// job, one clawback step.
func TestReversalEventsClaimedOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		provider, kind, state string
		amount, wantMana      int64 // amount refunded or disputed; Mana left of 1000
	}{
		{"stripe", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 500, 1000 - 501},
		{"stripe", fulfillment.ReversalDispute, fulfillment.StateOpen, 999, 0},
		{"stripe", fulfillment.ReversalDispute, fulfillment.StateLost, 999, 0},
		{"paddle", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, 0},
		{"paddle", fulfillment.ReversalDispute, fulfillment.StateLost, 100, 1000 - 101},
		{"creem", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 1, 1000 - 2},
		{"creem", fulfillment.ReversalDispute, fulfillment.StateOpen, 999, 0},
	}
	for _, c := range cases {
		t.Run(c.provider+"_"+c.kind+"_"+c.state, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			o, payment := e.buy(c.provider)
			evt := "evt_rev_" + c.kind + c.state
			body := providerevents.ReversalEvent(c.provider, evt, payment, "rv_1", c.kind, c.state, c.amount, "usd")
			require.NotNil(t, body)
			claimed, dup, err := e.deliverConcurrently(c.provider, body, 10)
			require.NoError(t, err)
			require.Equal(t, 1, claimed)
			require.Equal(t, 9, dup)
			jobs := e.waitEventJobs("reverse_payment", evt)
			require.Len(t, jobs, 1)
			require.Equal(t, "completed", jobs[0].State, jobs[0].Errors)
			require.Equal(t, 1, e.count(`SELECT count(*) FROM webhook_events WHERE event_id = $1`, evt))
			require.Equal(t, 1, e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'clawback'`))
			require.Equal(t, c.wantMana, e.mana())
			got := e.orderStatus(o.ID)
			require.Equal(t, 1000-c.wantMana, got.ClawedBackMana)
			want := fulfillment.StatusDisputed
			switch {
			case c.kind == fulfillment.ReversalDispute:
			case c.amount >= 999:
				want = fulfillment.StatusRefunded
			default:
				want = fulfillment.StatusPartiallyRefunded
			}
			require.Equal(t, want, got.Status)
			e.requireClean()
		})
	}
}

// stripeEvent is one delivery of a permutation test (of any provider).
type stripeEvent struct {
	id   string
	body []byte
	kind string // river job kind it enqueues
}

// orderEvents are the six events about one Stripe order: payment, async
// success of the same session, two partial refunds (cumulative
// amount_refunded 300 then 500), a dispute of 200 opened and lost.
func orderEvents(t *testing.T, orderID int64, tag string) []stripeEvent {
	t.Helper()
	pi := providerevents.OrderPaymentID("stripe", strconv.FormatInt(orderID, 10))
	async := providerevents.CompletedEvent("stripe", "evt_async_"+tag, orderID, 999, "usd")
	var m map[string]any
	require.NoError(t, json.Unmarshal(async, &m))
	m["type"] = stripe.EventAsyncPaymentSucceeded
	async, err := json.Marshal(m)
	require.NoError(t, err)
	refund := func(id string, cumulative int64) []byte {
		return providerevents.ReversalEvent("stripe", id, pi, "ch_"+tag, fulfillment.ReversalRefund, fulfillment.StateSucceeded, cumulative, "usd")
	}
	dispute := func(id, state string) []byte {
		return providerevents.ReversalEvent("stripe", id, pi, "dp_"+tag, fulfillment.ReversalDispute, state, 200, "usd")
	}
	return []stripeEvent{
		{"evt_pay_" + tag, providerevents.CompletedEvent("stripe", "evt_pay_"+tag, orderID, 999, "usd"), "fulfill_order"},
		{"evt_async_" + tag, async, "fulfill_order"},
		{"evt_ref1_" + tag, refund("evt_ref1_"+tag, 300), "reverse_payment"},
		{"evt_ref2_" + tag, refund("evt_ref2_"+tag, 500), "reverse_payment"},
		{"evt_dpc_" + tag, dispute("evt_dpc_"+tag, fulfillment.StateOpen), "reverse_payment"},
		{"evt_dpl_" + tag, dispute("evt_dpl_"+tag, fulfillment.StateLost), "reverse_payment"},
	}
}

// The six events of one order delivered in 100 seeded orders, each 1-3
// times (copies at once), sometimes without waiting for the previous
// event's job: every order ends with the same balance, clawback, debt and
// status, and the audit is clean. Lost money is min(999, 500 + 200) = 700
// cents, so ceil(1000 x 700 / 999) = 701 Mana is clawed back.
func TestReversalPermutations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	perms := proctest.Size(10, 100) // -short: 10 seeded orders
	orders := e.permutations("stripe", perms, func(o *fulfillment.Order, tag string) []stripeEvent {
		return orderEvents(t, o.ID, tag)
	})
	for seed, o := range orders {
		got := e.orderStatus(o.ID)
		require.Equal(t, fulfillment.StatusDisputed, got.Status, "seed %d", seed)
		require.Equal(t, int64(500), got.RefundedAmount, "seed %d", seed)
		require.Equal(t, int64(701), got.ClawedBackMana, "seed %d", seed)
	}
	require.Equal(t, int64(perms*(1000-701)), e.mana())
	require.Zero(t, e.count(`SELECT count(*) FROM debts WHERE outstanding <> 0`))
	require.Equal(t, perms, e.count(`SELECT count(*) FROM payments WHERE status = 'applied'`))
	e.requireClean()
}

// permutations opens perms orders of mana_1000 through provider and
// delivers each one's events (from events, tagged by seed) in its seed's
// order, eight orders at a time; it returns the orders by seed.
func (e *env) permutations(provider string, perms int, events func(o *fulfillment.Order, tag string) []stripeEvent) []*fulfillment.Order {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	orders := make([]*fulfillment.Order, perms)
	for seed := range perms {
		orders[seed] = e.order("mana_1000", provider)
		evs := events(orders[seed], fmt.Sprintf("%s%d", provider, seed))
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			e.deliverPermutation(provider, uint64(seed), evs)
		})
	}
	wg.Wait()
	return orders
}

// deliverPermutation delivers provider's events in seed's order from a
// worker goroutine: it reports through t.Errorf, never FailNow.
func (e *env) deliverPermutation(provider string, seed uint64, events []stripeEvent) {
	rng := rand.New(rand.NewPCG(seed, 13))
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	for _, ev := range events {
		claimed, _, err := e.deliverConcurrently(provider, ev.body, 1+rng.IntN(3))
		if err != nil || claimed != 1 {
			e.t.Errorf("seed %d: event %s claimed %d times (%v)", seed, ev.id, claimed, err)
			return
		}
		if rng.IntN(2) == 0 {
			if _, err := e.awaitEventJobs(ev.kind, ev.id); err != nil {
				e.t.Errorf("seed %d: %v", seed, err)
				return
			}
		}
	}
	for _, ev := range events {
		jobs, err := e.awaitEventJobs(ev.kind, ev.id)
		if err != nil {
			e.t.Errorf("seed %d: %v", seed, err)
		}
		for _, j := range jobs {
			if j.State != "completed" {
				e.t.Errorf("seed %d: event %s job %s: %v", seed, ev.id, j.State, j.Errors)
			}
		}
	}
}

// paddleEvents are four events about one Paddle order: the payment, a
// refund of 300, a chargeback of the whole 999 and its reversal (the
// dispute won after all), each an adjustment with an id of its own.
func paddleEvents(orderID int64, tag string) []stripeEvent {
	txn := providerevents.OrderPaymentID("paddle", strconv.FormatInt(orderID, 10))
	adj := func(id, kind, state string, amount int64) stripeEvent {
		return stripeEvent{id, providerevents.ReversalEvent("paddle", id, txn, "adj_"+id, kind, state, amount, "usd"), "reverse_payment"}
	}
	return []stripeEvent{
		{"evt_pay_" + tag, providerevents.CompletedEvent("paddle", "evt_pay_"+tag, orderID, 999, "usd"), "fulfill_order"},
		adj("evt_ref_"+tag, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 300),
		adj("evt_cb_"+tag, fulfillment.ReversalDispute, fulfillment.StateLost, 999),
		adj("evt_cbr_"+tag, fulfillment.ReversalDispute, fulfillment.StateWon, 999),
	}
}

// A Paddle chargeback reversed (chargeback_reverse) gives back what the
// chargeback took, once, in any arrival order: 40 seeded orders of the
// four events, each 1-3 times, all end with only the refund clawed back,
// ceil(1000 x 300 / 999) = 301 Mana, the order partially refunded and not
// disputed, and a clean audit. Before the reversal was read, every one of
// them kept the chargeback's 1000 Mana clawed back.
func TestPaddleChargebackReversedPermutations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	perms := proctest.Size(8, 40) // -short: 8 seeded orders
	orders := e.permutations("paddle", perms, func(o *fulfillment.Order, tag string) []stripeEvent {
		return paddleEvents(o.ID, tag)
	})
	for seed, o := range orders {
		got := e.orderStatus(o.ID)
		require.Equal(t, fulfillment.StatusPartiallyRefunded, got.Status, "seed %d", seed)
		require.Equal(t, int64(300), got.RefundedAmount, "seed %d", seed)
		require.Equal(t, int64(301), got.ClawedBackMana, "seed %d", seed)
	}
	require.Equal(t, int64(perms*(1000-301)), e.mana())
	require.Equal(t, perms, e.count(`SELECT count(*) FROM payment_reversals WHERE kind = 'dispute' AND state = 'won'`))
	e.requireClean()
}
