package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/proctest"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/wallet"
)

// A model of the provider's truth, written apart from the worker: it reads
// a history of what the provider did (payments, refunds, disputes, each as
// the provider's own event) and says where the books must end, whatever
// order and however many times the events arrive.
//
// The rules it encodes are the contract's (docs/contract.md, "The
// provider's truth"): one payment per provider object; an event counts
// when it is in the payment's currency; a refund's fact is its largest
// amount (Stripe's amount_refunded is cumulative); a dispute's is its
// largest amount and furthest state (open < lost < won); the money gone is
// min(paid, refunds + open or lost disputes), and ceil(1000 x gone / 999)
// Mana of the 1000 minted is clawed back; Mana below zero is debt.

// step is one thing the provider did, in the model's terms.
type step struct {
	what     string // pay, pay_unpaid, refund, dispute, ignored, unknown
	id       string // the reversal's id: a charge, adjustment, refund or dispute
	state    string // a dispute's state
	amount   int64
	currency string
	alias    bool // a Stripe payment event that carries the PaymentIntent
}

// truthHistory is one order's history with one provider.
type truthHistory struct {
	provider string
	steps    []step
}

// truthOutcome is where one order's books end.
type truthOutcome struct {
	mana, debt, refunded, clawed int64
	status                       string
	accepted, refused            int // reversal events of the payment
}

const truthPaid, truthMinted = 999, 1000

func (h truthHistory) paid() bool {
	for _, s := range h.steps {
		if s.what == "pay" {
			return true
		}
	}
	return false
}

// outcome is the model: where the books end after every step, starting
// from a debt of debt Mana (Mana and Sparks at zero).
func (h truthHistory) outcome(debt int64) truthOutcome {
	out := truthOutcome{status: fulfillment.StatusPending}
	if !h.paid() { // not paid (yet): its reversals wait, pending
		out.debt = debt
		return out
	}
	refunds, disputes, states := map[string]int64{}, map[string]int64{}, map[string]int{}
	rank := map[string]int{"open": 1, "lost": 2, "won": 3}
	for _, s := range h.steps {
		if s.what != "refund" && s.what != "dispute" {
			continue
		}
		if !strings.EqualFold(s.currency, "usd") {
			out.refused++
			continue
		}
		out.accepted++
		if s.what == "refund" {
			refunds[s.id] = max(refunds[s.id], s.amount)
			continue
		}
		disputes[s.id] = max(disputes[s.id], s.amount)
		states[s.id] = max(states[s.id], rank[s.state])
	}
	var refunded, disputed int64
	for _, a := range refunds {
		refunded += a
	}
	for id, a := range disputes {
		if states[id] < rank["won"] {
			disputed += a
		}
	}
	gone := min(truthPaid, refunded+disputed)
	out.clawed = min(truthMinted, (truthMinted*gone+truthPaid-1)/truthPaid)
	out.refunded = min(truthPaid, refunded)
	net := truthMinted - debt - out.clawed
	out.mana, out.debt = max(0, net), max(0, -net)
	switch {
	case disputed > 0:
		out.status = fulfillment.StatusDisputed
	case out.refunded >= truthPaid:
		out.status = fulfillment.StatusRefunded
	case out.refunded > 0:
		out.status = fulfillment.StatusPartiallyRefunded
	default:
		out.status = fulfillment.StatusFulfilled
	}
	return out
}

// truthHistories are the histories the model test delivers: one order's
// every kind of event with each provider, amounts below, equal to and
// above the charge, the wrong currency, and events naming a payment that
// does not exist. Stripe's two differ in how the payment arrives: a
// completed session without its PaymentIntent then the async success with
// it, or both events with it.
func truthHistories() []truthHistory {
	usd := func(what, id, state string, amount int64) step {
		return step{what: what, id: id, state: state, amount: amount, currency: "usd"}
	}
	stripeReversals := []step{
		usd("refund", "charge", "", 300), usd("refund", "charge", "", 500), usd("refund", "charge", "", 5000),
		{what: "refund", id: "charge", amount: 999, currency: "eur"},
		usd("dispute", "dp0", "open", 1001), usd("dispute", "dp0", "lost", 1005),
		usd("dispute", "dp1", "open", 999), usd("dispute", "dp1", "won", 999),
		{what: "ignored"}, usd("unknown", "ghost", "", 999),
	}
	return []truthHistory{
		{"stripe", append([]step{{what: "pay"}, {what: "pay", alias: true}}, stripeReversals...)},
		{"stripe", append([]step{{what: "pay", alias: true}, {what: "pay", alias: true}}, stripeReversals[1:]...)},
		{"paddle", []step{{what: "pay"}, usd("refund", "rf0", "", 300), usd("refund", "rf1", "", 200),
			{what: "refund", id: "rf2", amount: 999, currency: "EUR"}, {what: "ignored"},
			usd("dispute", "chargeback", "lost", 1001), usd("dispute", "chargeback", "won", 1001),
			usd("unknown", "ghost", "", 300)}},
		{"creem", []step{{what: "pay"}, usd("refund", "rf0", "", 100), usd("refund", "rf1", "", 5000),
			{what: "refund", id: "rf2", amount: 999, currency: "eur"}, usd("dispute", "dp0", "open", 1001),
			usd("unknown", "ghost", "", 999)}},
	}
}

