package httpapi

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

// Bodies a proxy in front of the API could read differently from us are
// refused: duplicate member names (a proxy reading the first "mana" sees 1,
// encoding/json applied the last) and names that match only if case is
// ignored.
func TestStrictJSONBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 5000)
	for _, tc := range []struct{ path, body string }{
		{"/v1/conversions", `{"mana":1,"mana":1000}`},
		{"/v1/conversions", `{"mana":1000,"mana":1}`},
		{"/v1/conversions", `{"MANA":3}`},
		{"/v1/conversions", `{"Mana":3}`},
		{"/v1/conversions", `{"mana":1,"Mana":1000}`},
		{"/v1/marquees", `{"name":"a","name":"b","plan":"standard"}`},
		{"/v1/marquees", `{"Name":"a","plan":"standard"}`},
		{"/v1/checkouts", `{"sku":"mana_1000","provider":"stripe","provider":"paddle"}`},
		{"/v1/checkouts", `{"SKU":"mana_1000","provider":"stripe"}`},
	} {
		t.Run(tc.body, func(t *testing.T) {
			requireProblem(t, e.do(alice, http.MethodPost, tc.path, "", tc.body), http.StatusBadRequest, CodeInvalidRequest)
		})
	}
	require.Equal(t, int64(5000), balance(t, e, alice, wallet.Mana), "nothing moved")
	require.Equal(t, 0, e.count(`SELECT count(*) FROM marquees`))
	require.Equal(t, 0, e.count(`SELECT count(*) FROM orders`))
	e.requireAuditClean()
}

// An Idempotency-Key too long to embed in its wallet key is hashed; a
// client could once send, as a short key, the very string the hash form
// spells, and so make two distinct conversions share one wallet key (the
// second silently answered with the first's postings). Both must now run.
func TestLongAndShortIdempotencyKeysNeverShareAWalletKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 1000)
	long := strings.Repeat("L", 250)
	spoof := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(long)))

	first := e.do(alice, http.MethodPost, "/v1/conversions", long, `{"mana":7}`)
	require.Equal(t, http.StatusCreated, first.status, string(first.raw))
	second := e.do(alice, http.MethodPost, "/v1/conversions", spoof, `{"mana":7}`)
	require.Equal(t, http.StatusCreated, second.status, string(second.raw))
	require.False(t, second.replayed())

	id := func(r reply) any { return r.body["mana_debit"].(map[string]any)["id"] }
	require.NotEqual(t, id(first), id(second), "two keys, two conversions")
	require.Equal(t, int64(1000-14), balance(t, e, alice, wallet.Mana))
	require.Equal(t, int64(14), balance(t, e, alice, wallet.Sparks))
	e.requireAuditClean()
}

// One resource has one URL: only the canonical decimal id resolves.
func TestPathIDsMustBeCanonical(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	r := e.do(alice, http.MethodPost, "/v1/checkouts", "", `{"sku":"mana_1000","provider":"stripe"}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.raw))
	id := r.str("id")
	require.Equal(t, http.StatusOK, e.do(alice, http.MethodGet, "/v1/orders/"+id, "", "").status)
	for _, alias := range []string{"0" + id, "00" + id, "+" + id, "%2B" + id, id + "%20", "%20" + id, "-0", "0"} {
		t.Run(alias, func(t *testing.T) {
			requireProblem(t, e.do(alice, http.MethodGet, "/v1/orders/"+alias, "", ""), http.StatusNotFound, CodeNotFound)
		})
	}
}

// A body declared as anything but JSON is refused before anything runs,
// its Idempotency-Key included.
func TestNonJSONContentTypeIs415(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 100)
	post := func(contentType, key string) reply {
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/conversions", strings.NewReader(`{"mana":1}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+alice.key)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Idempotency-Key", key)
		return send(t, req)
	}
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
		"application/jsonx", "text/json", "garbage;;", "application/xml"} {
		t.Run(ct, func(t *testing.T) {
			requireProblem(t, post(ct, "k-"+ct), http.StatusUnsupportedMediaType, CodeUnsupportedMediaType)
		})
	}
	require.Equal(t, 0, e.count(`SELECT count(*) FROM idempotency_keys`), "no key was claimed")
	require.Equal(t, int64(100), balance(t, e, alice, wallet.Mana))
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON", "application/merge-patch+json"} {
		require.Equal(t, http.StatusCreated, post(ct, "ok-"+ct).status, ct)
	}
	e.requireAuditClean()
}

// A duplicate of a request that is still running answers 409 with a
// Retry-After.
func TestInUseAnswerCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 100)
	ctx := context.Background()
	lock, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback(ctx) })
	_, err = lock.Exec(ctx, `SELECT 1 FROM wallets WHERE player_id = $1 FOR UPDATE`, alice.id)
	require.NoError(t, err)

	done := make(chan reply, 1)
	go func() { done <- e.do(alice, http.MethodPost, "/v1/conversions", "held", `{"mana":1}`) }()
	require.Eventually(t, func() bool {
		return e.count(`SELECT count(*) FROM idempotency_keys WHERE status = 'running'`) == 1
	}, testdb.WorkDeadline, 10*time.Millisecond)
	dup := e.do(alice, http.MethodPost, "/v1/conversions", "held", `{"mana":1}`)
	requireProblem(t, dup, http.StatusConflict, CodeIdempotencyKeyInUse)
	require.Equal(t, "1", dup.header.Get("Retry-After"))
	require.NoError(t, lock.Rollback(ctx))
	require.Equal(t, http.StatusCreated, (<-done).status)
	e.requireAuditClean()
}

