package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/proctest"
	"github.com/fibe-dev/billing/internal/kit/stripemock"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// prometheusBin is Debian's prometheus package's server.
const prometheusBin = "/usr/bin/prometheus"

// TestAlertRules checks deploy/prometheus/alerts.yml with promtool and runs
// its unit tests (alerts_test.yml: every alert's firing and quiet cases).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "runs promtool")
	promtool := proctest.RequireTool(t, "apt-get install -y prometheus", "promtool")
	dir := "../../deploy/prometheus"
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		require.Contains(t, string(out), "SUCCESS")
	}
}

// TestAlertRunbooks checks every alert of alerts.yml has its runbook entry
// in docs/operations.md, which its runbook_url names.
func TestAlertRunbooks(t *testing.T) {
	t.Parallel()
	rules, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	ops, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	names := regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(string(rules), -1)
	require.Len(t, names, alertCount(t))
	for _, m := range names {
		name := m[1]
		require.Contains(t, string(ops), "\n### "+name+"\n", "no runbook entry for %s in docs/operations.md", name)
		require.Contains(t, string(rules), `runbook_url: "docs/operations.md#`+strings.ToLower(name)+`"`, name)
	}
}

// TestPrometheusRunsTheDocumentedQueries starts a real Prometheus scraping a
// billing web and a billing worker, with deploy/prometheus/alerts.yml
// loaded, drives a small workload, and checks through Prometheus's HTTP API
// that queries of the series in docs/architecture.md return what happened
// and that every alert rule evaluates cleanly and stays quiet on a healthy
// system.
func TestPrometheusRunsTheDocumentedQueries(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "runs Prometheus and two billing processes")
	proctest.RequireTool(t, "apt-get install -y prometheus", prometheusBin)
	const secret = "whsec_prometheus_e2e"
	dbURL := testdb.NewURL(t)
	webAddr, webMetricsAddr, workerMetricsAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL, "BILLING_LOG_FORMAT=json", "BILLING_STRIPE_WEBHOOK_SECRET=" + secret,
		"BILLING_STRIPE_SECRET_KEY=sk_test_prometheus", "BILLING_STRIPE_API_URL=" + stripemock.Start(t)}
	web := startProc(t, append(env, "BILLING_HTTP_ADDR="+webAddr, "BILLING_METRICS_ADDR="+webMetricsAddr), "web")
	worker := startProc(t, append(env, "BILLING_METRICS_ADDR="+workerMetricsAddr, "BILLING_ENFORCER_SCHEDULE=@every 1s"), "worker")
	waitHealthy(t, "http://"+webAddr, web, waitDeadline)
	waitHealthy(t, "http://"+workerMetricsAddr, worker, waitDeadline)

	prom := startPrometheus(t, webMetricsTarget(t, webAddr, webMetricsAddr), workerMetricsAddr)
	prom.waitValue(t, `sum(up{job=~"billing-web|billing-worker"})`, 2)

	var created struct {
		APIKey string `json:"api_key"`
	}
	out := runBilling(t, env, "players", "create", "--name", "prometheus")
	require.NoError(t, json.Unmarshal([]byte(out), &created), out)
	api := devAPI{t: t, base: "http://" + webAddr, key: created.APIKey}
	promWorkload(t, api, secret)

	// The series of docs/architecture.md, as an operator would query them.
	prom.waitValue(t, `sum(billing_webhook_deliveries_total{outcome="claimed"})`, 1)
	prom.waitValue(t, `sum(billing_webhook_deliveries_total{outcome="duplicate"})`, 1)
	prom.waitValue(t, `sum by (provider, outcome) (billing_webhook_deliveries_total{outcome=~"bad_signature|stale"})`, 1)
	prom.waitValue(t, `sum(billing_fulfilments_total{outcome="fulfilled"})`, 1)
	prom.waitValue(t, `sum(billing_idempotency_requests_total{outcome="replay"})`, 1)
	prom.waitValue(t, `sum(billing_fundings_total{outcome="funded"})`, 1)
	prom.waitValue(t, `max(billing_marquees_unfunded)`, 0)
	prom.waitValue(t, `max by (kind) (billing_river_jobs{kind="fulfill_order",state="completed"})`, 1)
	prom.waitValue(t, `sum(billing_http_requests_total{code=~"5.."}) or vector(0)`, 0)
	prom.waitValue(t, `sum(increase(billing_enforcer_sweeps_total[1m])) > bool 0`, 1)

	prom.requireQuiet(t)
	promMismatch(t, api, prom, secret)
}

