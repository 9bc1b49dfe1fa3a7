package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	apidoc "github.com/fibe-dev/billing/api"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
	"github.com/fibe-dev/billing/internal/web/requests"
	"github.com/fibe-dev/billing/wallet"
)

// operational are the routes of the web process that are not part of the
// API contract: metrics and the River UI (an admin console behind its own
// credentials). The health probe is documented.
var operational = []string{"GET /metrics", "/riverui/", "/riverui"}

// redirects are routes that only send the client to a documented path
// (the document names them in that path's description).
var redirects = []string{"GET /v1/{$}"}

// docPath is the document's path of a mux pattern's path: "/{$}" (the
// exact root) is "/".
func docPath(pattern string) string {
	if pattern == "/{$}" {
		return "/"
	}
	return pattern
}

const conformanceStripeSecret = "whsec_conformance_0123456789"

// loadDoc loads and validates api/openapi.yaml, pointed at url.
func loadDoc(t *testing.T, url string) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(apidoc.YAML)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()), "api/openapi.yaml is not a valid OpenAPI document")
	require.True(t, doc.IsOpenAPI31OrLater())
	doc.Servers = openapi3.Servers{{URL: url}}
	return doc
}

// conformance sends requests to the real server and checks each request
// and answer against the document.
type conformance struct {
	t      *testing.T
	e      *env
	router routers.Router

	mu    sync.Mutex
	seen  map[string]map[int]bool // operationId -> statuses answered
	calls int
}

func newConformance(t *testing.T, e *env) *conformance {
	t.Helper()
	router, err := gorillamux.NewRouter(loadDoc(t, e.srv.URL))
	require.NoError(t, err)
	return &conformance{t: t, e: e, router: router, seen: map[string]map[int]bool{}}
}

// call is one request; docInvalid says the document itself forbids the
// request (the server must refuse it too, which want checks).
type call struct {
	as         player
	method     string
	path       string
	key        string
	body       string
	headers    map[string]string
	want       int
	code       string // the problem code wanted, for an error
	docInvalid bool
}

func (c *conformance) do(k call) reply {
	c.t.Helper()
	req, err := http.NewRequest(k.method, c.e.srv.URL+k.path, strings.NewReader(k.body))
	require.NoError(c.t, err)
	if k.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if k.as.key != "" {
		req.Header.Set("Authorization", "Bearer "+k.as.key)
	}
	if k.key != "" {
		req.Header.Set("Idempotency-Key", k.key)
	}
	for h, v := range k.headers {
		req.Header.Set(h, v)
	}
	route, params, err := c.router.FindRoute(req)
	require.NoError(c.t, err, "%s %s is not in the document", k.method, k.path)
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	verr := openapi3filter.ValidateRequest(context.Background(), in)
	if k.docInvalid {
		require.Error(c.t, verr, "the document allows %s %s %s, which the server refuses", k.method, k.path, k.body)
	} else {
		require.NoError(c.t, verr, "request %s %s", k.method, k.path)
	}
	req.Body = io.NopCloser(strings.NewReader(k.body)) // validation read it
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	require.Equal(c.t, k.want, r.status, "%s %s: %s", k.method, k.path, raw)
	requireOwnWords(c.t, k.path, r)
	if k.code != "" {
		requireProblem(c.t, r, k.want, k.code)
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(raw)), Options: &openapi3filter.Options{IncludeResponseStatus: true},
	})
	require.NoError(c.t, err, "answer of %s %s drifts from the document: %d %s", k.method, k.path, r.status, raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[route.Operation.OperationID] == nil {
		c.seen[route.Operation.OperationID] = map[int]bool{}
	}
	c.seen[route.Operation.OperationID][r.status] = true
	c.calls++
	return r
}