// render turns history h of order into the provider's events, ids tagged.
func (h truthHistory) render(t *testing.T, order int64, tag string) []stripeEvent {
	t.Helper()
	ord := strconv.FormatInt(order, 10)
	pay := providerevents.OrderPaymentID(h.provider, ord)
	var out []stripeEvent
	for i, s := range h.steps {
		ev := fmt.Sprintf("evt_%s_%d", tag, i)
		switch s.what {
		case "pay", "pay_unpaid":
			out = append(out, stripeEvent{ev, renderPayment(t, h.provider, ev, order, i, s), "fulfill_order"})
		case "ignored":
			out = append(out, stripeEvent{ev, renderIgnored(t, h.provider, ev, pay), ""})
		default:
			ref := pay
			if s.what == "unknown" {
				ref = pay + "_ghost"
			}
			kind, state := fulfillment.ReversalRefund, fulfillment.StateSucceeded
			if s.what == "dispute" {
				kind, state = fulfillment.ReversalDispute, s.state
			}
			id := s.id + "_" + tag
			if h.provider == "stripe" && kind == fulfillment.ReversalRefund {
				id = "ch_" + tag + "_" + s.id
			}
			body := providerevents.ReversalEvent(h.provider, ev, ref, id, kind, state, s.amount, s.currency)
			require.NotNil(t, body, "%s %+v", h.provider, s)
			out = append(out, stripeEvent{ev, body, "reverse_payment"})
		}
	}
	return out
}

// renderPayment is a completed payment of order; for Stripe without its
// PaymentIntent unless s.alias, and the later ones as async successes.
func renderPayment(t *testing.T, provider, ev string, order int64, i int, s step) []byte {
	body := providerevents.CompletedEvent(provider, ev, order, truthPaid, "usd")
	if provider != "stripe" {
		return body
	}
	return editJSON(t, body, func(m map[string]any) {
		obj := m["data"].(map[string]any)["object"].(map[string]any)
		if !s.alias {
			obj["payment_intent"] = nil
		}
		if s.what == "pay_unpaid" {
			obj["payment_status"] = "unpaid"
		}
		if i > 0 {
			m["type"] = "checkout.session.async_payment_succeeded"
		}
	})
}

// renderIgnored is an event the provider sends that moves no money.
func renderIgnored(t *testing.T, provider, ev, pay string) []byte {
	switch provider {
	case "stripe":
		body := providerevents.ReversalEvent(provider, ev, pay, "dp_upd", fulfillment.ReversalDispute, fulfillment.StateOpen, 999, "usd")
		return editJSON(t, body, func(m map[string]any) { m["type"] = "charge.dispute.updated" })
	case "paddle":
		body := providerevents.ReversalEvent(provider, ev, pay, "adj_pending_"+ev, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd")
		return editJSON(t, body, func(m map[string]any) {
			m["data"].(map[string]any)["status"] = []string{"pending_approval", "rejected"}[len(ev)%2]
		})
	}
	return editJSON(t, providerevents.CompletedEvent(provider, ev, 1, 1, "usd"), func(m map[string]any) { m["eventType"] = "subscription.paid" })
}

func editJSON(t *testing.T, body []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	edit(m)
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

// truthCase is one seeded delivery order of a history, on its own player
// and order.
type truthCase struct {
	seed    uint64
	history truthHistory
	debt    int64
	player  int64
	order   *fulfillment.Order
	events  []stripeEvent
}

// Each history of truthHistories delivered in 200 seeded orders, every
// event 1-3 times with copies at the same moment on two intake handlers,
// each order on a player who may start owing: every order ends where the
// model says (Mana, Sparks, debt, order status, refunded amount, clawed
// back Mana, which events counted), and the audit is clean. A failing
// order prints its seed and its delivery order. Under -short it delivers
// the first 5 orders of each history.
func TestProviderTruthModel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orders := proctest.Size(5, 200) // -short: the first 5 orders of each history
	var cases []*truthCase
	for h, history := range truthHistories() {
		for i := range orders {
			cases = append(cases, e.truthCase(history, uint64(h*orders+i)))
		}
	}
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			e.deliverTruth(c)
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	for _, c := range cases {
		e.requireTruth(c)
	}
	e.requireClean()
}

// truthCase opens the order of one delivery order, on a new player who
// starts owing a seeded debt (so clawbacks reach into debt and a mint
// settles it first).
func (e *env) truthCase(h truthHistory, seed uint64) *truthCase {
	e.t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	c := &truthCase{seed: seed, history: h, debt: []int64{0, 0, 300, 1200}[rng.IntN(4)]}
	var err error
	c.player, err = newPlayerID(ctx, e)
	require.NoError(e.t, err)
	if c.debt > 0 {
		tx, err := e.pool.Begin(ctx)
		require.NoError(e.t, err)
		_, err = wallet.New(e.pool, wallet.Options{}).ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: c.player,
			Mana: c.debt, Key: wallet.CallerKey(fmt.Sprintf("test:earlier-debt:%d", c.player)), Reference: "an earlier clawback"})
		require.NoError(e.t, err)
		require.NoError(e.t, tx.Commit(ctx))
	}
	c.order, err = fulfillment.CreateCheckout(ctx, e.pool, catalogue,
		fulfillment.CheckoutParams{PlayerID: c.player, SKU: "mana_1000", Provider: h.provider})
	require.NoError(e.t, err)
	c.events = h.render(e.t, c.order.ID, fmt.Sprintf("t%d", seed))
	rng.Shuffle(len(c.events), func(i, j int) { c.events[i], c.events[j] = c.events[j], c.events[i] })
	return c
}

