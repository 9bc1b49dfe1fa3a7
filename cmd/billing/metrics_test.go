package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

// TestMetrics runs `billing web` and `billing worker` as real processes on
// a fresh database, drives an exactly known workload through HTTP, then
// scrapes both /metrics endpoints and checks every series of the metrics
// table in docs/architecture.md with its value (summed over the two
// processes, as `sum()` would).
func TestMetrics(t *testing.T) {
	t.Parallel()
	r := startMetricsRun(t)
	r.webhooks()
	r.conversionsAndMarquee()
	m, insufficient := r.scrape()
	requireIntakeAndWalletSeries(t, m, insufficient)
	requireFundingSeries(t, m, insufficient)
	requireJobSeries(t, m)
	requireAPISeries(t, m)
	r.web.stop(t, syscall.SIGTERM, waitDeadline)
	r.worker.stop(t, syscall.SIGTERM, waitDeadline)
}

// metricsRun is TestMetrics' billing web and worker, their listeners and
// the player whose API key drives the workload.
type metricsRun struct {
	t                            *testing.T
	web, worker                  *proc
	webURL, webOpsURL, workerURL string
	secrets                      map[string]string
	api                          devAPI
}

func startMetricsRun(t *testing.T) *metricsRun {
	t.Helper()
	dbURL := testdb.NewURL(t)
	webAddr, webOpsAddr, metricsAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	r := &metricsRun{t: t, webURL: "http://" + webAddr, webOpsURL: "http://" + webOpsAddr, workerURL: "http://" + metricsAddr,
		secrets: map[string]string{"stripe": "whsec_metrics_stripe", "paddle": "pdl_metrics_paddle", "creem": "creem_metrics"}}
	env := []string{"BILLING_DATABASE_URL=" + dbURL, "BILLING_LOG_FORMAT=json",
		"BILLING_STRIPE_WEBHOOK_SECRET=" + r.secrets["stripe"],
		"BILLING_PADDLE_WEBHOOK_SECRET=" + r.secrets["paddle"],
		"BILLING_CREEM_WEBHOOK_SECRET=" + r.secrets["creem"]}
	// Checkouts need a provider API: a recording fake plays Stripe and Paddle.
	fake := providertest.StartFake()
	t.Cleanup(fake.Close)
	env = append(env, "BILLING_STRIPE_SECRET_KEY=sk_test_metrics", "BILLING_STRIPE_API_URL="+fake.URL,
		"BILLING_PADDLE_API_KEY=pdl_metrics", "BILLING_PADDLE_ENVIRONMENT="+fake.URL)
	r.web = startProc(t, append(env, "BILLING_HTTP_ADDR="+webAddr, "BILLING_METRICS_ADDR="+webOpsAddr), "web")
	r.worker = startProc(t, append(env, "BILLING_METRICS_ADDR="+metricsAddr, "BILLING_ENFORCER_SCHEDULE=@every 1s"), "worker")
	waitHealthy(t, r.webURL, r.web, waitDeadline)
	waitHealthy(t, r.webOpsURL, r.web, waitDeadline)
	waitHealthy(t, r.workerURL, r.worker, waitDeadline)
	requireNoPublicMetrics(t, r.webURL)

	var created struct {
		APIKey string `json:"api_key"`
	}
	out := runBilling(t, env, "players", "create", "--name", "metrics")
	require.NoError(t, json.Unmarshal([]byte(out), &created), out)
	r.api = devAPI{t: t, base: r.webURL, key: created.APIKey}
	return r
}

// deliver posts body to provider's webhook intake, signed with secret at at.
func (r *metricsRun) deliver(provider string, body []byte, secret string, at time.Time) (int, string) {
	t := r.t
	t.Helper()
	header, value, err := providerevents.Sign(provider, secret, body, at)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), apiRequestDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.webURL+"/webhooks/"+provider, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set(header, value)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// checkoutID checks sku out through provider and returns the order's id.