// TestOpenAPIConformance drives every documented operation through its
// success and error answers and checks each request and answer against
// api/openapi.yaml.
func TestOpenAPIConformance(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(s *setup) {
		s.providers[provider.Stripe].WebhookSecrets = []string{conformanceStripeSecret}
		s.providers[provider.Creem].APIKey = "" // Creem checkouts: 422 provider_unavailable
	})
	e.startWorker()
	c := newConformance(t, e)
	alice, bob, nobody := e.newPlayer("alice"), e.newPlayer("bob"), player{}

	served := c.do(call{as: nobody, method: "GET", path: "/v1/openapi.json", want: 200})
	fromJSON, err := openapi3.NewLoader().LoadFromData(served.raw)
	require.NoError(t, err)
	require.NoError(t, fromJSON.Validate(context.Background()), "the served document is not valid")
	require.Equal(t, loadDoc(t, e.srv.URL).Paths.Len(), fromJSON.Paths.Len())
	c.walletCalls(alice, nobody)
	orderID := c.checkoutCalls(alice, bob)
	c.webhookCalls(alice, orderID)
	ids := c.marqueeCalls(alice, bob)
	ids["order"] = strconv.FormatInt(orderID, 10)
	c.indexCalls(nobody)
	c.headCalls(alice, bob, nobody, ids)

	for _, path := range c.e.srv.Config.Handler.(*Server).documentedOperations(t) {
		seen := c.seen[path.id]
		require.NotEmpty(t, seen, "operation %s (%s) was never exercised", path.id, path.route)
		if path.id == "getOpenAPI" || path.id == "getWallets" || path.id == "listMarquees" {
			continue // no input that could be wrong but the key, checked on getWallets
		}
		var ok, failed bool
		for s := range seen {
			ok = ok || s < 300
			failed = failed || s >= 400
		}
		require.True(t, ok && failed, "operation %s: want a success and an error answer, saw %v", path.id, seen)
	}
	t.Logf("%d requests and answers validated over %d operations", c.calls, len(c.seen))
	e.requireAuditClean()
}

func (c *conformance) walletCalls(alice, nobody player) {
	c.e.credit(alice, wallet.Mana, 1000)
	c.e.credit(alice, wallet.Mana, 5)
	c.do(call{as: alice, method: "GET", path: "/v1/wallets", want: 200})
	c.do(call{as: nobody, method: "GET", path: "/v1/wallets", want: 401, code: CodeUnauthorized})
	page := c.do(call{as: alice, method: "GET", path: "/v1/wallets/mana/transactions?limit=1", want: 200})
	require.Equal(c.t, true, page.body["has_more"])
	c.do(call{as: alice, method: "GET", path: "/v1/wallets/mana/transactions?before=" + page.str("next_before"), want: 200})
	c.do(call{as: alice, method: "GET", path: "/v1/wallets/mana/transactions?limit=0", want: 400, code: CodeInvalidRequest, docInvalid: true})
	c.do(call{as: alice, method: "GET", path: "/v1/wallets/gold/transactions", want: 404, code: CodeNotFound, docInvalid: true})

	first := c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "conv-1", body: `{"mana":100}`, want: 201})
	again := c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "conv-1", body: `{"mana":100}`, want: 201})
	require.True(c.t, again.replayed())
	require.Equal(c.t, first.raw, again.raw)
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "conv-1", body: `{"mana":101}`, want: 422, code: CodeIdempotencyKeyReused})
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "conv-2", body: `{"mana":100000}`, want: 409, code: CodeInsufficientBalance})
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "conv-3", body: `{"mana":0}`, want: 400, code: CodeInvalidAmount, docInvalid: true})
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "conv-4", body: `{"mana":1,"sparks":1}`, want: 400, code: CodeInvalidRequest, docInvalid: true})
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: strings.Repeat("k", 300), body: `{"mana":1}`, want: 400, code: CodeIdempotencyKeyInvalid, docInvalid: true})
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: strings.Repeat("k", 256), body: `{"mana":1}`, want: 400, code: CodeIdempotencyKeyInvalid, docInvalid: true})
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: strings.Repeat("k", 255), body: `{"mana":1}`, want: 201})
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "conv-5", body: `{"mana":1}` + strings.Repeat(" ", maxBodyBytes), want: 413, code: CodeBodyTooLarge})
	c.do(call{as: nobody, method: "POST", path: "/v1/conversions", key: "conv-6", body: `{"mana":1}`, want: 401, code: CodeUnauthorized})
	c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "conv-7", body: `{"mana":1}`,
		headers: map[string]string{"Content-Type": "text/plain"}, want: 415, code: "unsupported_media_type", docInvalid: true})
}

