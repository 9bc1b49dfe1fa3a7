package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/domain/playground"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
	"github.com/fibe-dev/billing/internal/web/requests"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// env is a real server over a fresh database, with an optional River
// worker sharing its clock.
type env struct {
	t       *testing.T
	pool    *pgxpool.Pool
	srv     *httptest.Server
	clock   *testkit.Clock
	opts    Options // the server's
	skus    map[string]fulfillment.SKU
	river   *jobs.Client
	wallets *wallet.Store
	// fake plays Stripe, Paddle and Creem for checkouts.
	fake *fakeapi.Server
	// providers are the drivers of the setup, pointed at fake.
	providers *provider.Registry
}

// setup is what a test may change before its server starts: the server's
// Options, and what they are built from here (the provider drivers'
// options, the catalogue, the wallet's Sparks per Mana).
type setup struct {
	Options
	providers     map[string]*provider.Options
	skus          map[string]fulfillment.SKU
	sparksPerMana int64
}

func newEnv(t *testing.T) *env { t.Helper(); return newEnvWith(t, nil) }

// newEnvWith lets a test change the setup before the server starts, and
// then the server's Options.
func newEnvWith(t *testing.T, configure func(*setup), serverOpts ...func(*Options)) *env {
	t.Helper()
	pool := testdb.NewPool(t, 30) // two parallel tests stay below the server's max_connections
	set := &setup{Options: Options{Plans: enforcer.DefaultPlans(), TZ: time.UTC}, skus: fulfillment.DefaultSKUs(), sparksPerMana: 1}
	fake := fakeProviders(t, set)
	if configure != nil {
		configure(set)
	}
	e := &env{t: t, pool: pool, skus: set.skus, clock: testkit.NewClock(time.Now().UTC()), fake: fake,
		wallets: wallet.New(pool, wallet.Options{SparksPerMana: set.sparksPerMana})}
	var err error
	e.river, err = jobs.NewClient(pool, jobs.Options{Logger: quiet})
	require.NoError(t, err)
	e.providers = providersOf(set.providers)
	opts := set.Options
	opts.Pool, opts.River, opts.Wallet, opts.Logger, opts.Providers = pool, e.river, e.wallets, quiet, e.providers
	opts.Gatherer, opts.Now = prometheus.NewRegistry(), e.clock.Now
	opts.Checkouts = checkout.NewService(checkout.Options{Openers: provider.Select[checkout.Opener](e.providers), SKUs: set.skus,
		SuccessURL: "https://example.test/ok", CancelURL: "https://example.test/cancel", Logger: quiet})
	for _, f := range serverOpts {
		f(&opts)
	}
	s, err := New(opts)
	require.NoError(t, err)
	e.opts = opts
	e.srv = httptest.NewServer(s)
	t.Cleanup(e.srv.Close)
	return e
}

// providersOf are the drivers of opts, with a short retry budget.
func providersOf(opts map[string]*provider.Options) *provider.Registry {
	out := map[string]provider.Options{}
	for name, o := range opts {
		o.Retry = provider.Retry{Budget: time.Second, BaseDelay: 10 * time.Millisecond, RetryAfter: 2 * time.Second}
		out[name] = *o
	}
	return drivers.New(out)
}

// fakeProviders points the setup's three providers at one recording fake,
// with a Creem product priced like each SKU.
func fakeProviders(t *testing.T, set *setup) *fakeapi.Server {
	fake := providertest.StartFake()
	t.Cleanup(fake.Close)
	set.providers = map[string]*provider.Options{
		provider.Stripe: {APIKey: "sk_test_env", APIURL: fake.URL},
		provider.Paddle: {APIKey: "pdl_test_env", APIURL: fake.URL},
		provider.Creem:  {APIKey: "creem_test_env", APIURL: fake.URL},
	}
	for name, sku := range set.skus {
		sku.CatalogueIDs = map[string]string{provider.Creem: "prod_" + name}
		set.skus[name] = sku
		fake.SetProduct(sku.CatalogueID(provider.Creem), fakeapi.Product{Price: sku.Amount, Currency: sku.Currency})
	}
	return fake
}

// startWorker works the jobs the API inserts (no periodic jobs) with the
// env's clock, registered as cmd/billing's registry registers them.
func (e *env) startWorker() {
	e.t.Helper()
	workers := river.NewWorkers()
	fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: e.pool, Wallet: e.wallets, Logger: quiet, Now: e.clock.Now,
		Refunders: provider.Select[fulfillment.Refunder](e.providers)})
	playground.Register(workers, playground.WorkerOptions{Pool: e.pool, Now: e.clock.Now})
	enforcer.Register(workers, enforcer.WorkerOptions{Service: enforcer.New(e.pool, e.wallets,
		enforcer.Options{TZ: e.opts.TZ, Now: e.clock.Now, Logger: quiet})})
	small := river.QueueConfig{MaxWorkers: 4}
	client, err := jobs.NewClient(e.pool, jobs.Options{Logger: quiet, Workers: workers, ID: e.t.Name(),
		Queues:            map[string]river.QueueConfig{jobs.QueueDefault: small, jobs.QueueFunding: small, jobs.QueueFulfillment: small},
		FetchPollInterval: 100 * time.Millisecond})
	require.NoError(e.t, err)
	require.NoError(e.t, client.Start(context.Background()))
	e.t.Cleanup(func() { _ = jobs.Stop(context.Background(), client, 5*time.Second) })
}

