package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// model is what the workload sent and what was acknowledged: the oracle the
// database is checked against. A call whose every attempt failed is
// "unknown": it may or may not have taken effect (at most once).
type model struct {
	mu      sync.Mutex
	players map[int64]*playerModel
	orders  map[int64]*orderModel
	// lostHooks are the event ids of payments whose webhook was never sent:
	// only reconciliation (listing the provider's events) can fulfil them.
	lostHooks []string
	// gaveUp are the event ids whose every delivery copy was refused or
	// unanswered until the sender gave up: billing may or may not have
	// claimed them, so the model cannot judge their money unless the
	// provider lists them (then they are lostHooks too).
	gaveUp []string

	// counters for the report
	sdkCalls, sdkAcked, sdkRetried, sdkReplayed, sdkRefused, sdkUnknown atomic.Int64
	hooksSent, hooksAcked, hooksDup, hookAttemptsFailed                 atomic.Int64
	gate402                                                             atomic.Int64
}

type playerModel struct {
	id     int64
	apiKey string

	checkouts, checkoutsUnknown   int
	conversions                   map[string]int64 // mana_debit transaction id -> mana
	conversionsUnknown            int
	marquees                      map[string]bool
	marqueesUnknown               int
	playgrounds                   map[string]bool
	playgroundsUnknown            int
	funds, fundsUnknown, restarts int
}

type orderModel struct {
	id       int64
	playerID int64
	mana     int64
	amount   int64
	currency string
	provider string
	// paid: a completed-payment event was acknowledged by a web process;
	// correct: its amount and currency matched the snapshot.
	paid, correct bool
	// The reverse path, each set once its event was acknowledged: a
	// second, distinct payment (must be unapplied, minting nothing), the
	// provider's refunded amount, a dispute (lost, or open with its funds
	// withdrawn) of disputed, and that dispute won afterwards (disputed is
	// then 0 again: what it clawed back must have been given back).
	doublePaid         bool
	refunded, disputed int64
	disputeWon         bool
	// hostile counts the acknowledged events the provider's truth must not
	// follow or must cap: a refund in another currency (refused), an
	// amount above the charge (capped), a refused refund then the valid one.
	hostile int
}

// paymentSent records a payment's event after its delivery: paid once a
// web process acknowledged it, or, when every copy was given up, once the
// provider lists it (reconciliation must then fulfil it, as it does a lost
// webhook's). A given-up event no listing shows stays unjudged.
func (m *model) paymentSent(om *orderModel, eventID string, listed, delivered, correct bool) {
	m.with(func() {
		if delivered || listed {
			om.paid, om.correct = true, correct
		}
		if !delivered && listed {
			m.lostHooks = append(m.lostHooks, eventID)
		}
	})
}

// unjudged are the given-up events the model cannot judge: neither
// acknowledged nor recovered by reconciliation.
func (m *model) unjudged() (ids []string) {
	m.with(func() {
		for _, id := range m.gaveUp {
			if !slices.Contains(m.lostHooks, id) {
				ids = append(ids, id)
			}
		}
	})
	return ids
}

// wantClawback is the Mana the order's payment must have clawed back:
// ceil(mana x min(paid, refunded + disputed) / paid), capped at mana; 0
// when the payment minted nothing.
func (o *orderModel) wantClawback() int64 {
	lost := min(o.amount, o.refunded+o.disputed)
	if !o.paid || !o.correct || lost <= 0 {
		return 0
	}
	return min(o.mana, (o.mana*lost+o.amount-1)/o.amount)
}

func newModel() *model {
	return &model{players: map[int64]*playerModel{}, orders: map[int64]*orderModel{}}
}

func (m *model) addPlayer(id int64, key string) *playerModel {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &playerModel{id: id, apiKey: key, conversions: map[string]int64{}, marquees: map[string]bool{}, playgrounds: map[string]bool{}}
	m.players[id] = p
	return p
}

// with runs f under the model's lock.
func (m *model) with(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

// checkMoneyBack compares each order's payments with the model: a double
// payment is recorded unapplied and minted nothing, and the payment's
// clawback is what its acknowledged refunds and disputes call for.
func (r *Run) checkMoneyBack(ctx context.Context, rep *Report) error {
	var bad []string
	doubles, reversed, won, hostile := 0, 0, 0, 0
	for id, om := range r.model.orders {
		if !om.doublePaid && om.refunded == 0 && om.disputed == 0 && !om.disputeWon && om.hostile == 0 {
			continue
		}
		hostile += om.hostile
		if om.disputeWon {
			won++
		}
		var unapplied, clawed int64
		err := r.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'applied'),
			coalesce(sum(clawed_back_mana) FILTER (WHERE status = 'applied'), 0) FROM payments WHERE order_id = $1`, id).
			Scan(&unapplied, &clawed)
		if err != nil {
			return err
		}
		if om.doublePaid {
			doubles++
			if unapplied != 1 {
				bad = append(bad, fmt.Sprintf("order %d paid twice: %d unapplied payments", id, unapplied))
			}
		}
		if om.refunded > 0 || om.disputed > 0 {
			reversed++
		}
		if want := om.wantClawback(); clawed != want {
			bad = append(bad, fmt.Sprintf("order %d: clawed back %d Mana, want %d (refunded %d, disputed %d of %d)",
				id, clawed, want, om.refunded, om.disputed, om.amount))
		}
	}
	rep.check(fmt.Sprintf("double payments unapplied, refunds and disputes clawed back once, won disputes given back, hostile reversals refused or capped (%d doubles, %d reversed orders, %d disputes won, %d hostile)",
		doubles, reversed, won, hostile), len(bad) == 0, strings.Join(first(bad, 10), "; "))
	return nil
}