func (c *conformance) checkoutCalls(alice, bob player) int64 {
	order := c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "co-1", body: `{"sku":"mana_1000","provider":"stripe"}`, want: 201})
	c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "co-2", body: `{"sku":"mana_7","provider":"stripe"}`, want: 400, code: "unknown_sku"})
	c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "co-3", body: `{"sku":"mana_1000","provider":"paypal"}`, want: 400, code: "unknown_provider", docInvalid: true})
	c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "co-4", body: `{"sku":`, want: 400, code: CodeInvalidRequest, docInvalid: true})
	c.do(call{as: alice, method: "POST", path: "/v1/checkouts", key: "co-5", body: `{"sku":"mana_1000","provider":"creem"}`, want: 422, code: "provider_unavailable"})
	id := order.str("id")
	c.do(call{as: alice, method: "GET", path: "/v1/orders/" + id, want: 200})
	c.do(call{as: bob, method: "GET", path: "/v1/orders/" + id, want: 404, code: CodeNotFound})
	c.do(call{as: alice, method: "GET", path: "/v1/orders/abc", want: 404, code: CodeNotFound})
	var n int64
	_, err := fmt.Sscan(id, &n)
	require.NoError(c.t, err)
	return n
}

func (c *conformance) webhookCalls(alice player, orderID int64) {
	event := fmt.Sprintf("evt_conformance_%d", time.Now().UnixNano())
	body := providerevents.CompletedEvent("stripe", event, orderID, 999, "usd")
	_, signed := stripeevents.SignByStripeGo(conformanceStripeSecret, body, time.Now())
	sig := map[string]string{"Stripe-Signature": signed}
	first := c.do(call{method: "POST", path: "/webhooks/stripe", body: string(body), headers: sig, want: 200})
	require.Equal(c.t, "claimed", first.str("status"))
	dup := c.do(call{method: "POST", path: "/webhooks/stripe", body: string(body), headers: sig, want: 200})
	require.Equal(c.t, "duplicate", dup.str("status"))
	_, forgery := stripeevents.SignByStripeGo("whsec_not_ours", body, time.Now())
	forged := map[string]string{"Stripe-Signature": forgery}
	c.do(call{method: "POST", path: "/webhooks/stripe", body: string(body), headers: forged, want: 400, code: "bad_signature"})
	c.do(call{method: "POST", path: "/webhooks/paddle", body: `{}`, want: 503, code: "provider_not_configured"})
	c.do(call{method: "POST", path: "/webhooks/paypal", body: `{}`, want: 404, code: "unknown_provider", docInvalid: true})
	c.poll("the order is fulfilled", func() bool {
		return c.do(call{as: alice, method: "GET", path: fmt.Sprintf("/v1/orders/%d", orderID), want: 200}).str("status") == "fulfilled"
	})
}