func (r *metricsRun) checkoutID(sku, provider string) (string, int64) {
	o := r.api.checkout(sku, provider)
	var id int64
	_, err := fmt.Sscan(o.ID, &id)
	require.NoError(r.t, err)
	return o.ID, id
}

// webhooks: one order paid by the same Stripe event twice, then four
// refusals; a Paddle payment of the wrong amount; a Creem payment of an
// order that does not exist.
func (r *metricsRun) webhooks() {
	t, now := r.t, time.Now()
	paid, paidID := r.checkoutID("mana_1000", "stripe")
	event := providerevents.CompletedEvent("stripe", "evt_metrics_1", paidID, 999, "usd")
	for _, want := range []string{"claimed", "duplicate"} {
		code, body := r.deliver("stripe", event, r.secrets["stripe"], now)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, want)
	}
	code, body := r.deliver("stripe", providerevents.CompletedEvent("stripe", "evt_bad", paidID, 999, "usd"), "whsec_wrong", now)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "bad_signature")
	code, body = r.deliver("stripe", providerevents.CompletedEvent("stripe", "evt_stale", paidID, 999, "usd"), r.secrets["stripe"], now.Add(-time.Hour))
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "stale_signature")
	code, body = r.deliver("stripe", []byte(`{"id":"evt_malformed",`), r.secrets["stripe"], now)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "malformed_payload")
	code, body = r.deliver("stripe", bytes.Repeat([]byte(" "), webhook.MaxBodyBytes+1), r.secrets["stripe"], now)
	require.Equal(t, http.StatusRequestEntityTooLarge, code, body)
	wrong, wrongID := r.checkoutID("mana_1000", "paddle")
	code, body = r.deliver("paddle", providerevents.CompletedEvent("paddle", "evt_metrics_2", wrongID, 1, "usd"), r.secrets["paddle"], now)
	require.Equal(t, http.StatusOK, code, body)
	code, body = r.deliver("creem", providerevents.CompletedEvent("creem", "evt_metrics_3", 999_999_999, 999, "usd"), r.secrets["creem"], now)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "fulfilled", r.api.waitOrder(paid).Status)
	require.Equal(t, "rejected", r.api.waitOrder(wrong).Status)
	waitMetric(t, r.workerURL, waitDeadline, "billing_fulfilments_total", lbl("outcome", "unknown_order"), 1)
}

// convert converts mana Mana, requiring the status want.
func (r *metricsRun) convert(mana int64, want int, headers ...string) http.Header {
	r.t.Helper()
	status, b, h := r.api.do(http.MethodPost, "/v1/conversions", map[string]int64{"mana": mana}, headers...)
	require.Equal(r.t, want, status, string(b))
	return h
}

// conversionsAndMarquee: a key sent twice, then with another body; one
// too large. Then a Marquee (100 Sparks a day) whose owner has 50 Sparks,
// then 250.
func (r *metricsRun) conversionsAndMarquee() {
	t := r.t
	r.convert(50, http.StatusCreated, "Idempotency-Key", "metrics-conv-1")
	h := r.convert(50, http.StatusCreated, "Idempotency-Key", "metrics-conv-1")
	require.Equal(t, "true", h.Get("X-Idempotent-Replayed"))
	r.convert(51, http.StatusUnprocessableEntity, "Idempotency-Key", "metrics-conv-1")
	r.convert(5000, http.StatusConflict) // 950 Mana left

	var marquee struct {
		ID     string `json:"id"`
		Funded bool   `json:"funded"`
	}
	r.api.decode(http.MethodPost, "/v1/marquees", map[string]string{"name": "m", "plan": "standard"}, http.StatusCreated, &marquee)
	waitMetric(t, r.workerURL, waitDeadline, "billing_fundings_total", lbl("outcome", "insufficient"), 1)
	r.convert(200, http.StatusCreated)
	waitMetric(t, r.workerURL, waitDeadline, "billing_fundings_total", lbl("outcome", "funded"), 1)
	r.api.decode(http.MethodGet, "/v1/marquees/"+marquee.ID, nil, http.StatusOK, &marquee)
	require.True(t, marquee.Funded)
	mana, sparks := r.api.balances()
	require.Equal(t, []int64{1000 - 250, 250 - 100}, []int64{mana, sparks})
}

