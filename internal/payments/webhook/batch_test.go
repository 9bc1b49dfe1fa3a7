package webhook_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// gate makes claim batches deterministic: with one batch at a time, it
// holds the first batch until n deliveries have queued for a claim, so the
// ones queued behind it go together in the next batch. It records the event
// ids of every batch.
type gate struct {
	n       int64
	queued  atomic.Int64
	all     chan struct{} // closed when n deliveries have queued
	held    chan struct{} // closed when the first batch is being held
	mu      sync.Mutex
	batches [][]string
}

func newGate(n int) *gate {
	return &gate{n: int64(n), all: make(chan struct{}), held: make(chan struct{})}
}

func (g *gate) options(o *webhook.Options) {
	o.ClaimConcurrency = 1
	webhook.OnClaimQueued(o, func() {
		if g.queued.Add(1) == g.n {
			close(g.all)
		}
	})
	webhook.OnClaimBatch(o, g.onBatch)
}

func (g *gate) onBatch(ids []string) {
	g.mu.Lock()
	g.batches = append(g.batches, ids)
	first := len(g.batches) == 1
	g.mu.Unlock()
	if !first {
		return
	}
	close(g.held)
	select {
	case <-g.all:
	case <-time.After(2 * time.Minute): // the test fails on its own counts
	}
}

func (g *gate) sizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int, len(g.batches))
	for i, b := range g.batches {
		out[i] = len(b)
	}
	return out
}

// batchOf returns the first batch that held eventID.
func (g *gate) batchOf(eventID string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, b := range g.batches {
		if slices.Contains(b, eventID) {
			return b
		}
	}
	return nil
}

// deliverAll delivers every body concurrently (each signed afresh) and
// returns the answers in order.
func (e *env) deliverAll(provider func(i int) string, bodies [][]byte) []answer {
	e.t.Helper()
	answers := make([]answer, len(bodies))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, body := range bodies {
		wg.Go(func() {
			<-start
			answers[i] = e.deliver(provider(i), body)
		})
	}
	close(start)
	wg.Wait()
	return answers
}

func (e *env) jobEventIDs() int {
	return e.count(`SELECT count(DISTINCT args->>'event_id') FROM river_job WHERE kind = 'fulfill_order'`)
}

// 50 concurrent deliveries of 10 completed payments, 5 each, share batches:
// one row and one job per event, 10 claimed and 40 duplicate answers, and
// fewer batches than deliveries.
func TestConcurrentDeliveriesShareBatches(t *testing.T) {
	t.Parallel()
	const events, copies = 10, 5
	g := newGate(events * copies)
	e := newEnv(t, g.options)
	provider := func(i int) string { return providers[i%events%len(providers)] }
	var bodies [][]byte
	byEvent := make([][]byte, events)
	for i := range events {
		o := e.order("mana_1000", provider(i))
		byEvent[i] = providerevents.CompletedEvent(provider(i), fmt.Sprintf("evt_batch_%d", i), o.ID, o.Amount, o.Currency)
	}
	for i := range events * copies {
		bodies = append(bodies, byEvent[i%events])
	}

	statuses := map[string]int{}
	for _, a := range e.deliverAll(provider, bodies) {
		require.Equal(t, http.StatusOK, a.Status, a.Body)
		statuses[a.status()]++
	}
	require.Equal(t, map[string]int{"claimed": events, "duplicate": events * (copies - 1)}, statuses)
	require.Equal(t, events, e.events())
	require.Equal(t, events, e.jobs())
	require.Equal(t, events, e.jobEventIDs())
	// Every duplicate is counted on its event's row, those answered from
	// within the claiming batch as well as those of later batches.
	require.Equal(t, events, e.count(`SELECT count(*) FROM webhook_events WHERE duplicate_deliveries = $1
		AND last_delivery_at >= claimed_at`, copies-1))

	sizes := g.sizes()
	total := 0
	for _, n := range sizes {
		total += n
	}
	require.Equal(t, events*copies, total, "batches %v", sizes)
	require.Less(t, len(sizes), events*copies, "no batching: %v", sizes)
	require.Greater(t, slices.Max(sizes), copies, "batches %v", sizes)

	for _, j := range e.waitJobs(events) {
		require.Equal(t, "completed", j.State, j.Errors)
	}
	require.Equal(t, int64(events*1000), e.mana())
	require.Equal(t, events, e.credits())
	e.requireClean()
}

// poisonTrigger makes the database refuse the claim of any event whose id
// starts with evt_poison, as a real failure of the batch's INSERT would.
const poisonTrigger = `CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.event_id LIKE 'evt_poison%' THEN
		RAISE EXCEPTION 'test: poison event %', NEW.event_id;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER test_poison BEFORE INSERT ON webhook_events FOR EACH ROW EXECUTE FUNCTION test_poison();`