// marqueeCalls returns the ids it made: marquee, playground, request.
func (c *conformance) marqueeCalls(alice, bob player) map[string]string {
	m := c.do(call{as: alice, method: "POST", path: "/v1/marquees", key: "mq-1", body: `{"name":"box","plan":"standard"}`, want: 201})
	c.do(call{as: alice, method: "POST", path: "/v1/marquees", key: "mq-2", body: `{"name":"box","plan":"gold"}`, want: 400, code: "unknown_plan"})
	c.do(call{as: alice, method: "POST", path: "/v1/marquees", key: "mq-3", body: `{"name":"","plan":"standard"}`, want: 400, code: "invalid_name", docInvalid: true})
	c.do(call{as: alice, method: "POST", path: "/v1/marquees", key: "mq-4", body: `{"name":"` + strings.Repeat("é", 100) + `","plan":"standard"}`, want: 201})
	c.do(call{as: alice, method: "POST", path: "/v1/marquees", key: "mq-5", body: `{"name":"` + strings.Repeat("é", 101) + `","plan":"standard"}`,
		want: 400, code: "invalid_name", docInvalid: true})
	id := m.str("id")
	c.do(call{as: alice, method: "GET", path: "/v1/marquees", want: 200})
	c.do(call{as: alice, method: "GET", path: "/v1/marquees/" + id, want: 200})
	c.do(call{as: bob, method: "GET", path: "/v1/marquees/" + id, want: 404, code: CodeNotFound})
	c.do(call{as: alice, method: "POST", path: "/v1/marquees/" + id + "/playgrounds", key: "pg-0", body: `{"name":"pg"}`, want: 402, code: CodeMarqueeNotFunded})

	c.e.credit(alice, wallet.Sparks, 1000)
	fund := c.do(call{as: alice, method: "POST", path: "/v1/marquees/" + id + "/fund", key: "fund-1", want: 202})
	c.do(call{as: bob, method: "POST", path: "/v1/marquees/" + id + "/fund", key: "fund-2", want: 404, code: CodeNotFound})
	c.waitSucceeded(alice, fund.str("request_id"))
	c.do(call{as: alice, method: "GET", path: "/v1/requests/999999999", want: 404, code: CodeNotFound})

	pg := c.do(call{as: alice, method: "POST", path: "/v1/marquees/" + id + "/playgrounds", key: "pg-1", body: `{"name":"pg"}`, want: 202})
	c.waitSucceeded(alice, pg.str("request_id"))
	pid := pg.str("playground_id")
	c.do(call{as: alice, method: "GET", path: "/v1/playgrounds/" + pid, want: 200})
	c.do(call{as: bob, method: "GET", path: "/v1/playgrounds/" + pid, want: 404, code: CodeNotFound})
	restart := c.do(call{as: alice, method: "POST", path: "/v1/playgrounds/" + pid + "/restart", key: "pg-r", body: `{}`, want: 202})
	c.waitSucceeded(alice, restart.str("request_id"))
	c.do(call{as: bob, method: "POST", path: "/v1/playgrounds/" + pid + "/restart", key: "pg-r2", want: 404, code: CodeNotFound})
	sync := c.do(call{as: alice, method: "POST", path: "/v1/playgrounds/" + pid + "/sync", key: "pg-s", want: 202})
	c.waitSucceeded(alice, sync.str("request_id"))
	c.playgroundNameCalls(alice, id)
	c.do(call{as: alice, method: "POST", path: "/v1/playgrounds/" + pid + "/sync", key: "pg-s2", body: `{"x":1}`, want: 400, code: CodeInvalidRequest, docInvalid: true})
	return map[string]string{"marquee": id, "playground": pid, "request": pg.str("request_id")}
}

// playgroundNameCalls: a playground's name is optional (no body, {}, or
// "" name it "playground") and at most 200 printable characters, as the
// document says.
func (c *conformance) playgroundNameCalls(alice player, marquee string) {
	path := "/v1/marquees/" + marquee + "/playgrounds"
	for i, body := range []string{"", `{}`, `{"name":""}`} {
		pg := c.do(call{as: alice, method: "POST", path: path, key: fmt.Sprintf("pg-default-%d", i), body: body, want: 202})
		got := c.do(call{as: alice, method: "GET", path: "/v1/playgrounds/" + pg.str("playground_id"), want: 200})
		require.Equal(c.t, "playground", got.str("name"), "body %q", body)
	}
	long := strings.Repeat("é", 200)
	pg := c.do(call{as: alice, method: "POST", path: path, key: "pg-200", body: `{"name":"` + long + `"}`, want: 202})
	require.Equal(c.t, long, c.do(call{as: alice, method: "GET", path: "/v1/playgrounds/" + pg.str("playground_id"), want: 200}).str("name"))
	c.do(call{as: alice, method: "POST", path: path, key: "pg-201", body: `{"name":"` + long + `e"}`, want: 400, code: "invalid_name", docInvalid: true})
	c.do(call{as: alice, method: "POST", path: path, key: "pg-rlo", body: `{"name":"a\u202eb"}`, want: 400, code: "invalid_name"})
}

