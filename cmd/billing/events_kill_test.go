package main

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fibe"
	"github.com/fibe-dev/billing/internal/events"
)

// killReceiver is a real endpoint for the events billing sends. It holds
// its first request unanswered until the request's connection dies (the
// worker sending it is SIGKILLed), answers the second 500 and every later
// one 204, verifying each with the SDK and keeping every body per
// webhook-id.
type killReceiver struct {
	v       *fibe.WebhookVerifier
	holding chan struct{} // closed when the first request is being held
	mu      sync.Mutex
	n       int
	bodies  map[string]map[[sha256.Size]byte]bool
	acked   map[string]int
	bad     int
}

func (rc *killReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	ev, err := rc.v.Verify(r.Header, body)
	rc.mu.Lock()
	if err != nil {
		rc.bad++
		rc.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.n++
	n := rc.n
	if rc.bodies[ev.ID] == nil {
		rc.bodies[ev.ID] = map[[sha256.Size]byte]bool{}
	}
	rc.bodies[ev.ID][sha256.Sum256(body)] = true
	rc.mu.Unlock()
	switch n {
	case 1:
		close(rc.holding)
		select { // never answered: the worker is killed while waiting
		case <-r.Context().Done():
		case <-time.After(killDeadline):
		}
		return
	case 2:
		http.Error(w, "still recovering", http.StatusInternalServerError)
		return
	}
	rc.mu.Lock()
	rc.acked[ev.ID]++
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// killDeadline bounds each wait of TestDeliveryAfterWorkerKilled: River
// rescues the killed attempt only once the delivery job's own timeout
// (events_timeout + 30 s) has passed, its rescuer runs every 30 s, and the
// new worker must first win the leadership the dead one held.
const killDeadline = 4 * time.Minute

// TestDeliveryAfterWorkerKilled: a worker process SIGKILLed while its
// delivery's request waits for the receiver's answer leaves the job
// running; a new worker's River rescuer retries it on the configured
// schedule, and the event is delivered under its one body. The attempts
// record the two answers billing read (the killed request had none).
func TestDeliveryAfterWorkerKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL, "BILLING_LOG_FORMAT=json",
		"BILLING_JOB_TIMEOUT=2s", "BILLING_RESCUE_STUCK_JOBS_AFTER=3s",
		// Long enough that the held request is still waiting when the
		// worker is killed; the rescue waits this plus 30 s.
		"BILLING_EVENTS_TIMEOUT=5s", "BILLING_EVENTS_RETRY_SCHEDULE=1s,2s,3s"}
	rc := &killReceiver{holding: make(chan struct{}), bodies: map[string]map[[sha256.Size]byte]bool{}, acked: map[string]int{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	added, err := events.AddEndpoint(ctx, pool, srv.URL, nil)
	require.NoError(t, err)
	rc.v, err = fibe.NewWebhookVerifier(added.Secret)
	require.NoError(t, err)

	first := startProc(t, env, "worker")
	ev := emitRefund(t, pool)
	select {
	case <-rc.holding:
	case <-time.After(killDeadline):
		t.Fatalf("the first delivery did not reach the receiver within %s", killDeadline)
	}
	first.Kill() // SIGKILL: no attempt recorded, the job left running
	var state string
	var attempts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT state, attempts FROM event_deliveries`).Scan(&state, &attempts))
	require.Equal(t, "pending", state)
	require.Zero(t, attempts, "the killed worker recorded no attempt")

	startProc(t, env, "worker")
	require.Eventually(t, func() bool {
		var job string
		err := pool.QueryRow(ctx, `SELECT d.state, j.state::text FROM event_deliveries d, river_job j
			WHERE j.kind = 'deliver_event'`).Scan(&state, &job)
		return err == nil && state == "delivered" && job == "completed"
	}, killDeadline, 100*time.Millisecond, "the delivery was not delivered, its job completed, within %s of a new worker starting", killDeadline)

	rc.mu.Lock()
	require.Zero(t, rc.bad, "every request verified with the SDK")
	require.Equal(t, 3, rc.n, "the held request, the 500, the delivered one")
	require.Len(t, rc.bodies, 1)
	require.Len(t, rc.bodies[ev.ID], 1, "one body under webhook-id %s", ev.ID)
	require.Equal(t, 1, rc.acked[ev.ID])
	rc.mu.Unlock()

	shown, err := events.Show(ctx, pool, ev.ID)
	require.NoError(t, err)
	require.Len(t, shown.Deliveries, 1)
	a := shown.Deliveries[0].Attempts
	require.Len(t, a, 2, "the answered attempts: 500, then delivered")
	require.Equal(t, http.StatusInternalServerError, a[0].StatusCode)
	require.Equal(t, http.StatusNoContent, a[1].StatusCode)
	// The rescued job ran as attempt 2: the configured schedule's second
	// wait (2s, ±10%) followed its 500, not the default's 5 minutes.
	require.GreaterOrEqual(t, a[1].At.Sub(a[0].At), 1800*time.Millisecond)
	var jobState, rescue string
	var jobAttempt int
	require.NoError(t, pool.QueryRow(ctx, `SELECT state::text, attempt, errors[1]->>'error' FROM river_job
		WHERE kind = 'deliver_event'`).Scan(&jobState, &jobAttempt, &rescue))
	require.Equal(t, "completed", jobState)
	require.Equal(t, 3, jobAttempt, "killed, 500, delivered")
	require.Contains(t, rescue, "rescued", "River's rescuer retried the killed attempt")
}

// emitRefund writes one payment.refunded event, its deliveries and their
// jobs in one transaction, as an effect does.
func emitRefund(t *testing.T, pool *pgxpool.Pool) events.Emitted {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	ev, err := events.EmitTx(ctx, tx, events.Event{Type: events.PaymentRefunded, Key: "kill", PlayerID: 7,
		Data: events.PaymentRefundedData{Provider: "stripe", PaymentID: "cs_kill", OrderID: 1, Amount: 5, Currency: "usd"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return ev
}