func newPlayerID(ctx context.Context, e *env) (int64, error) {
	p, _, err := players.Create(ctx, e.pool, "truth")
	if err != nil {
		return 0, err
	}
	return p.ID, nil
}

// deliverTruth delivers c's events in its order from a worker goroutine,
// each 1-3 times at once on the two handlers, sometimes without waiting
// for the job of the one before; it reports through t.Errorf.
func (e *env) deliverTruth(c *truthCase) {
	rng := rand.New(rand.NewPCG(c.seed, 11))
	for _, ev := range c.events {
		claimed, _, err := e.deliverConcurrently(c.history.provider, ev.body, 1+rng.IntN(3))
		if err != nil || claimed != 1 {
			e.t.Errorf("seed %d: event %s claimed %d times (%v)", c.seed, ev.id, claimed, err)
			return
		}
		if ev.kind != "" && rng.IntN(2) == 0 {
			if _, err := e.awaitEventJobs(ev.kind, ev.id); err != nil {
				e.t.Errorf("seed %d: %v", c.seed, err)
				return
			}
		}
	}
	for _, ev := range c.events {
		if ev.kind == "" {
			continue
		}
		jobs, err := e.awaitEventJobs(ev.kind, ev.id)
		if err != nil {
			e.t.Errorf("seed %d: %v", c.seed, err)
		}
		for _, j := range jobs {
			// A refused event's job is cancelled with its reason; every
			// other one completes.
			if j.State != "completed" && !(j.State == "cancelled" && strings.Contains(strings.Join(j.Errors, " "), "refused")) {
				e.t.Errorf("seed %d: event %s job %s: %v", c.seed, ev.id, j.State, j.Errors)
			}
		}
	}
}

// requireTruth compares c's books with the model's.
func (e *env) requireTruth(c *truthCase) {
	e.t.Helper()
	want := c.history.outcome(c.debt)
	msg := fmt.Sprintf("seed %d, %s history %+v, starting debt %d, delivered as %v", c.seed, c.history.provider,
		c.history.steps, c.debt, eventIDs(c.events))
	got := truthOutcome{status: e.orderOf(c).Status, refunded: e.orderOf(c).RefundedAmount, clawed: e.orderOf(c).ClawedBackMana}
	b := e.walletOf(c.player)
	got.mana = b[wallet.Mana]
	require.Zero(e.t, b[wallet.Sparks], msg)
	var err error
	got.debt, err = wallet.OutstandingDebt(context.Background(), e.pool, c.player)
	require.NoError(e.t, err)
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE e.status = 'accepted'),
			count(*) FILTER (WHERE e.status = 'refused')
		FROM reversal_events e JOIN payments p ON p.id = e.payment WHERE p.order_id = $1`, c.order.ID).
		Scan(&got.accepted, &got.refused))
	require.Equal(e.t, want, got, msg)
	wantPayments := 0
	if c.history.paid() {
		wantPayments = 1
	}
	require.Equal(e.t, wantPayments, e.count(`SELECT count(*) FROM payments WHERE order_id = $1`, c.order.ID),
		"one payment per provider object: %s", msg)
}

func (e *env) orderOf(c *truthCase) *fulfillment.Order {
	e.t.Helper()
	o, err := fulfillment.GetOrder(context.Background(), e.pool, c.player, c.order.ID)
	require.NoError(e.t, err)
	return o
}

func eventIDs(evs []stripeEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.id
	}
	return out
}