// indexCalls: / and /v1 answer the index without a key; /v1/ sends the
// client to /v1; /healthz answers the probe without a key.
func (c *conformance) indexCalls(nobody player) {
	big := map[string]string{"X-Big": strings.Repeat("b", 100<<10)}
	for _, path := range []string{"/", "/v1"} {
		ix := c.do(call{as: nobody, method: "GET", path: path, want: 200})
		require.Equal(c.t, "/v1/openapi.json", ix.str("api_document"))
		c.do(call{as: nobody, method: "GET", path: path, headers: big, want: 431, code: CodeHeadersTooLarge})
	}
	c.do(call{as: nobody, method: "GET", path: "/v1/openapi.json", headers: big, want: 431, code: CodeHeadersTooLarge})
	require.Equal(c.t, "ok\n", string(c.do(call{as: nobody, method: "GET", path: "/healthz", want: 200}).raw))
	c.do(call{as: nobody, method: "GET", path: "/healthz", headers: big, want: 431, code: CodeHeadersTooLarge})
	resp, err := noRedirects.Get(c.e.srv.URL + "/v1/")
	require.NoError(c.t, err)
	resp.Body.Close()
	require.Equal(c.t, http.StatusPermanentRedirect, resp.StatusCode)
	require.Equal(c.t, "/v1", resp.Header.Get("Location"))
}

// headCalls sends HEAD to every GET route: the GET's status and headers,
// no body, for a success and for an error.
func (c *conformance) headCalls(alice, bob, nobody player, ids map[string]string) {
	public := []string{"/", "/v1", "/v1/openapi.json", "/healthz"}
	owned := []string{"/v1/wallets", "/v1/wallets/mana/transactions", "/v1/marquees", "/v1/orders/" + ids["order"],
		"/v1/marquees/" + ids["marquee"], "/v1/playgrounds/" + ids["playground"], "/v1/requests/" + ids["request"]}
	big := map[string]string{"X-Big": strings.Repeat("b", 100<<10)}
	for _, path := range append(public, owned...) {
		as := nobody
		if !slices.Contains(public, path) {
			as = alice
		}
		got := c.do(call{as: as, method: "GET", path: path, want: 200})
		head := c.do(call{as: as, method: "HEAD", path: path, want: 200})
		require.Empty(c.t, head.raw, "HEAD %s has no body", path)
		require.Equal(c.t, got.header.Get("Content-Type"), head.header.Get("Content-Type"), path)
		if slices.Contains(public, path) {
			c.do(call{as: as, method: "HEAD", path: path, headers: big, want: 431})
		} else {
			c.do(call{as: nobody, method: "HEAD", path: path, want: 401})
		}
	}
	c.do(call{as: bob, method: "HEAD", path: "/v1/marquees/" + ids["marquee"], want: 404})
}

// waitSucceeded polls a request (each poll checked against the document).
func (c *conformance) waitSucceeded(p player, id string) {
	c.t.Helper()
	var last reply
	c.poll("request "+id+" is done", func() bool {
		last = c.do(call{as: p, method: "GET", path: "/v1/requests/" + id, want: 200})
		return last.str("status") == requests.Succeeded || last.str("status") == requests.Failed
	})
	require.Equal(c.t, requests.Succeeded, last.str("status"), string(last.raw))
}

// poll calls done on the test goroutine (it checks answers with require)
// until it reports true, for at most 15 s.
func (c *conformance) poll(what string, done func() bool) {
	c.t.Helper()
	for deadline := time.Now().Add(waitDeadline); !done(); time.Sleep(50 * time.Millisecond) {
		require.False(c.t, time.Now().After(deadline), "timed out waiting until %s", what)
	}
}

// operationRef is one documented operation.
type operationRef struct{ id, route string }

// documentedOperations are the document's operations, each checked to be
// routed by s to a pattern of the same method and path.
func (s *Server) documentedOperations(t *testing.T) []operationRef {
	t.Helper()
	doc := loadDoc(t, "http://127.0.0.1")
	var out []operationRef
	for path, item := range doc.Paths.Map() {
		concrete := strings.NewReplacer("{id}", "1", "{currency}", "mana", "{provider}", "stripe").Replace(path)
		for method, op := range item.Operations() {
			req, err := http.NewRequest(method, concrete, nil)
			require.NoError(t, err)
			_, pattern := s.mux.Handler(req)
			routed := method
			if method == http.MethodHead {
				routed = http.MethodGet // a GET pattern answers HEAD too
			}
			routedMethod, routedPath, _ := strings.Cut(pattern, " ")
			require.Equal(t, routed+" "+path, routedMethod+" "+docPath(routedPath), "documented %s %s is not routed", method, path)
			out = append(out, operationRef{id: op.OperationID, route: method + " " + path})
		}
	}
	return out
}