type player struct {
	id  int64
	key string
}

func (e *env) newPlayer(name string) player {
	e.t.Helper()
	p, key, err := players.Create(context.Background(), e.pool, name)
	require.NoError(e.t, err)
	return player{id: p.ID, key: key}
}

func (e *env) credit(p player, c wallet.Currency, amount int64) {
	e.t.Helper()
	_, err := e.wallets.Credit(context.Background(), wallet.PostParams{PlayerID: p.id, Currency: c, Amount: amount,
		Kind: wallet.KindAdjustment, Reference: "test", IdempotencyKey: wallet.CallerKey(fmt.Sprintf("test:%d:%s:%d", p.id, c, time.Now().UnixNano()))})
	require.NoError(e.t, err)
}

// fundNow funds a Marquee for the clock's service day without River.
func (e *env) fundNow(marqueeID int64) {
	e.t.Helper()
	svc := enforcer.New(e.pool, e.wallets, enforcer.Options{TZ: time.UTC, Now: e.clock.Now, Logger: quiet})
	res, err := svc.FundDay(context.Background(), enforcer.FundDayArgs{MarqueeID: marqueeID, Day: enforcer.ServiceDay(e.clock.Now(), time.UTC)})
	require.NoError(e.t, err)
	require.Contains(e.t, []enforcer.Outcome{enforcer.OutcomeFunded, enforcer.OutcomeAlreadyPaid}, res.Outcome)
}

// fundedMarquee creates a Marquee for p, gives p Sparks and funds it.
func (e *env) fundedMarquee(p player) int64 {
	e.t.Helper()
	m, err := enforcer.CreateMarquee(context.Background(), e.pool, e.opts.Plans, enforcer.CreateParams{PlayerID: p.id, Name: "m", Plan: "standard"})
	require.NoError(e.t, err)
	e.credit(p, wallet.Sparks, 1000)
	e.fundNow(m.ID)
	return m.ID
}

// reply is an answer of the server.
type reply struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r reply) str(field string) string {
	v, _ := r.body[field].(string)
	return v
}

func (r reply) replayed() bool { return r.header.Get("X-Idempotent-Replayed") == "true" }

// do sends a request as p; key "" sends no Idempotency-Key.
func (e *env) do(p player, method, path, key, body string) reply {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	require.NoError(e.t, err)
	if p.key != "" {
		req.Header.Set("Authorization", "Bearer "+p.key)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	requireOwnWords(e.t, path, r)
	return r
}

// internalText is what an API error's detail must never carry: a Go
// package's prefix on an error ("enforcer: name ...") or a Go type.
var internalText = regexp.MustCompile(`(^|: )(enforcer|playground|wallet|fulfillment|idempotency|httpapi|checkout|players|config|jobs|jsontext|json|pgx|river): |Go (struct|type)|\bstruct \{`)

// requireOwnWords: the problem a /v1 route answers is in the API's own
// words (errors.go maps every error centrally).
func requireOwnWords(t *testing.T, path string, r reply) {
	t.Helper()
	if r.status >= 400 && strings.HasPrefix(path, "/v1") {
		require.NotRegexp(t, internalText, r.str("detail"), "%s answered %s", path, r.raw)
	}
}

// requireProblem checks a problem+json answer.
func requireProblem(t *testing.T, r reply, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.status, string(r.raw))
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	require.Equal(t, code, r.str("code"), string(r.raw))
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// requireAuditClean runs the full audit: every invariant.
func (e *env) requireAuditClean() {
	e.t.Helper()
	audittest.RequireClean(e.t, e.pool, audit.Options{})
}

func idStr(id int64) string { return strconv.FormatInt(id, 10) }

// waitRequest polls GET /v1/requests/{id} until it is terminal.
func (e *env) waitRequest(p player, id string) reply {
	e.t.Helper()
	var r reply
	require.Eventually(e.t, func() bool {
		r = e.do(p, http.MethodGet, "/v1/requests/"+id, "", "")
		s := r.str("status")
		return s == requests.Succeeded || s == requests.Failed || s == requests.Cancelled
	}, testdb.WorkDeadline, 50*time.Millisecond)
	return r
}
