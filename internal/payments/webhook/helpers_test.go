package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var catalogue = testkit.Catalogue()

var secrets = testkit.WebhookSecrets()

var discard = testkit.Quiet

// env is one test's database, River worker and real HTTP server over the
// real handler.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	srv    *httptest.Server
	second *httptest.Server // another web process over the same database
	player int64
}

// newEnv starts everything; opts may adjust the handler's options.
func newEnv(t *testing.T, opts ...func(*webhook.Options)) *env {
	t.Helper()
	pool := testdb.New(t)
	e := &env{t: t, pool: pool, river: startRiver(t, pool)}
	o := webhook.Options{Pool: pool, River: e.river, Providers: intakes(secrets), Logger: discard}
	for _, f := range opts {
		f(&o)
	}
	e.srv = httptest.NewServer(webhook.NewHandler(o))
	t.Cleanup(e.srv.Close)
	e.second = httptest.NewServer(webhook.NewHandler(o))
	t.Cleanup(e.second.Close)
	p, _, err := players.Create(context.Background(), pool, "buyer")
	require.NoError(t, err)
	e.player = p.ID
	return e
}

// intakes are the drivers of every provider, each verifying with its
// secrets (none: not configured).
func intakes(secrets map[string][]string) map[string]webhook.Intake {
	opts := map[string]provider.Options{}
	for name, s := range secrets {
		opts[name] = provider.Options{WebhookSecrets: s}
	}
	return provider.Select[webhook.Intake](drivers.New(opts))
}

func startRiver(t *testing.T, pool *pgxpool.Pool) *river.Client[pgx.Tx] {
	t.Helper()
	return fulfillmenttest.StartRiver(t, pool, fulfillment.WorkerOptions{})
}

func (e *env) order(sku, provider string) *fulfillment.Order {
	e.t.Helper()
	o, err := fulfillment.CreateCheckout(context.Background(), e.pool, catalogue,
		fulfillment.CheckoutParams{PlayerID: e.player, SKU: sku, Provider: provider})
	require.NoError(e.t, err)
	return o
}

// sign signs body for provider with its first test secret: Stripe with
// stripe-go's own signer, Paddle and Creem with ours (cross-checked
// elsewhere against the Paddle SDK and an independent HMAC).
func sign(provider string, body []byte, at time.Time) (string, string) {
	return signWith(provider, secrets[provider][0], body, at)
}

func signWith(provider, secret string, body []byte, at time.Time) (string, string) {
	if provider == "stripe" {
		return stripeevents.SignByStripeGo(secret, body, at)
	}
	h, v, err := providerevents.Sign(provider, secret, body, at)
	if err != nil {
		panic(err)
	}
	return h, v
}

type answer struct {
	Status      int
	ContentType string
	Body        map[string]any
}

func (a answer) code() string   { s, _ := a.Body["code"].(string); return s }
func (a answer) status() string { s, _ := a.Body["status"].(string); return s }

// post sends body to /webhooks/provider with the given headers (name, value pairs).
func (e *env) post(provider string, body []byte, headers ...string) answer {
	e.t.Helper()
	return postTo(e.t, e.srv, provider, body, headers...)
}

func postTo(t *testing.T, srv *httptest.Server, provider string, body []byte, headers ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/"+provider, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	a := answer{Status: res.StatusCode, ContentType: res.Header.Get("Content-Type")}
	_ = json.Unmarshal(raw, &a.Body)
	return a
}

func httpServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// errInsertRefused is what the failing insert middleware answers.
var errInsertRefused = errors.New("test: job insert refused")

// insertOnlyClient is a web-process River client; with fail, every job
// insert fails (a River JobInsertMiddleware), as a crash between claim and
// enqueue would.
func insertOnlyClient(t *testing.T, pool *pgxpool.Pool, fail bool) *river.Client[pgx.Tx] {
	t.Helper()
	cfg := &river.Config{Logger: discard, TestOnly: true}
	if fail {
		cfg.Middleware = []rivertype.Middleware{river.JobInsertMiddlewareFunc(
			func(context.Context, []*rivertype.JobInsertParams, func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
				return nil, errInsertRefused
			})}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	return client
}

// closedPool is a pool on the same database, already closed: every query
// fails as with an unreachable server.
func closedPool(t *testing.T, like *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.NewWithConfig(context.Background(), like.Config())
	require.NoError(t, err)
	p.Close()
	return p
}

// deliver signs body for provider now and posts it.
func (e *env) deliver(provider string, body []byte) answer {
	e.t.Helper()
	h, v := sign(provider, body, time.Now())
	return e.post(provider, body, h, v)
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (e *env) events() int { return e.count(`SELECT count(*) FROM webhook_events`) }
func (e *env) jobs() int {
	return e.count(`SELECT count(*) FROM river_job WHERE kind = 'fulfill_order'`)
}
func (e *env) credits() int {
	return e.count(`SELECT count(*) FROM wallet_transactions`)
}

func (e *env) mana() int64 {
	e.t.Helper()
	b, err := wallet.New(e.pool, wallet.Options{}).Balances(context.Background(), e.player)
	require.NoError(e.t, err)
	return b[wallet.Mana]
}

func (e *env) orderStatus(id int64) *fulfillment.Order {
	e.t.Helper()
	o, err := fulfillment.GetOrder(context.Background(), e.pool, e.player, id)
	require.NoError(e.t, err)
	return o
}

type jobRow struct {
	State  string
	Errors []string
}

// waitJobs waits until n fulfill_order jobs were worked to their end.
func (e *env) waitJobs(n int) []jobRow {
	e.t.Helper()
	return rows(testkit.Jobs(e.river).Wait(e.t, testkit.Kind("fulfill_order"), n, testkit.WaitOptions{}))
}

func rows(jobs []testkit.Job) []jobRow {
	out := make([]jobRow, len(jobs))
	for i, j := range jobs {
		out[i] = jobRow{State: string(j.State), Errors: j.Errors}
	}
	return out
}

// requireClean runs the full audit: every invariant.
func (e *env) requireClean() {
	e.t.Helper()
	audittest.RequireClean(e.t, e.pool, audit.Options{})
}