// One delivery the database refuses fails its batch's transaction; every
// other delivery of that batch is then claimed alone and enqueued exactly
// once, and only the poison one answers 503. Its redelivery, once the
// database accepts it, is claimed.
func TestPoisonDeliveryFailsOnlyItself(t *testing.T) {
	t.Parallel()
	const good = 6
	g := newGate(1 + good + 2) // the held first batch, then good ones, a duplicate and the poison
	logs := &recordingHandler{}
	e := newEnv(t, g.options, func(o *webhook.Options) { o.Logger = slog.New(logs) })
	_, err := e.pool.Exec(context.Background(), poisonTrigger)
	require.NoError(t, err)
	pay := func(eventID string) []byte {
		o := e.order("mana_1000", "stripe")
		return providerevents.CompletedEvent("stripe", eventID, o.ID, o.Amount, o.Currency)
	}
	stripe := func(int) string { return "stripe" }

	first := make(chan answer)
	go func() { first <- e.deliver("stripe", pay("evt_first")) }()
	<-g.held
	bodies := [][]byte{pay("evt_poison")}
	for i := range good {
		bodies = append(bodies, pay(fmt.Sprintf("evt_neighbour_%d", i)))
	}
	bodies = append(bodies, bodies[1]) // a duplicate inside the failed batch
	answers := e.deliverAll(stripe, bodies)
	require.Equal(t, "claimed", (<-first).status())

	require.Len(t, g.batchOf("evt_poison"), len(bodies), "the poison delivery was not batched with its neighbours: %v", g.sizes())
	require.Equal(t, http.StatusServiceUnavailable, answers[0].Status, answers[0].Body)
	require.Equal(t, "unavailable", answers[0].code())
	statuses := map[string]int{}
	for _, a := range answers[1:] {
		require.Equal(t, http.StatusOK, a.Status, a.Body)
		statuses[a.status()]++
	}
	require.Equal(t, map[string]int{"claimed": good, "duplicate": 1}, statuses)
	require.Equal(t, 1+good, e.events())
	require.Equal(t, 1+good, e.jobs())
	require.Equal(t, 1+good, e.jobEventIDs())
	require.Equal(t, 1, logs.count(slog.LevelWarn, "webhook: batch claim failed"))

	// The provider retries the poison event; once the database takes it, it is claimed.
	_, err = e.pool.Exec(context.Background(), `DROP TRIGGER test_poison ON webhook_events`)
	require.NoError(t, err)
	a := e.deliver("stripe", bodies[0])
	require.Equal(t, "claimed", a.status(), a.Body)
	for _, j := range e.waitJobs(2 + good) {
		require.Equal(t, "completed", j.State, j.Errors)
	}
	require.Equal(t, int64((2+good)*1000), e.mana())
	e.requireClean()
}

// Events we only acknowledge share batches with payments: claimed once,
// no job; a batch of them alone is claimed too.
func TestMixedBatchClaimsOnlyPaymentsEnqueue(t *testing.T) {
	t.Parallel()
	acks := [][]byte{
		[]byte(`{"id":"evt_cust_1","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`),
		[]byte(`{"id":"evt_cust_2","object":"event","type":"customer.created","data":{"object":{"id":"cus_2"}}}`),
	}
	g := newGate(1 + 2*len(acks) + 2)
	e := newEnv(t, g.options)
	o := e.order("mana_1000", "stripe")
	payment := providerevents.CompletedEvent("stripe", "evt_mixed_pay", o.ID, o.Amount, o.Currency)
	stripe := func(int) string { return "stripe" }

	first := make(chan answer)
	go func() {
		first <- e.deliver("stripe", []byte(`{"id":"evt_cust_0","object":"event","type":"customer.created","data":{"object":{}}}`))
	}()
	<-g.held
	bodies := [][]byte{acks[0], acks[1], acks[0], acks[1], payment, payment}
	statuses := map[string]int{}
	for _, a := range e.deliverAll(stripe, bodies) {
		require.Equal(t, http.StatusOK, a.Status, a.Body)
		statuses[a.status()]++
	}
	require.Equal(t, "claimed", (<-first).status())
	require.Equal(t, map[string]int{"claimed": 3, "duplicate": 3}, statuses)
	require.Len(t, g.batchOf("evt_mixed_pay"), len(bodies), "batches %v", g.sizes())
	require.Equal(t, 4, e.events())
	require.Equal(t, 1, e.jobs())
	require.Equal(t, "completed", e.waitJobs(1)[0].State)
	require.Equal(t, int64(1000), e.mana())
	e.requireClean()
}

// recordingHandler keeps every log record, for counting.
type recordingHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler            { return h }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// count returns how many records at level have a message starting with prefix.
func (h *recordingHandler) count(level slog.Level, prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == level && strings.HasPrefix(r.Message, prefix) {
			n++
		}
	}
	return n
}

// A lone delivery is claimed at once, in a batch of its own.
func TestLoneDeliveryIsItsOwnBatch(t *testing.T) {
	t.Parallel()
	var sizes []int
	var mu sync.Mutex
	e := newEnv(t, func(o *webhook.Options) {
		webhook.OnClaimBatch(o, func(ids []string) { mu.Lock(); sizes = append(sizes, len(ids)); mu.Unlock() })
	})
	o := e.order("mana_1000", provider.Creem)
	require.Equal(t, "claimed", e.deliver("creem", providerevents.CompletedEvent("creem", "evt_lone", o.ID, 999, "usd")).status())
	require.Equal(t, "completed", e.waitJobs(1)[0].State)
	mu.Lock()
	require.Equal(t, []int{1}, sizes)
	mu.Unlock()
	e.requireClean()
}