// TestOpenAPIDocumentsEveryRoute walks the server's route table: every
// route but the operational ones must be in the document, and every
// documented operation must be routed.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	_, err := New(Options{Logger: quiet, Gatherer: prometheus.NewRegistry()})
	require.ErrorContains(t, err, "Wallet is required", "no server without the wallet store")
	s, err := New(Options{Wallet: wallet.New(nil, wallet.Options{}), Logger: quiet, Gatherer: prometheus.NewRegistry()})
	require.NoError(t, err)
	doc := loadDoc(t, "http://127.0.0.1")
	patterns := muxPatterns(t, s.mux)
	require.Contains(t, patterns, "GET /v1/wallets", "the route table walk found nothing: net/http changed")
	for _, p := range patterns {
		if slices.Contains(operational, p) || slices.Contains(redirects, p) {
			continue
		}
		method, path, ok := strings.Cut(p, " ")
		require.True(t, ok, "route %q answers every method; document it per method", p)
		path = docPath(path)
		item := doc.Paths.Value(path)
		require.NotNil(t, item, "route %s is not in api/openapi.yaml", p)
		require.NotNil(t, item.GetOperation(method), "route %s is not in api/openapi.yaml", p)
		if method == http.MethodGet {
			require.NotNil(t, item.GetOperation(http.MethodHead), "route %s answers HEAD too: document it", p)
		}
	}
	require.NotEmpty(t, s.documentedOperations(t))
}

// muxPatterns lists the patterns registered on mux. net/http has no API
// for it, so this reads the mux's routing index (a test-only dependency
// on its internals, which fails loudly above if they change).
func muxPatterns(t *testing.T, mux *http.ServeMux) []string {
	t.Helper()
	index := reflect.ValueOf(mux).Elem().FieldByName("index")
	require.True(t, index.IsValid(), "http.ServeMux has no routing index")
	set := map[string]bool{}
	add := func(list reflect.Value) {
		for i := range list.Len() {
			set[list.Index(i).Elem().FieldByName("str").String()] = true
		}
	}
	for it := index.FieldByName("segments").MapRange(); it.Next(); {
		add(it.Value())
	}
	add(index.FieldByName("multis"))
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIMethodNotAllowed sends every documented path a method the
// document does not list for it: the answer is the documented 405
// method_not_allowed, its body the documented schema, and its Allow header
// lists exactly the path's documented methods.
func TestOpenAPIMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	doc := loadDoc(t, e.srv.URL)
	alice := e.newPlayer("alice")
	for path, item := range doc.Paths.Map() {
		var documented []string
		for method := range item.Operations() {
			documented = append(documented, method)
		}
		sort.Strings(documented)
		other := ""
		for _, m := range []string{http.MethodDelete, http.MethodPut, http.MethodPatch, http.MethodPost, http.MethodGet} {
			if !slices.Contains(documented, m) {
				other = m
				break
			}
		}
		concrete := strings.NewReplacer("{id}", "1", "{currency}", "mana", "{provider}", "stripe").Replace(path)
		r := e.do(alice, other, concrete, "", "")
		requireProblem(t, r, http.StatusMethodNotAllowed, CodeMethodNotAllowed)
		allow := strings.Split(r.header.Get("Allow"), ", ")
		sort.Strings(allow)
		require.Equal(t, documented, allow, "%s %s: Allow lists the documented methods", other, path)

		for method, op := range item.Operations() {
			if method == http.MethodHead {
				continue // its 4XX covers the 405
			}
			resp := op.Responses.Status(http.StatusMethodNotAllowed)
			require.NotNil(t, resp, "%s %s documents no 405", method, path)
			require.NotNil(t, resp.Value.Headers["Allow"], "%s %s: the 405 documents Allow", method, path)
			require.True(t, resp.Value.Headers["Allow"].Value.Required)
			var body any
			require.NoError(t, json.Unmarshal(r.raw, &body))
			schema := resp.Value.Content.Get("application/problem+json").Schema.Value
			require.NoError(t, schema.VisitJSON(body), "%s %s: the 405 body is the documented one", method, path)
		}
	}
}

// waitDeadline bounds each wait on a condition (a server listening, a job
// finished): a second on an idle machine, far more at load 20 on two
// cores, so generous; a failing wait still ends with its message.
const waitDeadline = 2 * time.Minute
