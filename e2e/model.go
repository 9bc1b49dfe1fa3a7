package e2e

import (
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
