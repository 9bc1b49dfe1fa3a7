package events_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// deadline bounds every wait of these tests.
const deadline = 2 * time.Minute

// startWorker works delivery jobs on pool with opts (its Pool set here).
func startWorker(t *testing.T, pool *pgxpool.Pool, opts events.WorkerOptions) {
	t.Helper()
	opts.Pool, opts.Logger = pool, testkit.Quiet
	workers := river.NewWorkers()
	events.Register(workers, opts)
	testkit.StartRiver(t, pool, testkit.RiverOptions{Workers: workers, Queues: map[string]int{events.QueueEvents: 10}})
}

// receiver is a real HTTP endpoint that verifies every request with the
// Standard Webhooks reference library and keeps, per webhook-id, every
// body it was sent and whether one was acknowledged.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	hooks  []*standardwebhooks.Webhook // any of them may verify
	bodies map[string][]string
	acked  map[string]bool
	bad    int // requests no secret verified
	// answer decides each request's status (after it was verified); nil: 200.
	answer func(w http.ResponseWriter, r *http.Request) int
}

func newReceiver(t *testing.T, answer func(w http.ResponseWriter, r *http.Request) int) *receiver {
	rc := &receiver{t: t, bodies: map[string][]string{}, acked: map[string]bool{}, answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

// trust adds a secret the receiver verifies with.
func (rc *receiver) trust(secret string) {
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(rc.t, err)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.hooks = append(rc.hooks, wh)
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	verified := false
	for _, h := range rc.hooks {
		verified = verified || h.Verify(body, r.Header) == nil
	}
	id := r.Header.Get("webhook-id")
	if !verified {
		rc.bad++
	}
	rc.bodies[id] = append(rc.bodies[id], string(body))
	rc.mu.Unlock()
	status := http.StatusOK
	if rc.answer != nil {
		status = rc.answer(w, r)
	}
	if status < 300 && verified {
		rc.mu.Lock()
		rc.acked[id] = true
		rc.mu.Unlock()
	}
	w.WriteHeader(status)
}

// waitAcked waits until every id was acknowledged.
func (rc *receiver) waitAcked(ids ...string) {
	rc.t.Helper()
	require.Eventually(rc.t, func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		for _, id := range ids {
			if !rc.acked[id] {
				return false
			}
		}
		return true
	}, deadline, 10*time.Millisecond, "the receiver acknowledged every event within %s", deadline)
}

// requireOneBodyPerID: no webhook-id ever carried two different bodies,
// and every request verified.
func (rc *receiver) requireOneBodyPerID() {
	rc.t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	require.Zero(rc.t, rc.bad, "requests whose signature did not verify")
	for id, bodies := range rc.bodies {
		for _, b := range bodies {
			require.Equal(rc.t, bodies[0], b, "webhook-id %s carried two bodies", id)
		}
	}
}

// addEndpoint adds an endpoint for url and returns it with its secret.
func addEndpoint(t *testing.T, pool *pgxpool.Pool, url string, types ...string) events.Added {
	t.Helper()
	a, err := events.AddEndpoint(context.Background(), pool, url, types)
	require.NoError(t, err)
	require.True(t, a.Created)
	return a
}

// emit writes ev in a transaction of its own, as an effect would (on a
// testdb.Tx, a savepoint of it).
func emit(t *testing.T, db testdb.Beginner, ev events.Event) events.Emitted {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	out, err := events.EmitTx(ctx, tx, ev)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return out
}

func refunded(player int64, key string) events.Event {
	return events.Event{Type: events.PaymentRefunded, Key: key, PlayerID: player,
		Data: events.PaymentRefundedData{Provider: "stripe", PaymentID: "cs_" + key, OrderID: 7, Amount: 999, Currency: "usd"}}
}