// promWorkload pays an order by webhook (with a duplicate and a forgery),
// converts with one key twice and creates a Marquee, which the enforcer funds.
func promWorkload(t *testing.T, api devAPI, secret string) {
	t.Helper()
	order := api.checkout("mana_1000", "stripe")
	id, err := strconv.ParseInt(order.ID, 10, 64)
	require.NoError(t, err)
	event := providerevents.CompletedEvent("stripe", "evt_prometheus_1", id, 999, "usd")
	for _, s := range []string{secret, secret, "whsec_wrong"} {
		header, value, err := providerevents.Sign("stripe", s, event, time.Now())
		require.NoError(t, err)
		status, _, _ := api.do(http.MethodPost, "/webhooks/stripe", json.RawMessage(event), header, value)
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest}, status)
	}
	require.Equal(t, "fulfilled", api.waitOrder(order.ID).Status)
	for range 2 {
		status, b, _ := api.do(http.MethodPost, "/v1/conversions", map[string]int64{"mana": 300}, "Idempotency-Key", "prom-conv-1")
		require.Equal(t, http.StatusCreated, status, string(b))
	}
	var marquee struct {
		ID string `json:"id"`
	}
	api.decode(http.MethodPost, "/v1/marquees", map[string]string{"name": "m", "plan": "standard"}, http.StatusCreated, &marquee)
}

// promDeadline bounds each wait on Prometheus (ready, a rule evaluated, a
// query's answer): seconds on an idle machine, many times that at load 30.
const promDeadline = 2 * time.Minute

// requireQuiet waits until every rule of alerts.yml evaluated without error
// and none is pending or firing on this healthy system (the enforcer sweeps
// every second). A rule may be pending for a moment (the Marquee was
// unfunded until its funding job ran), so evaluations get time to catch up.
func (p *promServer) requireQuiet(t *testing.T) {
	t.Helper()
	var active []string
	for deadline := time.Now().Add(promDeadline); ; time.Sleep(250 * time.Millisecond) {
		rules := p.rules(t)
		require.Len(t, rules, alertCount(t))
		active = active[:0]
		for _, r := range rules {
			require.Equal(t, "ok", r.Health, "rule %s: %s", r.Name, r.LastError)
			if h := time.Now().UTC().Hour(); r.Name == "BillingFundingLagHigh" && h >= 1 && h < 6 {
				continue // this run's Marquee is funded hours into its day, as the rule expects of the night
			}
			if r.State != "inactive" {
				active = append(active, r.Name+" "+r.State)
			}
		}
		if len(active) == 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "alerts on a healthy system: %v", active)
	}
}

// promMismatch checks the first payment that does not match its order pages
// at once, although its counters' series only appear with it.
func promMismatch(t *testing.T, api devAPI, prom *promServer, secret string) {
	t.Helper()
	wrong := api.checkout("mana_1000", "stripe")
	wrongID, err := strconv.ParseInt(wrong.ID, 10, 64)
	require.NoError(t, err)
	mismatch := providerevents.CompletedEvent("stripe", "evt_prometheus_2", wrongID, 1, "usd")
	header, value, err := providerevents.Sign("stripe", secret, mismatch, time.Now())
	require.NoError(t, err)
	status, b, _ := api.do(http.MethodPost, "/webhooks/stripe", json.RawMessage(mismatch), header, value)
	require.Equal(t, http.StatusOK, status, string(b))
	require.Equal(t, "rejected", api.waitOrder(wrong.ID).Status)
	prom.waitValue(t, `count(ALERTS{alertname="BillingPaymentMismatch",alertstate="firing"})`, 1)
	prom.waitValue(t, `count(ALERTS{alertname="BillingFulfilmentsRejected",alertstate="firing",outcome="rejected"})`, 1)
}

