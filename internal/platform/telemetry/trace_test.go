package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/stripemock"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/platform/telemetry"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
	"github.com/fibe-dev/billing/internal/web/httpapi"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

const stripeSecret = "whsec_trace_test_secret_1234567890"

// TestDeliveryTrace follows one signed Stripe delivery through the real
// server, the claim, the fulfil_order job and the wallet post, and checks
// the spans link up, name the order and event, and leak no secret.
func TestDeliveryTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	telemetry.Install(tp)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	sys := newSystem(t)
	apiKey, orderID := sys.checkout(t)
	eventID := fmt.Sprintf("evt_trace_%d", time.Now().UnixNano())
	body := providerevents.CompletedEvent("stripe", eventID, orderID, 999, "usd")
	_, signed := stripeevents.SignByStripeGo(stripeSecret, body, time.Now())
	status, answer := sys.post(t, "/webhooks/stripe", map[string]string{"Stripe-Signature": signed}, body)
	require.Equal(t, http.StatusOK, status, answer)

	var job sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		job = find(rec.Ended(), func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "river.work/fulfill_order" })
		return job != nil
	}, testdb.WorkDeadline, 20*time.Millisecond, "the fulfil_order job was not worked")
	spans := rec.Ended()

	delivery := find(spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "POST /webhooks/{provider}" })
	require.NotNil(t, delivery, "no server span for the delivery: %v", names(spans))
	require.Equal(t, "/webhooks/stripe", attr(delivery, "url.path"))
	claim := find(spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "webhook.claim" })
	require.NotNil(t, claim, "no claim span: %v", names(spans))
	require.Equal(t, delivery.SpanContext().SpanID(), claim.Parent().SpanID(), "the claim is not a child of the delivery")
	require.Equal(t, eventID, attr(claim, "billing.event_id"))
	require.Equal(t, fmt.Sprint(orderID), attr(claim, "billing.order_id"))

	require.Len(t, job.Links(), 1, "the job does not link to its enqueuer")
	require.Equal(t, claim.SpanContext().TraceID(), job.Links()[0].SpanContext.TraceID())
	require.Equal(t, claim.SpanContext().SpanID(), job.Links()[0].SpanContext.SpanID())
	require.Equal(t, claim.SpanContext().SpanID(), job.Parent().SpanID(), "the job is not the claim's child")
	require.Equal(t, delivery.SpanContext().TraceID(), job.SpanContext().TraceID(), "the purchase is not one trace")
	require.Equal(t, eventID, attr(job, "billing.event_id"))
	require.Equal(t, fmt.Sprint(orderID), attr(job, "billing.order_id"))

	post := find(spans, func(s sdktrace.ReadOnlySpan) bool {
		return strings.Contains(attr(s, "db.query.text"), "INSERT INTO wallet_transactions") &&
			s.SpanContext().TraceID() == job.SpanContext().TraceID()
	})
	require.NotNil(t, post, "no wallet post statement in the job's trace")
	require.True(t, descends(spans, post, job), "the wallet post is not under the job's span")

	for _, secret := range []string{stripeSecret, apiKey, signed, string(body)} {
		requireNoLeak(t, spans, secret)
	}

	requireFundTraced(t, rec, sys, apiKey)

	// Probes and scrapes are not traced, wherever they are served.
	probe := telemetry.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for _, path := range []string{"/healthz", "/metrics", "/v1/wallets"} {
		probe.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	traced := func(path string) bool {
		return find(rec.Ended(), func(s sdktrace.ReadOnlySpan) bool { return attr(s, "url.path") == path }) != nil
	}
	require.False(t, traced("/healthz"))
	require.False(t, traced("/metrics"))
	require.True(t, traced("/v1/wallets"))
}

// requireFundTraced checks an API call that enqueues a job: the fund_day
// job's span is in the request's trace, links to it and names its Marquee.
func requireFundTraced(t *testing.T, rec *tracetest.SpanRecorder, sys *system, apiKey string) {
	t.Helper()
	marquee := sys.marquee(t)
	status, answer := sys.post(t, "/v1/marquees/"+marquee+"/fund", map[string]string{"Authorization": "Bearer " + apiKey}, nil)
	require.Equal(t, http.StatusAccepted, status, answer)
	var fund sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		fund = find(rec.Ended(), func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "river.work/fund_day" })
		return fund != nil
	}, testdb.WorkDeadline, 20*time.Millisecond, "the fund_day job was not worked")
	call := find(rec.Ended(), func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "POST /v1/marquees/{id}/fund" })
	require.NotNil(t, call, "no server span for the fund call")
	require.Len(t, fund.Links(), 1)
	require.Equal(t, call.SpanContext().SpanID(), fund.Links()[0].SpanContext.SpanID())
	require.Equal(t, call.SpanContext().TraceID(), fund.SpanContext().TraceID())
	require.Equal(t, marquee, attr(fund, "billing.marquee_id"))
	requireNoLeak(t, rec.Ended(), apiKey)

}

