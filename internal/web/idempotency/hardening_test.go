package idempotency_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/web/idempotency"
)

// A handler that outlives its deadline answers 503; an immediate retry
// with the same key must run (the claim was released although the
// request's context had expired), never 409 while nothing is running.
func TestTimedOutRequestReleasesItsKeyForAnImmediateRetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{HandlerTimeout: 300 * time.Millisecond})
	f.setHandler(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		// Outlives the deadline: the query is cancelled when it expires.
		if _, err := tx.Exec(r.Context(), `SELECT pg_sleep(10)`); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	start := time.Now()
	first := f.post(t, f.player, "slow-key", `{"mana":5}`)
	require.Equal(t, http.StatusServiceUnavailable, first.status, first.body)
	require.Less(t, time.Since(start), 10*time.Second, "the deadline cut the handler's 10 s sleep short")

	f.setHandler(f.effect(http.StatusCreated, 0))
	f.serve(t, idempotency.Options{HandlerTimeout: time.Minute}) // the retry's own deadline is not under test
	retry := f.post(t, f.player, "slow-key", `{"mana":5}`)
	require.Equal(t, http.StatusCreated, retry.status, "the retry runs at once: %s", retry.body)
	require.False(t, retry.replayed)
	require.Equal(t, 1, f.effects(t))
	require.Equal(t, 0, f.keyCount(t, "running"))
}

// A request still running keeps its key: its duplicate answers 409 with a
// Retry-After, and the first one's answer is then replayed.
func TestInUseAnswerCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	f.setHandler(f.effect(http.StatusCreated, time.Second))
	done := make(chan result, 1)
	go func() { done <- f.post(t, f.player, "busy", `{}`) }()
	require.Eventually(t, func() bool { return f.keyCount(t, "running") == 1 }, 2*time.Minute, 10*time.Millisecond, "the request never held its key running")
	dup := f.post(t, f.player, "busy", `{}`)
	require.Equal(t, http.StatusConflict, dup.status, dup.body)
	require.Equal(t, "1", dup.header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", dup.header.Get("Content-Type"))
	require.Equal(t, http.StatusCreated, await(t, done, "the first request's answer").status)
}

// rawRequest writes head and part of a body to a fresh connection to url,
// then either half-closes (the client aborted) or just waits (a trickle),
// and reads the answer.
func rawRequest(t *testing.T, url, body string, declared int, halfClose bool) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", url[len("http://"):])
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = fmt.Fprintf(conn, "POST /v1/things HTTP/1.1\r\nHost: x\r\nX-Player: 1\r\nIdempotency-Key: cut\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", declared, body)
	require.NoError(t, err)
	if halfClose {
		require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func requireProblem(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, status, resp.StatusCode, string(b))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p struct{ Code string }
	require.NoError(t, json.Unmarshal(b, &p))
	require.Equal(t, code, p.Code)
}

// A body the client cuts short, or trickles past the server's read
// timeout, is the client's fault: 400 or 408, never a 5xx, nothing stored.
func TestAbortedOrTrickledBodyIsAClientError(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	srv := httptest.NewUnstartedServer(f.mw.Wrap(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		f.calls.Add(1)
		(*f.handler.Load())(w, r, tx)
	}))
	srv.Config.ReadTimeout = 500 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)

	cut := rawRequest(t, srv.URL, `{"mana":`, 100, true)
	requireProblem(t, cut, http.StatusBadRequest, "incomplete_body")

	slow := rawRequest(t, srv.URL, `{"mana":`, 100, false)
	requireProblem(t, slow, http.StatusRequestTimeout, "body_timeout")

	require.EqualValues(t, 0, f.calls.Load(), "the handler never ran")
	require.Equal(t, 0, f.effects(t))
	var keys int
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&keys))
	require.Equal(t, 0, keys)
}

// A handler that ignores its context and finishes after the deadline: its
// commit fails on the expired context, and the claim must still be
// released at once, so the retry runs rather than answering 409. The
// retry goes to a server whose deadline is a minute (another process, as
// a retry may find), so a slow machine cannot time it out too.
func TestHandlerFinishingAfterItsDeadlineReleasesItsKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{HandlerTimeout: 200 * time.Millisecond})
	f.setHandler(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		<-r.Context().Done()
		time.Sleep(200 * time.Millisecond) // deaf to r.Context()
		w.WriteHeader(http.StatusCreated)
	})
	first := f.post(t, f.player, "late", `{}`)
	require.GreaterOrEqual(t, first.status, 500, first.body)
	f.setHandler(f.effect(http.StatusCreated, 0))
	f.serve(t, idempotency.Options{HandlerTimeout: time.Minute})
	retry := f.post(t, f.player, "late", `{}`)
	require.Equal(t, http.StatusCreated, retry.status, retry.body)
	require.Equal(t, 1, f.effects(t))
}