// scrape is both scrapes, summed, and the insufficient fundings among
// them. The fund_day counts are cross-checked against River's own
// numbers; a sweep tick may still be finishing, so it retries.
func (r *metricsRun) scrape() (metricSet, float64) {
	t := r.t
	var m metricSet
	require.Eventually(t, func() bool {
		m = scrapeAll(t, r.webOpsURL, r.workerURL)
		fundings := m.sum("billing_fundings_total")
		return fundings == m.value("billing_river_jobs", lbl("kind", "fund_day", "state", "completed")) &&
			fundings == m.value("billing_river_jobs_worked_total", lbl("kind", "fund_day", "outcome", "completed"))
	}, waitDeadline, 200*time.Millisecond, "fund_day jobs and fundings agree")
	insufficient := m.value("billing_fundings_total", lbl("outcome", "insufficient"))
	require.GreaterOrEqual(t, insufficient, 1.0)
	t.Logf("fundings: %v insufficient before the top-up (one per sweep tick)", insufficient)
	return m, insufficient
}

// requireIntakeAndWalletSeries: the webhook deliveries and wallet posts
// TestMetrics made.
func requireIntakeAndWalletSeries(t *testing.T, m metricSet, insufficient float64) {
	t.Helper()
	// billing_webhook_deliveries_total: exactly these series.
	require.Equal(t, map[string]float64{
		lbl("provider", "stripe", "outcome", "claimed"):       1,
		lbl("provider", "stripe", "outcome", "duplicate"):     1,
		lbl("provider", "stripe", "outcome", "bad_signature"): 1,
		lbl("provider", "stripe", "outcome", "stale"):         1,
		lbl("provider", "stripe", "outcome", "malformed"):     1,
		lbl("provider", "stripe", "outcome", "too_large"):     1,
		lbl("provider", "paddle", "outcome", "claimed"):       1,
		lbl("provider", "creem", "outcome", "claimed"):        1,
	}, m.family("billing_webhook_deliveries_total"))
	require.Equal(t, 6.0, m.value("billing_webhook_delivery_duration_seconds_count", lbl("provider", "stripe")))

	// billing_wallet_posts_total: the purchase, three conversions (two
	// made, one refused; the replay and the reused key never reach the
	// wallet), the fundings.
	require.Equal(t, map[string]float64{
		lbl("kind", "purchase", "outcome", "created"):        1,
		lbl("kind", "conversion", "outcome", "created"):      2,
		lbl("kind", "conversion", "outcome", "insufficient"): 1,
		lbl("kind", "funding", "outcome", "insufficient"):    insufficient,
		lbl("kind", "funding", "outcome", "created"):         1,
	}, m.family("billing_wallet_posts_total"))
}

// requireFundingSeries: fundings, their lag, the enforcer.
func requireFundingSeries(t *testing.T, m metricSet, insufficient float64) {
	t.Helper()
	require.Equal(t, 1.0, m.value("billing_fundings_total", lbl("outcome", "funded")))
	require.Contains(t, []float64{0, 1}, m.value("billing_fundings_total", lbl("outcome", "already_paid")),
		"exported from the start; at most one late sweep tick")
	require.True(t, m.has("billing_fundings_total", lbl("outcome", "already_paid")))
	require.Equal(t, 0.0, m.value("billing_fundings_total", lbl("outcome", "stopped")))
	require.Equal(t, 1.0, m.value("billing_funding_lag_seconds_count", ""))
	require.Positive(t, m.value("billing_funding_lag_seconds_sum", ""))
	require.GreaterOrEqual(t, m.value("billing_enforcer_sweeps_total", ""), insufficient+1)
	require.GreaterOrEqual(t, m.value("billing_enforcer_sweep_duration_seconds_count", ""), insufficient+1)
	require.True(t, m.has("billing_enforcer_sweep_deadlocks_total", ""), "exported from the start")
	require.True(t, m.has("billing_marquees_unfunded", ""), "billing web exports the unfunded gauge")
	require.Equal(t, 0.0, m.value("billing_marquees_unfunded", ""), "the Marquee was funded after its top-up")
}