// webMetricsTarget is where billing web serves /metrics: its metrics
// address where it has one, else its HTTP address.
func webMetricsTarget(t *testing.T, webAddr, metricsAddr string) string {
	t.Helper()
	client := http.Client{Timeout: promDeadline} // a busy machine is slow, not wrong
	if resp, err := client.Get("http://" + metricsAddr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return metricsAddr
		}
	}
	return webAddr
}

// promServer is a running Prometheus server.
type promServer struct{ base string }

func startPrometheus(t *testing.T, webTarget, workerTarget string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs("../../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	// A scrape runs the processes' collectors (database queries): on a
	// busy machine it can take seconds, and a scrape past its timeout
	// (never more than the interval) reads as up == 0.
	cfg := fmt.Sprintf(`global:
  scrape_interval: 5s
  scrape_timeout: 5s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: billing-web
    static_configs: [{targets: [%q]}]
  - job_name: billing-worker
    static_configs: [{targets: [%q]}]
`, rules, webTarget, workerTarget)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600))
	addr := freeAddr(t)
	cmd := exec.Command(prometheusBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	p := &promServer{base: "http://" + addr}
	deadline := time.Now().Add(promDeadline)
	for {
		if resp, err := http.Get(p.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		require.False(t, time.Now().After(deadline), "prometheus not ready:\n%s", out.String())
		time.Sleep(100 * time.Millisecond)
	}
}

// api calls Prometheus's HTTP API and decodes its data.
func (p *promServer) api(t *testing.T, path string, data any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), apiRequestDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, "success", body.Status, "%s: %s", path, body.Error)
	require.NoError(t, json.Unmarshal(body.Data, data))
}

// values runs an instant query and returns each sample's value.
func (p *promServer) values(t *testing.T, query string) []float64 {
	t.Helper()
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	p.api(t, "/api/v1/query?query="+url.QueryEscape(query), &data)
	out := make([]float64, 0, len(data.Result))
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// waitValue polls query until it returns exactly one sample equal to want
// (scrapes are every 5 seconds).
func (p *promServer) waitValue(t *testing.T, query string, want float64) {
	t.Helper()
	var got []float64
	for deadline := time.Now().Add(promDeadline); ; time.Sleep(250 * time.Millisecond) {
		got = p.values(t, query)
		if len(got) == 1 && got[0] == want {
			return
		}
		require.False(t, time.Now().After(deadline), "%s = %v, want [%v]", query, got, want)
	}
}

type ruleState struct {
	Name      string `json:"name"`
	Health    string `json:"health"`
	State     string `json:"state"`
	LastError string `json:"lastError"`
}

// rules are the alerting rules once each has been evaluated.
func (p *promServer) rules(t *testing.T) []ruleState {
	t.Helper()
	var data struct {
		Groups []struct {
			Rules []ruleState `json:"rules"`
		} `json:"groups"`
	}
	for deadline := time.Now().Add(promDeadline); ; time.Sleep(250 * time.Millisecond) {
		p.api(t, "/api/v1/rules?type=alert", &data)
		var out []ruleState
		evaluated := true
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				evaluated = evaluated && r.Health != "unknown"
				out = append(out, r)
			}
		}
		if evaluated && len(out) > 0 {
			return out
		}
		require.False(t, time.Now().After(deadline), "rules never evaluated: %+v", data)
	}
}

// alertCount is the number of alerts in deploy/prometheus/alerts.yml.
func alertCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	return strings.Count(string(b), "- alert: ")
}

// lockedBuffer collects a child process's output while tests read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
