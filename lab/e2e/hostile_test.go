package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
	"github.com/fibe-dev/billing/internal/web/httpapi"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

// TestHostileRequests sends a table of hostile requests to the real handler
// (httpapi.New over a migrated database, behind httptest.NewServer) and
// requires each to be answered with a 4xx and to change nothing: the row
// count and content of every money, order, Marquee, playground, webhook,
// idempotency and job table, and every balance, are the same before and
// after, and nothing was logged at error level. A few cases are otherwise
// valid requests that merely carry odd text (a Marquee named
// `'; DROP TABLE wallets; --`); they may succeed, say why in `legit`, name
// the rows they add in `effect`, and check the text was stored verbatim.
//
// The cases run one after another (not t.Parallel) on one database, so that
// the before/after snapshots of each are exact.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	h := newHostileEnv(t)
	initial := h.balances(t)
	for _, c := range h.cases() {
		t.Run(c.name, func(t *testing.T) { h.run(t, c) })
	}
	require.Equal(t, initial, h.balances(t), "no balance moved")
	audittest.RequireClean(t, h.pool, audit.Options{})
	require.Empty(t, h.errs.all(), "nothing logged at error level")
}

// sqlMeta are SQL metacharacters sent in every string field.
var sqlMeta = []struct{ name, s string }{
	{"drop", "'; DROP TABLE wallets; --"},
	{"or", "' OR '1'='1"},
	{"percent", "%"},
	{"dollar", "$1"},
	{"backslash", `\`},
	{"nul", "\x00"},
}

const (
	hostileSecret = "whsec_hostile"
	tenMB         = 10 << 20
)

var hostileProviders = []string{"stripe", "paddle", "creem"}

// hostileTables are compared before and after every case.
var hostileTables = []string{"wallets", "wallet_transactions", "ledger_entries", "orders", "marquees",
	"playgrounds", "webhook_events", "idempotency_keys", "api_requests", "river_job"}

type hostileEnv struct {
	pool       *pgxpool.Pool
	srv        *httptest.Server
	client     *http.Client
	now        time.Time
	errs       *errorLog
	alice, bob hostileActor
	// paidEvent is alice's paid Stripe delivery, already claimed.
	paidEvent []byte
}

// hostileActor is a funded player with one of everything an attack can aim
// at: Mana and Sparks, a funded Marquee, a pending order, a playground and
// the request that created it, and an Idempotency-Key in the cache.
type hostileActor struct {
	id                                  int64
	key                                 string
	marquee, order, playground, request string
}

func newHostileEnv(t *testing.T) *hostileEnv {
	t.Helper()
	pool := testdb.NewPool(t, 10)
	skus := fulfillment.DefaultSKUs()
	providers := drivers.New(fakeProviders(t, skus))
	checkouts := checkout.NewService(checkout.Options{Openers: provider.Select[checkout.Opener](providers), SKUs: skus})
	wallets := wallet.New(pool, wallet.Options{SparksPerMana: 1})
	// Noon of today's service day, fixed: the Marquees stay funded for the
	// whole test and signed webhooks stay within their tolerance.
	now := time.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour)
	discard := slog.New(slog.DiscardHandler)
	river, err := jobs.NewClient(pool, jobs.Options{Logger: discard}) // insert-only, like `billing web`
	require.NoError(t, err)
	errs := &errorLog{}
	s, err := httpapi.New(httpapi.Options{Pool: pool, River: river, Wallet: wallets, Plans: enforcer.DefaultPlans(), TZ: time.UTC,
		Providers: providers, Checkouts: checkouts, Logger: slog.New(errs),
		Gatherer: prometheus.NewRegistry(), Now: func() time.Time { return now }})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(s)
	srv.Listener = httpapi.ProblemListener(srv.Listener) // as `billing web` serves
	srv.Start()
	t.Cleanup(srv.Close)
	h := &hostileEnv{pool: pool, srv: srv, now: now, errs: errs, client: &http.Client{
		Timeout:       time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	funder := enforcer.New(pool, wallets, enforcer.Options{TZ: time.UTC, Now: h.clock, Logger: discard})
	h.alice = h.newActor(t, "alice", wallets, funder)
	h.bob = h.newActor(t, "bob", wallets, funder)

	// alice's order is paid: its event is claimed and its fulfillment queued
	// (no worker runs, so it stays queued).
	orderID, err := strconv.ParseInt(h.alice.order, 10, 64)
	require.NoError(t, err)
	h.paidEvent = providerevents.CompletedEvent("stripe", "evt_hostile_paid", orderID, 999, "usd")
	r := h.send(t, h.signed("stripe", h.paidEvent))
	require.Equal(t, http.StatusOK, r.status, string(r.raw))
	require.Empty(t, errs.all())
	return h
}

func (h *hostileEnv) clock() time.Time { return h.now }

// fakeProviders are the drivers' options with every provider's API
// pointed at a recording provider fake (and hostileSecret signing its
// webhooks), with a Creem product priced like each SKU of skus.
func fakeProviders(t *testing.T, skus map[string]fulfillment.SKU) map[string]provider.Options {
	fake := providertest.StartFake()
	t.Cleanup(fake.Close)
	for name, sku := range skus {
		sku.CatalogueIDs = map[string]string{provider.Creem: "prod_" + name}
		skus[name] = sku
		fake.SetProduct(sku.CatalogueID(provider.Creem), fakeapi.Product{Price: sku.Amount, Currency: sku.Currency})
	}
	secrets := []string{hostileSecret}
	return map[string]provider.Options{
		provider.Stripe: {APIKey: "sk_test_hostile", APIURL: fake.URL, WebhookSecrets: secrets},
		provider.Paddle: {APIKey: "pdl_hostile", APIURL: fake.URL, WebhookSecrets: secrets},
		provider.Creem:  {APIKey: "creem_hostile", APIURL: fake.URL, WebhookSecrets: secrets},
	}
}

func (h *hostileEnv) newActor(t *testing.T, name string, wallets *wallet.Store, funder *enforcer.Service) hostileActor {
	t.Helper()
	ctx := context.Background()
	p, key, err := players.Create(ctx, h.pool, name)
	require.NoError(t, err)
	a := hostileActor{id: p.ID, key: key}
	for _, c := range []wallet.Currency{wallet.Mana, wallet.Sparks} {
		_, err := wallets.Credit(ctx, wallet.PostParams{PlayerID: a.id, Currency: c, Amount: 1000,
			Kind: wallet.KindAdjustment, Reference: "hostile setup", IdempotencyKey: wallet.CallerKey(fmt.Sprintf("hostile:%d:%s:setup", a.id, c))})
		require.NoError(t, err)
	}
	do := func(path, key, body string, status int) hostileReply {
		r := h.send(t, hostileReq{method: http.MethodPost, path: path, as: a, keys: []string{key}, body: []byte(body)})
		require.Equal(t, status, r.status, "%s: %s", path, r.raw)
		return r
	}
	a.marquee = do("/v1/marquees", "setup-marquee", `{"name":"`+name+`'s marquee","plan":"standard"}`, http.StatusCreated).str("id")
	marqueeID, err := strconv.ParseInt(a.marquee, 10, 64)
	require.NoError(t, err)
	res, err := funder.FundDay(ctx, enforcer.FundDayArgs{MarqueeID: marqueeID, Day: enforcer.ServiceDay(h.now, time.UTC)})
	require.NoError(t, err)
	require.Equal(t, enforcer.OutcomeFunded, res.Outcome)
	a.order = do("/v1/checkouts", "setup-checkout", `{"sku":"mana_1000","provider":"stripe"}`, http.StatusCreated).str("id")
	pg := do("/v1/marquees/"+a.marquee+"/playgrounds", "setup-playground", `{"name":"pg"}`, http.StatusAccepted)
	a.playground, a.request = pg.str("playground_id"), pg.str("request_id")
	do("/v1/conversions", "setup-conversion", `{"mana":100}`, http.StatusCreated)
	return a
}

// hostileReq is one request. The zero actor sends no Authorization.
type hostileReq struct {
	method, path string
	as           hostileActor
	header       map[string]string // after Authorization, so it may replace it
	keys         []string          // Idempotency-Key values, one header each
	body         []byte
	chunked      bool   // send the body without a Content-Length
	raw          string // if set, the whole request, written to a bare TCP connection
}

type hostileReply struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r hostileReply) str(field string) string { s, _ := r.body[field].(string); return s }

type hostileCase struct {
	name   string
	req    hostileReq
	status int
	// code is the problem+json code wanted; "" to check only the status.
	code string
	// legit explains why an otherwise valid request may succeed; effect
	// names the rows it may add (every other table must be unchanged);
	// check verifies what was stored.
	legit  string
	effect map[string]int
	// duplicates is how many duplicate deliveries the case records on
	// webhook_events (its only change to an existing claim).
	duplicates int64
	check      func(t *testing.T, h *hostileEnv, r hostileReply)
}

func (h *hostileEnv) run(t *testing.T, c hostileCase) {
	if c.legit == "" {
		require.True(t, c.status >= 400 && c.status < 500, "a hostile case must expect a 4xx")
		require.Empty(t, c.effect, "a hostile case has no effect")
	}
	before, balances, errs := h.snapshot(t), h.balances(t), len(h.errs.all())
	r := h.send(t, c.req)
	require.Equal(t, c.status, r.status, "answer: %.300s", r.raw)
	require.Less(t, r.status, 500)
	if c.code != "" {
		require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), "%.300s", r.raw)
		require.Equal(t, c.code, r.str("code"), "%.300s", r.raw)
	}
	after := h.snapshot(t)
	for _, table := range hostileTables {
		require.Equal(t, before[table].rows+int64(c.effect[table]), after[table].rows, "rows of %s", table)
		if c.effect[table] == 0 {
			require.Equal(t, before[table].digest, after[table].digest, "%s changed", table)
		}
	}
	require.Equal(t, before["webhook_events"].duplicates+c.duplicates, after["webhook_events"].duplicates,
		"duplicate deliveries recorded")
	require.Equal(t, balances, h.balances(t), "balances")
	require.Equal(t, errs, len(h.errs.all()), "logged at error level: %v", h.errs.all())
	if c.check != nil {
		c.check(t, h, r)
	}
}

type tableState struct {
	rows   int64
	digest string
	// duplicates is webhook_events' count of duplicate deliveries, which
	// the digest leaves out with the time of the last one.
	duplicates int64
}

func (h *hostileEnv) snapshot(t *testing.T) map[string]tableState {
	t.Helper()
	out := make(map[string]tableState, len(hostileTables))
	for _, table := range hostileTables {
		var s tableState
		row, duplicates := "to_jsonb(x)", "0"
		if table == "webhook_events" {
			row, duplicates = "to_jsonb(x) - 'duplicate_deliveries' - 'last_delivery_at'", "coalesce(sum(duplicate_deliveries), 0)"
		}
		require.NoError(t, h.pool.QueryRow(context.Background(), fmt.Sprintf(`
			SELECT count(*), coalesce(md5(string_agg((%s)::text, E'\n' ORDER BY (%[1]s)::text)), ''), %s FROM %s x`,
			row, duplicates, table)).Scan(&s.rows, &s.digest, &s.duplicates))
		out[table] = s
	}
	return out
}

func (h *hostileEnv) balances(t *testing.T) map[string]int64 {
	t.Helper()
	rows, err := h.pool.Query(context.Background(), `SELECT player_id, currency, balance FROM wallets`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var player, balance int64
		var currency string
		require.NoError(t, rows.Scan(&player, &currency, &balance))
		out[fmt.Sprintf("%d:%s", player, currency)] = balance
	}
	require.NoError(t, rows.Err())
	require.Len(t, out, 4, "alice and bob, mana and sparks")
	return out
}

func (h *hostileEnv) send(t *testing.T, q hostileReq) hostileReply {
	t.Helper()
	if q.raw != "" {
		return h.sendRaw(t, q.raw)
	}
	var body io.Reader
	if q.body != nil {
		body = bytes.NewReader(q.body)
		if q.chunked {
			body = io.MultiReader(body) // hides the length: Transfer-Encoding: chunked
		}
	}
	req, err := http.NewRequest(q.method, h.srv.URL+q.path, body)
	require.NoError(t, err)
	if q.as.key != "" {
		req.Header.Set("Authorization", "Bearer "+q.as.key)
	}
	if q.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range q.header {
		req.Header.Set(k, v)
	}
	for _, k := range q.keys {
		req.Header.Add("Idempotency-Key", k)
	}
	resp, err := h.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return readReply(t, resp)
}

// sendRaw writes bytes Go's client refuses to send (a NUL in a header, a
// header over a megabyte) and reads the answer. The write runs beside the
// read: the server may answer and hang up before it has read everything.
func (h *hostileEnv) sendRaw(t *testing.T, raw string) hostileReply {
	t.Helper()
	conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(time.Minute)))
	go func() { _, _ = io.WriteString(conn, raw) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	return readReply(t, resp)
}

func readReply(t *testing.T, resp *http.Response) hostileReply {
	t.Helper()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := hostileReply{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// rawPost is a whole HTTP/1.1 POST as alice, with extra header lines.
func (h *hostileEnv) rawPost(path, body string, headers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: billing\r\nAuthorization: Bearer %s\r\n", path, h.alice.key)
	for _, l := range headers {
		b.WriteString(l + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	return b.String()
}

// signed is a webhook delivery of body, correctly signed for provider.
func (h *hostileEnv) signed(provider string, body []byte) hostileReq {
	name, value, err := providerevents.Sign(provider, hostileSecret, body, h.now)
	if err != nil {
		panic(err)
	}
	return hostileReq{method: http.MethodPost, path: "/webhooks/" + provider, body: body, header: map[string]string{name: value}}
}

func post(as hostileActor, path, body string) hostileReq {
	return hostileReq{method: http.MethodPost, path: path, as: as, body: []byte(body)}
}

func get(as hostileActor, path string) hostileReq {
	return hostileReq{method: http.MethodGet, path: path, as: as}
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// nested is n arrays (or objects) nested in one another around inner.
func nested(n int, objects bool, inner string) string {
	open, close := "[", "]"
	if objects {
		open, close = `{"a":`, "}"
	}
	return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
}

// padded is body followed by whitespace up to 10 MB: still one valid JSON
// value, so only the size limit stands between it and an effect.
func padded(body string) []byte {
	return append([]byte(body), bytes.Repeat([]byte(" "), tenMB-len(body))...)
}

// postRoute is a POST route with a body that would succeed as alice, and
// one with an unknown field.
type postRoute struct {
	name, path, body, unknown string
}

func (h *hostileEnv) postRoutes() []postRoute {
	a := h.alice
	return []postRoute{
		{"conversions", "/v1/conversions", `{"mana":1}`, `{"mana":1,"player_id":"` + strconv.FormatInt(h.bob.id, 10) + `"}`},
		{"checkouts", "/v1/checkouts", `{"sku":"mana_1000","provider":"stripe"}`, `{"sku":"mana_1000","provider":"stripe","amount":1}`},
		{"marquees", "/v1/marquees", `{"name":"big","plan":"standard"}`, `{"name":"big","plan":"standard","daily_price":0}`},
		{"fund", "/v1/marquees/" + a.marquee + "/fund", `{}`, `{"day":"2000-01-01"}`},
		{"playgrounds", "/v1/marquees/" + a.marquee + "/playgrounds", `{"name":"big"}`, `{"name":"big","marquee_id":"` + h.bob.marquee + `"}`},
		{"restart", "/v1/playgrounds/" + a.playground + "/restart", `{}`, `{"force":true}`},
		{"sync", "/v1/playgrounds/" + a.playground + "/sync", `{}`, `{"player_id":1}`},
	}
}

// idRoute is a route with an id in its path, and bob's id for it.
type idRoute struct {
	method, pattern, bobID string
}

func (h *hostileEnv) idRoutes() []idRoute {
	b := h.bob
	return []idRoute{
		{http.MethodGet, "/v1/orders/%s", b.order},
		{http.MethodGet, "/v1/marquees/%s", b.marquee},
		{http.MethodPost, "/v1/marquees/%s/fund", b.marquee},
		{http.MethodPost, "/v1/marquees/%s/playgrounds", b.marquee},
		{http.MethodGet, "/v1/playgrounds/%s", b.playground},
		{http.MethodPost, "/v1/playgrounds/%s/restart", b.playground},
		{http.MethodPost, "/v1/playgrounds/%s/sync", b.playground},
		{http.MethodGet, "/v1/requests/%s", b.request},
	}
}

func (h *hostileEnv) cases() []hostileCase {
	var cs []hostileCase
	add := func(c ...hostileCase) { cs = append(cs, c...) }
	alice := h.alice
	conv := func(body string) hostileReq { return post(alice, "/v1/conversions", body) }
	withKeys := func(q hostileReq, keys ...string) hostileReq { q.keys = keys; return q }
	withHeader := func(q hostileReq, k, v string) hostileReq { q.header = map[string]string{k: v}; return q }

	// --- Huge headers. Go's server reads up to http.DefaultMaxHeaderBytes
	// (1 MiB, plus 4 KiB slack; neither `billing web` nor httptest lowers
	// it) and answers 431 beyond, before any handler runs (a problem all
	// the same: httpapi.ProblemListener). Below that, the API refuses a
	// header block over 64 KiB with a 431 problem before any route sees it.
	big := strings.Repeat("k", 100<<10)
	filler := make([]string, 20_000) // 1.5 MB of small headers
	for i := range filler {
		filler[i] = "X-Filler-" + strconv.Itoa(i) + ": " + strings.Repeat("x", 64)
	}
	add(
		hostileCase{name: "headers/100KB Authorization", req: withHeader(conv(`{"mana":1}`), "Authorization", "Bearer bk_"+big),
			status: 431, code: httpapi.CodeHeadersTooLarge},
		hostileCase{name: "headers/100KB Idempotency-Key", req: withKeys(conv(`{"mana":1}`), big),
			status: 431, code: httpapi.CodeHeadersTooLarge},
		hostileCase{name: "headers/100KB webhook signature", status: 431, code: httpapi.CodeHeadersTooLarge,
			req: hostileReq{method: http.MethodPost, path: "/webhooks/stripe", body: h.paidEvent,
				header: map[string]string{"Stripe-Signature": "t=1,v1=" + big}}},
		hostileCase{name: "headers/2MB header value", status: 431, code: httpapi.CodeHeadersTooLarge,
			req: hostileReq{raw: h.rawPost("/v1/conversions", `{"mana":1}`, "X-Filler: "+strings.Repeat("x", 2<<20))}},
		hostileCase{name: "headers/20000 headers", status: 431, code: httpapi.CodeHeadersTooLarge,
			req: hostileReq{raw: h.rawPost("/v1/conversions", `{"mana":1}`, filler...)}},
		hostileCase{name: "headers/2MB webhook signature", status: 431, code: httpapi.CodeHeadersTooLarge,
			req: hostileReq{raw: "POST /webhooks/stripe HTTP/1.1\r\nHost: billing\r\nStripe-Signature: t=1,v1=" +
				strings.Repeat("0", 2<<20) + "\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"}},
	)
	// Bytes Go's client refuses to send; Go's server refuses them too.
	add(
		hostileCase{name: "headers/NUL in Idempotency-Key", status: 400, code: httpapi.CodeInvalidRequest,
			req: hostileReq{raw: h.rawPost("/v1/conversions", `{"mana":1}`, "Idempotency-Key: k\x00k")}},
		hostileCase{name: "headers/NUL in Authorization", status: 400, code: httpapi.CodeInvalidRequest,
			req: hostileReq{raw: strings.Replace(h.rawPost("/v1/conversions", `{"mana":1}`), "Bearer ", "Bearer \x00", 1)}},
		hostileCase{name: "headers/CR in Idempotency-Key", status: 400, code: httpapi.CodeInvalidRequest,
			req: hostileReq{raw: h.rawPost("/v1/conversions", `{"mana":1}`, "Idempotency-Key: k\rX-Injected: 1")}},
	)

	// --- Malformed and overlong Idempotency-Keys, on a request that would
	// otherwise convert Mana: refused with 400 before anything runs (no key
	// row either). Rule (idempotency.ParseKey): 1 to 255 printable ASCII
	// characters, bare or as a structured-field string.
	for name, key := range map[string]string{
		"256 chars":             strings.Repeat("k", 256),
		"quoted 256 chars":      `"` + strings.Repeat("k", 256) + `"`,
		"empty":                 "",
		"empty quoted":          `""`,
		"spaces":                "   ",
		"stray quote":           `"a"b"`,
		"bad escape":            `"a\x"`,
		"trailing backslash":    `"abc\"`,
		"tab":                   "tab\there",
		"non-ASCII":             "caf\u00e9",
		"invalid UTF-8":         "k\xff\xfe",
		"invalid UTF-8 quoted":  "\"k\xc3\"",
		"line separator U+2028": "a\u2028b",
	} {
		add(hostileCase{name: "idempotency-key/" + name, req: withKeys(conv(`{"mana":1}`), key),
			status: 400, code: httpapi.CodeIdempotencyKeyInvalid})
	}
	add(hostileCase{name: "idempotency-key/two headers", req: withKeys(conv(`{"mana":1}`), "k1", "k2"),
		status: 400, code: httpapi.CodeIdempotencyKeyInvalid})
	add(hostileCase{name: "idempotency-key/the same key twice", req: withKeys(conv(`{"mana":1}`), "k1", "k1"),
		status: 400, code: httpapi.CodeIdempotencyKeyInvalid})
	// Reusing a cached key for another body is refused (422), never applied.
	add(hostileCase{name: "idempotency-key/reused with another body", req: withKeys(conv(`{"mana":5}`), "setup-conversion"),
		status: 422, code: httpapi.CodeIdempotencyKeyReused})
	// A valid key on a refused request: the 400 is cached like any 4xx
	// (docs/contract.md), so the one effect is the key row, and a retry replays it.
	add(hostileCase{name: "idempotency-key/valid key, bad body: the 400 is cached", req: withKeys(conv(`{"mana":-1}`), "k-bad-body"),
		status: 400, code: httpapi.CodeInvalidAmount,
		legit:  "docs/contract.md: a completed key replays its stored answer, 4xx included",
		effect: map[string]int{"idempotency_keys": 1},
		check: func(t *testing.T, h *hostileEnv, r hostileReply) {
			again := h.send(t, withKeys(conv(`{"mana":-1}`), "k-bad-body"))
			require.Equal(t, http.StatusBadRequest, again.status)
			require.Equal(t, "true", again.header.Get("X-Idempotent-Replayed"))
			require.Equal(t, r.raw, again.raw)
		}})

	// --- Invalid UTF-8 inside JSON strings. encoding/json would quietly
	// turn the bytes into U+FFFD and store a name the client never sent;
	// the API refuses a body that is not UTF-8 (RFC 8259 8.1).
	mq := h.alice.marquee
	for name, q := range map[string]hostileReq{
		"marquee name":           post(alice, "/v1/marquees", "{\"name\":\"\xff\xfe\",\"plan\":\"standard\"}"),
		"marquee name cut":       post(alice, "/v1/marquees", "{\"name\":\"ok\xc3\",\"plan\":\"standard\"}"),
		"marquee name overlong":  post(alice, "/v1/marquees", "{\"name\":\"a\xc0\xafb\",\"plan\":\"standard\"}"),
		"marquee name surrogate": post(alice, "/v1/marquees", "{\"name\":\"a\xed\xa0\x80b\",\"plan\":\"standard\"}"),
		"plan":                   post(alice, "/v1/marquees", "{\"name\":\"m\",\"plan\":\"standard\xff\"}"),
		"sku":                    post(alice, "/v1/checkouts", "{\"sku\":\"mana_1000\xff\",\"provider\":\"stripe\"}"),
		"provider":               post(alice, "/v1/checkouts", "{\"sku\":\"mana_1000\",\"provider\":\"stripe\xff\"}"),
		"playground name":        post(alice, "/v1/marquees/"+mq+"/playgrounds", "{\"name\":\"pg\xff\"}"),
		"field name":             conv("{\"mana\xff\":1}"),
		"after a number":         conv("{\"mana\":1\xff}"),
	} {
		add(hostileCase{name: "utf8/" + name, req: q, status: 400, code: httpapi.CodeInvalidRequest})
	}
	add(hostileCase{name: "utf8/Authorization", req: withHeader(conv(`{"mana":1}`), "Authorization", "Bearer bk_\xff\xfe"),
		status: 401, code: httpapi.CodeUnauthorized})
	for _, p := range hostileProviders {
		add(hostileCase{name: "utf8/unsigned webhook " + p, status: 400, code: "missing_signature",
			req: hostileReq{method: http.MethodPost, path: "/webhooks/" + p, body: []byte("{\"id\":\"evt_\xff\"}")}})
	}
	// Even a SIGNED delivery that is not UTF-8 is refused, nothing stored:
	// decoding would turn each invalid byte into U+FFFD, so "evt_\xff" and
	// "evt_\xfe" would claim one id and the second event would never be
	// fulfilled. Providers send JSON, which is UTF-8 (RFC 8259 8.1).
	for _, p := range hostileProviders {
		for _, id := range []string{"evt_utf8_\xff", "evt_utf8_\xfe"} {
			body := bytes.Replace(eventWithID(p, "ID"), []byte("ID"), []byte(id), 1)
			add(hostileCase{name: fmt.Sprintf("utf8/signed webhook %s event id %q", p, id), req: h.signed(p, body),
				status: 400, code: "malformed_payload"})
		}
	}

	// --- 10 MB bodies on every POST route: each body is valid JSON that
	// would succeed as alice but for its size.
	for _, rt := range h.postRoutes() {
		add(hostileCase{name: "10MB/" + rt.name, req: post(alice, rt.path, string(padded(rt.body))),
			status: 413, code: httpapi.CodeBodyTooLarge})
	}
	{
		q := conv(string(padded(`{"mana":1}`)))
		q.chunked = true
		add(hostileCase{name: "10MB/conversions chunked", req: q, status: 413, code: httpapi.CodeBodyTooLarge})
		q = post(hostileActor{}, "/v1/conversions", string(padded(`{"mana":1}`)))
		add(hostileCase{name: "10MB/conversions unauthenticated", req: q, status: 401, code: httpapi.CodeUnauthorized})
	}
	orderID, _ := strconv.ParseInt(h.alice.order, 10, 64)
	for _, p := range hostileProviders {
		// A correctly signed paid event for alice's order, padded to 10 MB.
		body := padded(string(providerevents.CompletedEvent(p, "evt_10mb_"+p, orderID, 999, "usd")))
		add(hostileCase{name: "10MB/webhook " + p + " signed", req: h.signed(p, body), status: 413, code: "payload_too_large"})
		q := h.signed(p, body)
		q.chunked = true
		add(hostileCase{name: "10MB/webhook " + p + " signed chunked", req: q, status: 413, code: "payload_too_large"})
	}

	// --- Deeply nested JSON. 100,000 levels do not fit in the API's 64 KiB
	// body (413); 30,000 arrays or 10,500 objects fit and meet
	// encoding/json's depth limit of 10,000 (400). Webhook bodies may be 1 MiB: unsigned they are refused
	// for the signature, signed for the payload.
	for _, rt := range h.postRoutes() {
		add(
			hostileCase{name: "nested/100000 arrays " + rt.name, req: post(alice, rt.path, nested(100_000, false, "1")),
				status: 413, code: httpapi.CodeBodyTooLarge},
			hostileCase{name: "nested/100000 objects " + rt.name, req: post(alice, rt.path, nested(100_000, true, "1")),
				status: 413, code: httpapi.CodeBodyTooLarge},
			hostileCase{name: "nested/30000 arrays " + rt.name, req: post(alice, rt.path, nested(30_000, false, "1")),
				status: 400, code: httpapi.CodeInvalidRequest},
			hostileCase{name: "nested/10500 objects " + rt.name, req: post(alice, rt.path, nested(10_500, true, "1")),
				status: 400, code: httpapi.CodeInvalidRequest},
		)
	}
	add(hostileCase{name: "nested/30000 arrays as the amount", req: conv(`{"mana":` + nested(30_000, false, "1") + `}`),
		status: 400, code: httpapi.CodeInvalidRequest})
	for _, p := range hostileProviders {
		arrays, objects := []byte(nested(100_000, false, "1")), []byte(nested(100_000, true, "1"))
		inEnvelope := []byte(`{"id":"evt_deep","event_id":"evt_deep","type":"checkout.session.completed",` +
			`"event_type":"transaction.completed","eventType":"checkout.completed","data":` + nested(100_000, true, "1") + `}`)
		add(
			hostileCase{name: "nested/webhook " + p + " unsigned", status: 400, code: "missing_signature",
				req: hostileReq{method: http.MethodPost, path: "/webhooks/" + p, body: arrays}},
			hostileCase{name: "nested/webhook " + p + " signed arrays", req: h.signed(p, arrays), status: 400, code: "malformed_payload"},
			hostileCase{name: "nested/webhook " + p + " signed objects", req: h.signed(p, objects), status: 400, code: "malformed_payload"},
			hostileCase{name: "nested/webhook " + p + " signed, inside the event", req: h.signed(p, inEnvelope), status: 400, code: "malformed_payload"},
		)
	}

	// --- SQL metacharacters in every string field. All SQL is
	// parameterized, so text is only ever data: a field with a closed set
	// of values (plan, sku, provider, currency, ids) refuses it; a free-text
	// field (a name) accepts it when it is otherwise valid and stores it
	// byte for byte; NUL is refused everywhere (not printable, and
	// PostgreSQL text cannot hold it).
	for _, m := range sqlMeta {
		esc := url.PathEscape(m.s)
		if m.s == "\x00" {
			add(hostileCase{name: "sql/marquee name " + m.name, req: post(alice, "/v1/marquees", jsonOf(map[string]string{"name": m.s, "plan": "standard"})),
				status: 400, code: "invalid_name"})
			add(hostileCase{name: "sql/playground name " + m.name, req: post(alice, "/v1/marquees/"+mq+"/playgrounds", jsonOf(map[string]string{"name": m.s})),
				status: 400, code: "invalid_name"})
		} else {
			add(hostileCase{name: "sql/marquee name " + m.name, status: 201,
				req:    post(alice, "/v1/marquees", jsonOf(map[string]string{"name": m.s, "plan": "standard"})),
				legit:  "any printable name is valid; stored verbatim",
				effect: map[string]int{"marquees": 1},
				check:  requireStoredName("marquees", "id", m.s)})
			add(hostileCase{name: "sql/playground name " + m.name, status: 202,
				req:    post(alice, "/v1/marquees/"+mq+"/playgrounds", jsonOf(map[string]string{"name": m.s})),
				legit:  "any printable name is valid on a funded Marquee; stored verbatim, its create job queued",
				effect: map[string]int{"playgrounds": 1, "river_job": 1, "api_requests": 1},
				check:  requireStoredName("playgrounds", "playground_id", m.s)})
			// A valid key is data too: stored verbatim, and a retry replays.
			add(hostileCase{name: "sql/Idempotency-Key " + m.name, status: 201,
				req:    withKeys(post(alice, "/v1/marquees", `{"name":"keyed `+m.name+`","plan":"standard"}`), m.s),
				legit:  "a printable ASCII key is a valid key",
				effect: map[string]int{"marquees": 1, "idempotency_keys": 1},
				check:  requireKeyStored(m.s)})
			add(hostileCase{name: "sql/Authorization " + m.name, req: withHeader(conv(`{"mana":1}`), "Authorization", "Bearer "+m.s),
				status: 401, code: httpapi.CodeUnauthorized})
		}
		add(
			hostileCase{name: "sql/plan " + m.name, req: post(alice, "/v1/marquees", jsonOf(map[string]string{"name": "m", "plan": m.s})),
				status: 400, code: "unknown_plan"},
			hostileCase{name: "sql/sku " + m.name, req: post(alice, "/v1/checkouts", jsonOf(map[string]string{"sku": m.s, "provider": "stripe"})),
				status: 400, code: "unknown_sku"},
			hostileCase{name: "sql/provider " + m.name, req: post(alice, "/v1/checkouts", jsonOf(map[string]string{"sku": "mana_1000", "provider": m.s})),
				status: 400, code: "unknown_provider"},
			hostileCase{name: "sql/amount " + m.name, req: conv(jsonOf(map[string]string{"mana": m.s})),
				status: 400, code: httpapi.CodeInvalidAmount},
			hostileCase{name: "sql/currency " + m.name, req: get(alice, "/v1/wallets/"+esc+"/transactions"),
				status: 404, code: httpapi.CodeNotFound},
			hostileCase{name: "sql/currency mana" + m.name, req: get(alice, "/v1/wallets/mana"+esc+"/transactions"),
				status: 404, code: httpapi.CodeNotFound},
			hostileCase{name: "sql/limit " + m.name, req: get(alice, "/v1/wallets/mana/transactions?limit="+url.QueryEscape(m.s)),
				status: 400, code: httpapi.CodeInvalidRequest},
			hostileCase{name: "sql/before " + m.name, req: get(alice, "/v1/wallets/mana/transactions?before="+url.QueryEscape(m.s)),
				status: 400, code: httpapi.CodeInvalidRequest},
			hostileCase{name: "sql/webhook provider " + m.name, status: 404, code: "unknown_provider",
				req: hostileReq{method: http.MethodPost, path: "/webhooks/" + esc, body: h.paidEvent}},
		)
		for _, rt := range h.idRoutes() {
			for _, id := range []string{m.s, alice.marquee + m.s, h.alice.playground + m.s} {
				q := hostileReq{method: rt.method, path: fmt.Sprintf(rt.pattern, url.PathEscape(id)), as: alice}
				add(hostileCase{name: fmt.Sprintf("sql/id %s %q", rt.pattern, id), req: q, status: 404, code: httpapi.CodeNotFound})
			}
		}
		for _, p := range hostileProviders {
			// Signed events: the provider's text, stored verbatim as data
			// when it is a valid id; refused where a number or a currency
			// code is expected.
			if m.s == "\x00" {
				add(hostileCase{name: "sql/webhook " + p + " event id " + m.name, status: 400, code: "malformed_payload",
					req: h.signed(p, eventWithID(p, "evt_"+m.s))})
			} else {
				body := eventWithID(p, "evt_"+m.s)
				add(hostileCase{name: "sql/webhook " + p + " event id " + m.name, req: h.signed(p, body), status: 200,
					legit: "a signed event id is the provider's text; stored verbatim", effect: map[string]int{"webhook_events": 1},
					check: requireWebhookStored(p, "evt_"+m.s, body)})
			}
			// A signed event whose object cannot be applied (an order id
			// that is no number, a currency that is no code) is claimed
			// and refused with its reason, moving nothing (invariant 11).
			orderBody := paidEvent(p, "evt_order_"+m.name, m.s, 999, "usd")
			currencyBody := paidEvent(p, "evt_currency_"+m.name, h.alice.order, 999, m.s)
			add(
				hostileCase{name: "sql/webhook " + p + " order id " + m.name, status: 200, req: h.signed(p, orderBody),
					legit: "a signed event is refused as data, with its reason", effect: map[string]int{"webhook_events": 1},
					check: requireWebhookRefused(p, "evt_order_"+m.name, orderBody)},
				hostileCase{name: "sql/webhook " + p + " currency " + m.name, status: 200, req: h.signed(p, currencyBody),
					legit: "a signed event is refused as data, with its reason", effect: map[string]int{"webhook_events": 1},
					check: requireWebhookRefused(p, "evt_currency_"+m.name, currencyBody)},
			)
		}
	}

	// --- Amounts of conversions: alice has 900 Mana.
	for body, code := range map[string]string{
		`{"mana":-1}`:                   httpapi.CodeInvalidAmount,
		`{"mana":0}`:                    httpapi.CodeInvalidAmount,
		`{"mana":-0}`:                   httpapi.CodeInvalidAmount,
		`{"mana":-9223372036854775808}`: httpapi.CodeInvalidAmount,
		`{"mana":1.5}`:                  httpapi.CodeInvalidAmount,
		`{"mana":1.0}`:                  httpapi.CodeInvalidAmount,
		`{"mana":1e2}`:                  httpapi.CodeInvalidAmount,
		`{"mana":"100"}`:                httpapi.CodeInvalidAmount,
		`{"mana":"1e400"}`:              httpapi.CodeInvalidAmount,
		`{"mana":9223372036854775808}`:  httpapi.CodeInvalidAmount,
		`{"mana":18446744073709551617}`: httpapi.CodeInvalidAmount,
		`{"mana":-9223372036854775809}`: httpapi.CodeInvalidAmount,
		`{"mana":1e400}`:                httpapi.CodeInvalidAmount,
		`{"mana":-1e400}`:               httpapi.CodeInvalidAmount,
		`{"mana":null}`:                 httpapi.CodeInvalidAmount,
		`{"mana":true}`:                 httpapi.CodeInvalidAmount,
		`{"mana":[1]}`:                  httpapi.CodeInvalidAmount,
		`{"mana":{"n":1}}`:              httpapi.CodeInvalidAmount,
		`{}`:                            httpapi.CodeInvalidAmount,
		`{"mana":0x10}`:                 httpapi.CodeInvalidRequest,
		`{"mana":01}`:                   httpapi.CodeInvalidRequest,
		`{"mana":NaN}`:                  httpapi.CodeInvalidRequest,
		`{"mana":Infinity}`:             httpapi.CodeInvalidRequest,
		`{"mana":1} {"mana":1}`:         httpapi.CodeInvalidRequest,
		`[{"mana":1}]`:                  httpapi.CodeInvalidRequest,
		`"mana"`:                        httpapi.CodeInvalidRequest,
	} {
		add(hostileCase{name: "amount/" + body, req: conv(body), status: 400, code: code})
	}
	add(
		hostileCase{name: "amount/more than the balance", req: conv(`{"mana":901}`), status: 409, code: httpapi.CodeInsufficientBalance},
		hostileCase{name: "amount/max int64", req: conv(`{"mana":9223372036854775807}`), status: 409, code: httpapi.CodeInsufficientBalance},
	)
	for _, p := range hostileProviders {
		for name, amount := range map[string]string{"negative": "-999", "overflowing": "9223372036854775808", "1e400": "1e400", "fractional": "999.5"} {
			// Signed and JSON: claimed and refused with its reason, moving
			// nothing (invariant 11), never a 400 the provider retries.
			body := paidEventRaw(p, "evt_amount_"+name, h.alice.order, amount, "usd")
			add(hostileCase{name: "amount/webhook " + p + " " + name, status: 200, req: h.signed(p, body),
				legit: "a signed event is refused as data, with its reason", effect: map[string]int{"webhook_events": 1},
				check: requireWebhookRefused(p, "evt_amount_"+name, body)})
		}
	}

	// --- Unknown fields on every POST route.
	for _, rt := range h.postRoutes() {
		add(hostileCase{name: "unknown field/" + rt.name, req: post(alice, rt.path, rt.unknown), status: 400, code: httpapi.CodeInvalidRequest})
	}

	// --- Another player's ids on every route with an id: 404, exactly as
	// an id that does not exist. Alternative spellings of the same number
	// (strconv.ParseInt reads "+7" and "007") are still bob's.
	for _, rt := range h.idRoutes() {
		for _, id := range []string{rt.bobID, "+" + rt.bobID, "00" + rt.bobID, "0", "-1", "9223372036854775807", "9223372036854775808"} {
			q := hostileReq{method: rt.method, path: fmt.Sprintf(rt.pattern, id), as: alice}
			add(hostileCase{name: fmt.Sprintf("other player/%s %s", fmt.Sprintf(rt.pattern, "{id}"), id), req: q,
				status: 404, code: httpapi.CodeNotFound})
		}
	}

	// --- A duplicate delivery is answered like the first, with no effect.
	add(hostileCase{name: "webhook/duplicate delivery", req: h.signed("stripe", h.paidEvent), status: 200,
		duplicates: 1, legit: "docs/contract.md: a duplicate is answered 2xx like the first delivery, with no effect but its count on the claim"})
	// Wrong and stale signatures.
	{
		q := h.signed("stripe", h.paidEvent)
		q.body = bytes.Replace(h.paidEvent, []byte(`"amount_total":999`), []byte(`"amount_total":999999`), 1)
		add(hostileCase{name: "webhook/tampered body", req: q, status: 400, code: "bad_signature"})
		name, value, _ := providerevents.Sign("paddle", hostileSecret, h.paidEvent, h.now.Add(-time.Hour))
		add(hostileCase{name: "webhook/stale signature", status: 400, code: "stale_signature",
			req: hostileReq{method: http.MethodPost, path: "/webhooks/paddle", body: h.paidEvent, header: map[string]string{name: value}}})
	}
	return append(cs, h.strictCases()...)
}

// strictCases are requests a lenient server would read differently from a
// proxy in front of it, or read at all: duplicate and case-variant JSON
// names, non-JSON content types, non-canonical ids and paths, and names
// with invisible or direction-changing characters.
func (h *hostileEnv) strictCases() []hostileCase {
	var cs []hostileCase
	a := h.alice
	for _, rt := range h.postRoutes() {
		cs = append(cs, hostileCase{name: "content-type/text/plain " + rt.name, status: 415, code: httpapi.CodeUnsupportedMediaType,
			req: hostileReq{method: http.MethodPost, path: rt.path, as: a, body: []byte(rt.body),
				header: map[string]string{"Content-Type": "text/plain"}, keys: []string{"ct-" + rt.name}}})
		cs = append(cs, hostileCase{name: "content-type/form " + rt.name, status: 415, code: httpapi.CodeUnsupportedMediaType,
			req: hostileReq{method: http.MethodPost, path: rt.path, as: a, body: []byte(rt.body),
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}})
	}
	for _, body := range []string{`{"mana":1,"mana":1000}`, `{"mana":1000,"mana":1}`, `{"MANA":3}`, `{"Mana":3}`, `{"mana":1,"Mana":3}`} {
		cs = append(cs, hostileCase{name: "json names/" + body, req: post(a, "/v1/conversions", body), status: 400,
			code: httpapi.CodeInvalidRequest})
	}
	cs = append(cs,
		hostileCase{name: "json names/duplicate plan", req: post(a, "/v1/marquees", `{"name":"m","plan":"standard","plan":"big"}`),
			status: 400, code: httpapi.CodeInvalidRequest},
		hostileCase{name: "json names/Provider", req: post(a, "/v1/checkouts", `{"sku":"mana_1000","Provider":"stripe"}`),
			status: 400, code: httpapi.CodeInvalidRequest},
	)
	for _, id := range []string{"0" + a.order, "+" + a.order, "%2B" + a.order, a.order + "%20"} {
		cs = append(cs, hostileCase{name: "canonical id/order " + id, req: get(a, "/v1/orders/"+id), status: 404, code: httpapi.CodeNotFound})
	}
	for _, p := range []string{"/v1//wallets", "/v1/orders/../wallets", "/v1/./wallets", "//v1/conversions"} {
		cs = append(cs, hostileCase{name: "path/" + p, req: get(a, p), status: 404, code: httpapi.CodeNotFound})
	}
	cs = append(cs, hostileCase{name: "path/POST with ..", req: post(a, "/v1/x/../conversions", `{"mana":1}`),
		status: 404, code: httpapi.CodeNotFound})
	for _, name := range []string{"a\u202eb", "a\u200bb", "a\u0085b", "a\u2028b"} {
		cs = append(cs,
			hostileCase{name: fmt.Sprintf("names/marquee %q", name), status: 400, code: "invalid_name",
				req: post(a, "/v1/marquees", jsonOf(map[string]string{"name": name, "plan": "standard"}))},
			hostileCase{name: fmt.Sprintf("names/playground %q", name), status: 400, code: "invalid_name",
				req: post(a, "/v1/marquees/"+a.marquee+"/playgrounds", jsonOf(map[string]string{"name": name}))},
		)
	}
	return cs
}

// eventWithID is a signed-able event of a type intake only acknowledges.
func eventWithID(provider, id string) []byte {
	switch provider {
	case "stripe":
		return []byte(jsonOf(map[string]string{"id": id, "type": "customer.created"}))
	case "paddle":
		return []byte(jsonOf(map[string]string{"event_id": id, "event_type": "customer.created"}))
	default:
		return []byte(jsonOf(map[string]string{"id": id, "eventType": "subscription.active"}))
	}
}

// paidEvent is a completed payment whose order id and currency are any text.
func paidEvent(provider, eventID, order string, amount int64, currency string) []byte {
	return paidEventRaw(provider, eventID, jsonOf(order), strconv.FormatInt(amount, 10), currency)
}

// paidEventRaw takes the order id and the amount as raw JSON.
func paidEventRaw(provider, eventID, order, amount, currency string) []byte {
	if _, err := strconv.ParseInt(order, 10, 64); err == nil {
		order = jsonOf(order)
	}
	cur := jsonOf(currency)
	switch provider {
	case "stripe":
		return []byte(`{"id":` + jsonOf(eventID) + `,"type":"checkout.session.completed","data":{"object":{` +
			`"amount_total":` + amount + `,"currency":` + cur + `,"payment_status":"paid","metadata":{"order_id":` + order + `}}}}`)
	case "paddle":
		return []byte(`{"event_id":` + jsonOf(eventID) + `,"event_type":"transaction.completed","data":{"currency_code":` + cur +
			`,"custom_data":{"order_id":` + order + `},"details":{"totals":{"grand_total":` + jsonOf(amount) + `}}}}`)
	default:
		return []byte(`{"id":` + jsonOf(eventID) + `,"eventType":"checkout.completed","object":{"order":{"amount":` + amount +
			`,"currency":` + cur + `},"metadata":{"order_id":` + order + `}}}`)
	}
}

// requireStoredName checks that the row the reply names holds name verbatim.
func requireStoredName(table, idField, name string) func(*testing.T, *hostileEnv, hostileReply) {
	return func(t *testing.T, h *hostileEnv, r hostileReply) {
		id := r.str(idField)
		require.NotEmpty(t, id, "%s", r.raw)
		var stored string
		require.NoError(t, h.pool.QueryRow(context.Background(),
			`SELECT name FROM `+table+` WHERE id = $1 AND player_id = $2`, id, h.alice.id).Scan(&stored))
		require.Equal(t, name, stored)
		if table == "marquees" {
			require.Equal(t, name, r.str("name"))
		}
	}
}

// requireKeyStored checks the key row and that a retry replays the answer.
func requireKeyStored(key string) func(*testing.T, *hostileEnv, hostileReply) {
	return func(t *testing.T, h *hostileEnv, r hostileReply) {
		var n int
		require.NoError(t, h.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM idempotency_keys WHERE player_id = $1 AND key = $2 AND status = 'completed'`,
			h.alice.id, key).Scan(&n))
		require.Equal(t, 1, n)
		again := h.send(t, hostileReq{method: http.MethodPost, path: "/v1/marquees", as: h.alice, keys: []string{key},
			body: []byte(fmt.Sprintf(`{"name":%s,"plan":"standard"}`, jsonOf(r.str("name"))))})
		require.Equal(t, http.StatusCreated, again.status, "%s", again.raw)
		require.Equal(t, "true", again.header.Get("X-Idempotent-Replayed"))
		require.Equal(t, r.str("id"), again.str("id"))
	}
}

// requireWebhookStored checks the claimed row: its id and the exact bytes.
func requireWebhookStored(provider, eventID string, body []byte) func(*testing.T, *hostileEnv, hostileReply) {
	return func(t *testing.T, h *hostileEnv, r hostileReply) {
		require.Equal(t, "claimed", r.str("status"), "%s", r.raw)
		var payload []byte
		require.NoError(t, h.pool.QueryRow(context.Background(),
			`SELECT payload FROM webhook_events WHERE provider = $1 AND event_id = $2 AND order_id IS NULL`,
			provider, eventID).Scan(&payload))
		require.Equal(t, body, payload)
	}
}

// requireWebhookRefused: the event was claimed with its body as sent and
// recorded refused, with a reason, and no job.
func requireWebhookRefused(provider, eventID string, body []byte) func(*testing.T, *hostileEnv, hostileReply) {
	return func(t *testing.T, h *hostileEnv, r hostileReply) {
		require.Equal(t, "claimed", r.str("status"), "%s", r.raw)
		var payload []byte
		var outcome, reason string
		require.NoError(t, h.pool.QueryRow(context.Background(),
			`SELECT payload, coalesce(outcome, ''), coalesce(outcome_reason, '') FROM webhook_events WHERE provider = $1 AND event_id = $2`,
			provider, eventID).Scan(&payload, &outcome, &reason))
		require.Equal(t, body, payload)
		require.Equal(t, "refused", outcome)
		require.NotEmpty(t, reason, "a refusal says why")
	}
}

// errorLog is a slog.Handler that keeps error-level records: the API logs
// every 5xx cause, and a webhook claim failure, at error level.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelError }

func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
	return nil
}

func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}