// requireJobSeries: River jobs, fulfillments.
func requireJobSeries(t *testing.T, m metricSet) {
	t.Helper()
	require.Equal(t, 1.0, m.value("billing_river_jobs", lbl("kind", "fulfill_order", "state", "completed")))
	require.Equal(t, 2.0, m.value("billing_river_jobs", lbl("kind", "fulfill_order", "state", "cancelled")))
	for _, state := range []string{"retryable", "discarded", "available", "running"} {
		require.False(t, m.has("billing_river_jobs", lbl("kind", "fulfill_order", "state", state)), state)
		require.False(t, m.has("billing_river_jobs", lbl("kind", "fund_day", "state", state)), state)
	}
	require.Equal(t, 1.0, m.value("billing_river_jobs_worked_total", lbl("kind", "fulfill_order", "outcome", "completed")))
	require.Equal(t, 2.0, m.value("billing_river_jobs_worked_total", lbl("kind", "fulfill_order", "outcome", "cancelled")))
	require.Equal(t, 2.0, m.value("billing_river_job_duration_seconds_count", lbl("kind", "fulfill_order", "outcome", "cancelled")))
	require.Equal(t, map[string]float64{
		lbl("outcome", "fulfilled"):         1,
		lbl("outcome", "rejected"):          1,
		lbl("outcome", "unknown_order"):     1,
		lbl("outcome", "already_fulfilled"): 0, // exported at zero from the start
		lbl("outcome", "already_rejected"):  0,
		lbl("outcome", "unapplied"):         0,
		lbl("outcome", "error"):             0,
	}, m.family("billing_fulfilments_total"))
}

// requireAPISeries: the idempotency cache and the API.
func requireAPISeries(t *testing.T, m metricSet) {
	t.Helper()
	require.Equal(t, map[string]float64{
		lbl("outcome", "miss"):   1,
		lbl("outcome", "replay"): 1,
		lbl("outcome", "reused"): 1,
	}, m.family("billing_idempotency_requests_total"))
	for route, want := range map[string]map[string]float64{
		"POST /v1/conversions": {"201": 3, "409": 1, "422": 1},
		"POST /v1/checkouts":   {"201": 2},
		"POST /v1/marquees":    {"201": 1},
	} {
		for code, n := range want {
			require.Equal(t, n, m.value("billing_http_requests_total", lbl("code", code, "route", route)), "%s %s", route, code)
		}
	}
	for key := range m.family("billing_http_requests_total") {
		require.NotContains(t, key, `code="5`, "no 5xx answers")
	}
}

// metricSet holds scraped samples: family name (histograms as _count and
// _sum) -> canonical label string (see lbl) -> value, summed over scrapes.
type metricSet map[string]map[string]float64

