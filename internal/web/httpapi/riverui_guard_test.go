package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

// uiEnv is a real server with the River UI mounted, over a fresh database.
type uiEnv struct {
	pool *pgxpool.Pool
	srv  *httptest.Server
	ops  *httptest.Server
}

func newUIEnv(t *testing.T) *uiEnv {
	t.Helper()
	pool := testdb.New(t)
	client, err := jobs.NewClient(pool, jobs.Options{Logger: quiet})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "billing_test_volume_total", Help: "test"}))
	s, err := New(Options{Pool: pool, River: client, Wallet: wallet.New(pool, wallet.Options{}), Plans: enforcer.DefaultPlans(),
		RiverUIUser: "ops", RiverUIPassword: "s3cret", Logger: quiet, Gatherer: reg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, s.Start(ctx))
	e := &uiEnv{pool: pool, srv: httptest.NewServer(s), ops: httptest.NewServer(s.OpsHandler())}
	t.Cleanup(e.srv.Close)
	t.Cleanup(e.ops.Close)
	return e
}

// retryableJob inserts a job that failed once and waits an hour for its
// next attempt: what an operator retries from the UI.
func (e *uiEnv) retryableJob(t *testing.T) int64 {
	t.Helper()
	ctx := context.Background()
	client, err := jobs.NewClient(e.pool, jobs.Options{Logger: quiet})
	require.NoError(t, err)
	res, err := client.Insert(ctx, jobs.NoopArgs{}, nil)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `UPDATE river_job SET state = 'retryable', attempt = 1, attempted_at = now(),
		scheduled_at = now() + interval '1 hour' WHERE id = $1`, res.Job.ID)
	require.NoError(t, err)
	return res.Job.ID
}

func (e *uiEnv) state(t *testing.T, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&s))
	return s
}

// retry posts River UI's retry call for id with the given headers and body.
func (e *uiEnv) retry(t *testing.T, id int64, headers map[string]string, body string) (int, string, string) {
	t.Helper()
	if body == "" {
		body = fmt.Sprintf(`{"ids":["%d"]}`, id)
	}
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/riverui/api/jobs/retry", strings.NewReader(body))
	require.NoError(t, err)
	req.SetBasicAuth("ops", "s3cret")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestRiverUIRefusesCrossSiteRequests: with cached Basic credentials, a
// page on another site must not retry (or cancel, or delete) jobs, by any
// of the ways a browser lets it post; the job is left as it was.
func TestRiverUIRefusesCrossSiteRequests(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t)
	form := url.Values{"ids": {"1"}}.Encode()
	cases := []struct {
		name    string
		headers map[string]string
		body    string
		code    string
	}{
		{"cross-site Origin, JSON", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/json"}, "", CodeCrossSiteRequest},
		{"cross-site Origin, form", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}, form, CodeCrossSiteRequest},
		{"cross-site Origin, text/plain", map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}, "", CodeCrossSiteRequest},
		{"null Origin", map[string]string{"Origin": "null", "Content-Type": "application/json"}, "", CodeCrossSiteRequest},
		{"Sec-Fetch-Site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, "", CodeCrossSiteRequest},
		{"Sec-Fetch-Site same-site", map[string]string{"Sec-Fetch-Site": "same-site", "Content-Type": "text/plain"}, "", CodeCrossSiteRequest},
		{"form, no origin headers", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, form, CodeJSONRequired},
		{"multipart form, no origin headers", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, "--x--", CodeJSONRequired},
		{"text/plain, no origin headers", map[string]string{"Content-Type": "text/plain"}, "", CodeJSONRequired},
		{"text/plain, Sec-Fetch-Site none", map[string]string{"Sec-Fetch-Site": "none", "Content-Type": "text/plain"}, "", CodeJSONRequired},
		{"form, same-origin browser", map[string]string{"Sec-Fetch-Site": "same-origin", "Content-Type": "application/x-www-form-urlencoded"}, form, CodeJSONRequired},
		{"no Content-Type with a body", nil, "", CodeJSONRequired},
		{"unparsable Content-Type", map[string]string{"Content-Type": "application/json; ="}, "", CodeJSONRequired},
	}
	for _, c := range cases {
		id := e.retryableJob(t)
		status, ct, body := e.retry(t, id, c.headers, strings.ReplaceAll(c.body, `"1"`, fmt.Sprint(id)))
		require.Equal(t, http.StatusForbidden, status, "%s: %s", c.name, body)
		require.Equal(t, "application/problem+json", ct, c.name)
		var p Problem
		require.NoError(t, json.Unmarshal([]byte(body), &p), c.name)
		require.Equal(t, c.code, p.Code, c.name)
		require.Equal(t, "retryable", e.state(t, id), "%s: the job is left alone", c.name)
	}
}