// Every 503 the API answers says when to come back, whatever its cause.
func TestServiceUnavailableCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	a := &api{logger: quiet}
	for _, err := range []error{context.DeadlineExceeded, fmt.Errorf("fund: %w", context.DeadlineExceeded)} {
		w := httptest.NewRecorder()
		a.writeError(w, httptest.NewRequest(http.MethodPost, "/v1/conversions", nil), err)
		require.Equal(t, http.StatusServiceUnavailable, w.Code)
		require.Equal(t, "1", w.Header().Get("Retry-After"))
		require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	}
}

// send does req and reads its answer.
func send(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// Marquee and playground names follow one rule: the invisible and
// direction-changing characters a Marquee name refuses, a playground name
// refuses too.
func TestNamesFollowOneRule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	mq := idStr(e.fundedMarquee(alice))
	for _, name := range []string{"evil\u202egnp.exe", "zero\u200bwidth", "next\u0085line", "line\u2028sep", "tab\tname"} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			body, err := json.Marshal(map[string]string{"name": name, "plan": "standard"})
			require.NoError(t, err)
			requireProblem(t, e.do(alice, http.MethodPost, "/v1/marquees", "", string(body)), http.StatusBadRequest, "invalid_name")
			body, err = json.Marshal(map[string]string{"name": name})
			require.NoError(t, err)
			requireProblem(t, e.do(alice, http.MethodPost, "/v1/marquees/"+mq+"/playgrounds", "", string(body)),
				http.StatusBadRequest, "invalid_name")
		})
	}
	require.Equal(t, 0, e.count(`SELECT count(*) FROM playgrounds`))
	r := e.do(alice, http.MethodPost, "/v1/marquees/"+mq+"/playgrounds", "", `{"name":"café 🎉"}`)
	require.Equal(t, http.StatusAccepted, r.status, string(r.raw))
}

// noRedirects is a client that shows a redirect instead of following it.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// Every error answer is problem+json: a path that is not canonical (404,
// not the mux's 307), oversized headers (431), the River UI's 401 (with
// its challenge) and /healthz's 503.
func TestEveryErrorIsAProblem(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(s *setup) { s.RiverUIUser, s.RiverUIPassword = "ops", "secret" })
	alice := e.newPlayer("alice")
	get := func(path string, header map[string]string) reply {
		req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+alice.key)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := noRedirects.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
		_ = json.Unmarshal(raw, &r.body)
		return r
	}
	require.Equal(t, http.StatusOK, get("/v1/wallets", nil).status)
	for _, p := range []string{"/v1//wallets", "//v1/wallets", "/v1/x/../wallets", "/v1/./wallets", "/v1/wallets/.", "/v1/%2e%2e/v1/wallets"} {
		t.Run(p, func(t *testing.T) { requireProblem(t, get(p, nil), http.StatusNotFound, CodeNotFound) })
	}
	requireProblem(t, get("/v1/wallets", map[string]string{"X-Big": strings.Repeat("b", 100<<10)}),
		http.StatusRequestHeaderFieldsTooLarge, CodeHeadersTooLarge)

	ui := get("/riverui/", map[string]string{"Authorization": "Basic b3BzOndyb25n"}) // ops:wrong
	requireProblem(t, ui, http.StatusUnauthorized, CodeUnauthorized)
	require.Contains(t, ui.header.Get("WWW-Authenticate"), `Basic realm="River UI"`)

	down := testdbPool(t)
	down.Close()
	opts := e.opts
	opts.Pool, opts.Gatherer = down, prometheus.NewRegistry()
	s, err := New(opts)
	require.NoError(t, err)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	require.NotEmpty(t, w.Header().Get("Retry-After"))
}

func testdbPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testdb.NewURL(t))
	require.NoError(t, err)
	return pool
}

// A body the client cuts short is its own fault: 400, counted as a 4xx
// (the 5xx alert must not be trippable by any client), nothing stored.
//
// Not parallel: it counts the process-wide request counter of its route,
// which the package's parallel tests also move (busy runs P and Q saw two
// 400s); a sequential test runs before they start.
func TestTruncatedBodyIsA400NotA5xx(t *testing.T) {
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 100)
	route := "POST /v1/conversions"
	before400, before500 := counterValue(t, route, "400"), counterValue(t, route, "500")
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = fmt.Fprintf(conn, "POST /v1/conversions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Idempotency-Key: cut-short\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"mana\":", alice.key)
	require.NoError(t, err)
	require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	require.NoError(t, json.Unmarshal(raw, &r.body))
	requireProblem(t, r, http.StatusBadRequest, CodeBodyIncomplete)
	require.Equal(t, 1.0, counterValue(t, route, "400")-before400)
	require.Equal(t, 0.0, counterValue(t, route, "500")-before500)
	require.Equal(t, 0, e.count(`SELECT count(*) FROM idempotency_keys`))
	require.Equal(t, int64(100), balance(t, e, alice, wallet.Mana))
}