// lbl is the canonical label string of name, value pairs: sorted by name.
func lbl(kv ...string) string {
	pairs := make([]string, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

func (m metricSet) add(families map[string]*dto.MetricFamily) {
	put := func(name, key string, v float64) {
		if m[name] == nil {
			m[name] = map[string]float64{}
		}
		m[name][key] += v
	}
	for name, mf := range families {
		for _, s := range mf.GetMetric() {
			var kv []string
			for _, l := range s.GetLabel() {
				kv = append(kv, l.GetName(), l.GetValue())
			}
			key := lbl(kv...)
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				put(name, key, s.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				put(name, key, s.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				put(name+"_count", key, float64(s.GetHistogram().GetSampleCount()))
				put(name+"_sum", key, s.GetHistogram().GetSampleSum())
			case dto.MetricType_UNTYPED:
				put(name, key, s.GetUntyped().GetValue())
			}
		}
	}
}

func (m metricSet) has(name, labels string) bool {
	_, ok := m[name][labels]
	return ok
}

// value is the sample of name with exactly labels; 0 when absent.
func (m metricSet) value(name, labels string) float64 { return m[name][labels] }

// family is every series of name (nil when there are none).
func (m metricSet) family(name string) map[string]float64 { return m[name] }

func (m metricSet) sum(name string) float64 {
	var n float64
	for _, v := range m[name] {
		n += v
	}
	return n
}

func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, base+"/metrics", "", "")
	require.Equal(t, http.StatusOK, code, body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	return families
}

func scrapeAll(t *testing.T, bases ...string) metricSet {
	t.Helper()
	m := metricSet{}
	for _, base := range bases {
		m.add(scrape(t, base))
	}
	return m
}

// waitMetric waits until the series name{labels} on base reaches at least min.
func waitMetric(t *testing.T, base string, timeout time.Duration, name, labels string, min float64) {
	t.Helper()
	require.Eventually(t, func() bool {
		return scrapeAll(t, base).value(name, labels) >= min
	}, timeout, 100*time.Millisecond, "%s{%s} stays below %v", name, labels, min)
}

// requireNoPublicMetrics: the public API listener does not show /metrics
// (business volumes); it answers the API's 404 problem.
func requireNoPublicMetrics(t *testing.T, base string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), apiRequestDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, string(body))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Contains(t, string(body), `"code":"not_found"`)
	require.NotContains(t, string(body), "billing_")
}

// TestAlertCountersExportedAtZero: every counter series an "any
// occurrence" alert watches exists before its first increment, so
// increase() sees that increment (a series born at 1 has no earlier
// sample to compare with). The worker exports its reconciliation series
// when it registers its workers, as here.
func TestAlertCountersExportedAtZero(t *testing.T) {
	t.Parallel()
	cfg, err := load(nil, config.Options{Env: map[string]string{}})
	require.NoError(t, err)
	registry(newApp(cfg, nil).jobsDeps(nil))
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	m := metricSet{}
	m.add(familiesByName(families))
	want := []struct{ name, labels string }{
		{"billing_debts_opened_total", ""},
		{"billing_fulfilments_total", lbl("outcome", "rejected")},
		{"billing_fulfilments_total", lbl("outcome", "unknown_order")},
		{"billing_river_jobs_worked_total", lbl("kind", "fulfill_order", "outcome", "cancelled")},
		{"billing_reversals_total", lbl("outcome", "refused")},
		{"billing_reconcile_runs_total", lbl("provider", "paddle", "outcome", "error")},
		{"billing_fundings_total", lbl("outcome", "funded")},
		{"billing_db_commits_not_durable_total", ""},
	}
	for _, p := range provider.Names() {
		want = append(want, struct{ name, labels string }{"billing_unapplied_payments_total", lbl("provider", p)})
		for _, k := range []string{fulfillment.ReversalRefund, fulfillment.ReversalDispute} {
			want = append(want, struct{ name, labels string }{"billing_clawbacks_total", lbl("kind", k, "provider", p)})
		}
		if p != provider.Creem {
			want = append(want, struct{ name, labels string }{"billing_reconcile_recovered_total", lbl("provider", p)})
		}
	}
	for _, w := range want {
		require.True(t, m.has(w.name, w.labels), "%s{%s} is exported before its first increment", w.name, w.labels)
	}
}

func familiesByName(fs []*dto.MetricFamily) map[string]*dto.MetricFamily {
	out := make(map[string]*dto.MetricFamily, len(fs))
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out
}