// TestRiverUISameOriginRequestsWork: the guard lets the UI do its job: a
// same-origin JSON retry, the text/plain body the UI's own frontend sends
// (it sets no Content-Type), a non-browser JSON client, and reads from
// anywhere.
func TestRiverUISameOriginRequestsWork(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t)
	host := strings.TrimPrefix(e.srv.URL, "http://")
	cases := []struct {
		name    string
		headers map[string]string
	}{
		{"same-origin JSON", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host, "Content-Type": "application/json"}},
		{"Origin only, JSON", map[string]string{"Origin": "http://" + host, "Content-Type": "application/json; charset=utf-8"}},
		{"UI frontend's text/plain", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host, "Content-Type": "text/plain;charset=UTF-8"}},
		{"old browser's text/plain with our Origin", map[string]string{"Origin": "http://" + host, "Content-Type": "text/plain;charset=UTF-8"}},
		{"non-browser JSON client", map[string]string{"Content-Type": "application/json"}},
	}
	for _, c := range cases {
		id := e.retryableJob(t)
		status, _, body := e.retry(t, id, c.headers, "")
		require.Equal(t, http.StatusOK, status, "%s: %s", c.name, body)
		require.Equal(t, "available", e.state(t, id), "%s: retried", c.name)
	}

	// The UI pauses a queue with a bodiless PUT (no Content-Type at all).
	_, err := e.pool.Exec(context.Background(), `INSERT INTO river_queue (name, created_at, metadata, updated_at)
		VALUES ('default', now(), '{}', now()) ON CONFLICT DO NOTHING`)
	require.NoError(t, err)
	pause, err := http.NewRequest(http.MethodPut, e.srv.URL+"/riverui/api/queues/default/pause", nil)
	require.NoError(t, err)
	pause.SetBasicAuth("ops", "s3cret")
	pause.Header.Set("Sec-Fetch-Site", "same-origin")
	pause.Header.Set("Origin", "http://"+host)
	resp, err := e.srv.Client().Do(pause)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var paused bool
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT paused_at IS NOT NULL FROM river_queue WHERE name = 'default'`).Scan(&paused))
	require.True(t, paused, "the bodiless PUT paused the queue")

	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/riverui/api/jobs?state=available", nil)
	require.NoError(t, err)
	req.SetBasicAuth("ops", "s3cret")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = e.srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "a read is safe from anywhere")
}

// TestMetricsOnlyOnTheOpsListener: /metrics shows business volumes, so the
// public listener answers it as an unknown route; the operator listener
// serves it and /healthz. /healthz stays public for load balancers.
func TestMetricsOnlyOnTheOpsListener(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t)
	get := func(url string) (int, string, string) {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	status, ct, body := get(e.srv.URL + "/metrics")
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "application/problem+json", ct)
	require.Contains(t, body, `"code":"not_found"`)
	require.NotContains(t, body, "billing_test_volume_total")

	status, _, body = get(e.ops.URL + "/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "billing_test_volume_total")
	for _, base := range []string{e.srv.URL, e.ops.URL} {
		status, _, body = get(base + "/healthz")
		require.Equal(t, http.StatusOK, status, base)
		require.Equal(t, "ok\n", body)
	}
}
