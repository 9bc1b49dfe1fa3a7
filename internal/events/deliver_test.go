package events_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// short is a retry schedule for tests.
var short = []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}

// TestDeliveredSignedPerStandardWebhooks: the reference library verifies
// every request, the headers are the agreed ones, and during a rotation
// a receiver holding either secret verifies.
func TestDeliveredSignedPerStandardWebhooks(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	var ua, ctype atomic.Value
	rc := newReceiver(t, func(_ http.ResponseWriter, r *http.Request) int {
		ua.Store(r.Header.Get("User-Agent"))
		ctype.Store(r.Header.Get("Content-Type"))
		return http.StatusNoContent
	})
	ep := addEndpoint(t, pool, rc.srv.URL)
	rc.trust(ep.Secret)
	startWorker(t, pool, events.WorkerOptions{})
	first := emit(t, pool, refunded(1, "a"))
	rc.waitAcked(first.ID)
	require.Equal(t, events.UserAgent, ua.Load())
	require.Equal(t, "application/json", ctype.Load())

	// A rotation: a receiver that knows only the old secret, and one that
	// knows only the new, both verify during the grace.
	_, fresh, err := events.RotateSecret(ctx, pool, ep.Endpoint.ID, time.Hour)
	require.NoError(t, err)
	old := newReceiver(t, nil)
	old.trust(ep.Secret)
	renewed := newReceiver(t, nil)
	renewed.trust(fresh)
	for _, r := range []*receiver{old, renewed} {
		_, err := events.AddEndpoint(ctx, pool, r.srv.URL, nil)
		require.NoError(t, err)
	}
	// Give both new endpoints the rotated endpoint's secrets.
	_, err = pool.Exec(ctx, `UPDATE event_endpoints p SET secret = e.secret, previous_secret = e.previous_secret,
		previous_secret_until = e.previous_secret_until FROM event_endpoints e WHERE e.id = $1 AND p.id <> e.id`, ep.Endpoint.ID)
	require.NoError(t, err)
	second := emit(t, pool, refunded(1, "b"))
	old.waitAcked(second.ID)
	renewed.waitAcked(second.ID)
	for _, r := range []*receiver{rc, old, renewed} {
		r.requireOneBodyPerID()
	}
}