// system is a web server (traced like billing web) and a worker over one
// fresh database whose pool carries the SQL tracer.
type system struct {
	srv *httptest.Server
	key string
}

func newSystem(t *testing.T) *system {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(testdb.NewURL(t))
	require.NoError(t, err)
	pcfg.ConnConfig.Tracer = telemetry.SQLTracer{}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	insertOnly, err := jobs.NewClient(pool, jobs.Options{Logger: quiet})
	require.NoError(t, err)
	providers := drivers.New(map[string]provider.Options{provider.Stripe: {APIKey: "sk_test_trace",
		APIURL: stripemock.Start(t), WebhookSecrets: []string{stripeSecret}}})
	wallets := wallet.New(pool, wallet.Options{SparksPerMana: 1})
	checkouts := checkout.NewService(checkout.Options{Openers: provider.Select[checkout.Opener](providers),
		SKUs: fulfillment.DefaultSKUs(), Logger: quiet})
	s, err := httpapi.New(httpapi.Options{Pool: pool, River: insertOnly, Wallet: wallets, Plans: enforcer.DefaultPlans(),
		Providers: providers, Checkouts: checkouts, Logger: quiet, Gatherer: prometheus.NewRegistry()})
	require.NoError(t, err)
	srv := httptest.NewServer(telemetry.HTTPHandler(s))
	t.Cleanup(srv.Close)

	// The jobs the traced calls enqueue, registered as cmd/billing's
	// registry registers them: fulfilment and funding.
	workers := river.NewWorkers()
	fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: pool, Wallet: wallets, Logger: quiet,
		Refunders: provider.Select[fulfillment.Refunder](providers)})
	enforcer.Register(workers, enforcer.WorkerOptions{Service: enforcer.New(pool, wallets, enforcer.Options{Logger: quiet})})
	small := river.QueueConfig{MaxWorkers: 2}
	worker, err := jobs.NewClient(pool, jobs.Options{Logger: quiet, Workers: workers, ID: t.Name(),
		Queues:            map[string]river.QueueConfig{jobs.QueueDefault: small, jobs.QueueFunding: small, jobs.QueueFulfillment: small},
		FetchPollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, worker.Start(context.Background()))
	t.Cleanup(func() { _ = jobs.Stop(context.Background(), worker, 5*time.Second) })

	_, key, err := players.Create(context.Background(), pool, "traced")
	require.NoError(t, err)
	return &system{srv: srv, key: key}
}

// checkout creates an order through the API and returns the API key used
// and the order's id.
func (s *system) checkout(t *testing.T) (string, int64) {
	t.Helper()
	status, answer := s.post(t, "/v1/checkouts", map[string]string{"Authorization": "Bearer " + s.key},
		[]byte(`{"sku":"mana_1000","provider":"stripe"}`))
	require.Equal(t, http.StatusCreated, status, answer)
	var order struct {
		ID int64 `json:"id,string"`
	}
	require.NoError(t, json.Unmarshal([]byte(answer), &order))
	return s.key, order.ID
}

// marquee creates a Marquee through the API and returns its id.
func (s *system) marquee(t *testing.T) string {
	t.Helper()
	status, answer := s.post(t, "/v1/marquees", map[string]string{"Authorization": "Bearer " + s.key},
		[]byte(`{"name":"traced","plan":"standard"}`))
	require.Equal(t, http.StatusCreated, status, answer)
	var m struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(answer), &m))
	return m.ID
}

func (s *system) post(t *testing.T, path string, headers map[string]string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func find(spans []sdktrace.ReadOnlySpan, ok func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if ok(s) {
			return s
		}
	}
	return nil
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// descends reports whether span is ancestor's descendant.
func descends(spans []sdktrace.ReadOnlySpan, span, ancestor sdktrace.ReadOnlySpan) bool {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	for cur := span; cur != nil; cur = byID[cur.Parent().SpanID()] {
		if cur.Parent().SpanID() == ancestor.SpanContext().SpanID() {
			return true
		}
		if !cur.Parent().IsValid() {
			return false
		}
	}
	return false
}

// requireNoLeak fails when any span's name, attribute, event or status
// holds secret.
func requireNoLeak(t *testing.T, spans []sdktrace.ReadOnlySpan, secret string) {
	t.Helper()
	require.NotEmpty(t, secret)
	for _, s := range spans {
		texts := []string{s.Name(), s.Status().Description}
		for _, kv := range s.Attributes() {
			texts = append(texts, kv.Value.Emit())
		}
		for _, ev := range s.Events() {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.Emit())
			}
		}
		for _, text := range texts {
			require.NotContains(t, text, secret, "span %q leaks a secret", s.Name())
		}
	}
}