// TestFlakyReceiverGetsEveryEvent: a receiver that answers 500 at random,
// answers slowly, or does not answer within the timeout still gets every
// event at least once, and no webhook-id ever carries two bodies.
func TestFlakyReceiverGetsEveryEvent(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	rc := newReceiver(t, func(_ http.ResponseWriter, r *http.Request) int {
		switch rand.IntN(5) {
		case 0:
			return http.StatusInternalServerError
		case 1:
			time.Sleep(100 * time.Millisecond) // slow, inside the timeout
		case 2:
			select { // past the timeout: the worker gives up first
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}
		return http.StatusOK
	})
	ep := addEndpoint(t, pool, rc.srv.URL)
	rc.trust(ep.Secret)
	startWorker(t, pool, events.WorkerOptions{Timeout: 500 * time.Millisecond, Schedule: short})
	ids := make([]string, 30)
	for i := range ids {
		ids[i] = emit(t, pool, refunded(int64(i%3+1), "flaky:"+string(rune('a'+i)))).ID
	}
	rc.waitAcked(ids...)
	rc.requireOneBodyPerID()
	var failed int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM event_attempts WHERE status_code IS NULL OR status_code >= 300`).Scan(&failed))
	require.Positive(t, failed, "some attempts failed and were retried")
}

// TestRedirectIsNotFollowed: a 3xx is a failed attempt; its target is never
// called.
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(target.Close)
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) int {
		w.Header().Set("Location", target.URL)
		return http.StatusFound
	})
	ep := addEndpoint(t, pool, rc.srv.URL)
	rc.trust(ep.Secret)
	startWorker(t, pool, events.WorkerOptions{Schedule: []time.Duration{time.Hour}})
	ev := emit(t, pool, refunded(1, "redirect"))
	a := waitAttempt(t, pool, ev.ID)
	require.Equal(t, http.StatusFound, a.StatusCode)
	require.Contains(t, a.Error, "redirects are not followed")
	require.Zero(t, hits.Load(), "the redirect's target was not called")
}

// TestAnswerReadIsBounded: of a 1 MiB answer, the first MaxResponse bytes
// are read and kept.
func TestAnswerReadIsBounded(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	rc := newReceiver(t, nil)
	rc.answer = func(w http.ResponseWriter, _ *http.Request) int {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(strings.Repeat("x", 1<<20)))
		return http.StatusOK
	}
	ep := addEndpoint(t, pool, rc.srv.URL)
	rc.trust(ep.Secret)
	startWorker(t, pool, events.WorkerOptions{})
	ev := emit(t, pool, refunded(1, "big"))
	a := waitAttempt(t, pool, ev.ID)
	require.Equal(t, http.StatusOK, a.StatusCode)
	require.Len(t, a.Response, events.MaxResponse)
}

// TestEndpointDisabledAfterSchedule: an endpoint that fails every attempt
// of the whole schedule is disabled with a reason; its delivery failed
// after len(schedule)+1 attempts, and a resend after enabling it delivers
// under the same id.
func TestEndpointDisabledAfterSchedule(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	var healthy atomic.Bool
	rc := newReceiver(t, func(http.ResponseWriter, *http.Request) int {
		if healthy.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	ep := addEndpoint(t, pool, rc.srv.URL)
	rc.trust(ep.Secret)
	schedule := short[:3]
	startWorker(t, pool, events.WorkerOptions{Schedule: schedule})
	ev := emit(t, pool, refunded(1, "dead"))
	require.Eventually(t, func() bool {
		eps, err := events.Endpoints(ctx, pool)
		return err == nil && !eps[0].Enabled
	}, deadline, 10*time.Millisecond, "the endpoint was disabled within %s", deadline)
	eps, err := events.Endpoints(ctx, pool)
	require.NoError(t, err)
	require.Contains(t, eps[0].DisabledReason, "whole retry schedule")
	shown, err := events.Show(ctx, pool, ev.ID)
	require.NoError(t, err)
	require.Len(t, shown.Deliveries, 1)
	require.Equal(t, "failed", shown.Deliveries[0].State)
	require.Len(t, shown.Deliveries[0].Attempts, len(schedule)+1)

	healthy.Store(true)
	_, err = events.SetEnabled(ctx, pool, ep.Endpoint.ID, true, "")
	require.NoError(t, err)
	n, err := events.Resend(ctx, pool, ev.ID, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rc.waitAcked(ev.ID)
	rc.requireOneBodyPerID()
}

// waitAttempt waits for the first recorded attempt of event id's first
// delivery.
func waitAttempt(t *testing.T, pool *pgxpool.Pool, id string) events.Attempt {
	t.Helper()
	var a events.Attempt
	require.Eventually(t, func() bool {
		shown, err := events.Show(context.Background(), pool, id)
		if err != nil || len(shown.Deliveries) == 0 || len(shown.Deliveries[0].Attempts) == 0 {
			return false
		}
		a = shown.Deliveries[0].Attempts[0]
		return true
	}, deadline, 10*time.Millisecond, "an attempt of %s was recorded within %s", id, deadline)
	return a
}

// TestConfiguredScheduleIsUsed: the waits between a delivery's attempts
// are the configured schedule's (each within its 10% jitter), not the
// default's (whose second wait, 5 minutes, is past this test's deadline).
func TestConfiguredScheduleIsUsed(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	var n atomic.Int64
	rc := newReceiver(t, func(http.ResponseWriter, *http.Request) int {
		if n.Add(1) <= 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	ep := addEndpoint(t, pool, rc.srv.URL)
	rc.trust(ep.Secret)
	schedule := []time.Duration{200 * time.Millisecond, time.Second, 2 * time.Second, time.Hour}
	startWorker(t, pool, events.WorkerOptions{Schedule: schedule})
	ev := emit(t, pool, refunded(1, "schedule"))
	rc.waitAcked(ev.ID)
	// The worker records the answered attempt after the receiver has
	// answered: wait for the record, not only the answer.
	var d events.Delivery
	require.Eventually(t, func() bool {
		shown, err := events.Show(context.Background(), pool, ev.ID)
		if err != nil || len(shown.Deliveries) != 1 {
			return false
		}
		d = shown.Deliveries[0]
		return d.State == "delivered"
	}, deadline, 10*time.Millisecond, "the delivery was recorded delivered within %s", deadline)
	require.Len(t, d.Attempts, 4, "three failed attempts, then the delivered one")
	for i := range 3 {
		gap := d.Attempts[i+1].At.Sub(d.Attempts[i].At)
		require.GreaterOrEqual(t, gap, schedule[i]*9/10, "wait %d: %v, the schedule says %v (±10%%)", i+1, gap, schedule[i])
	}
}
