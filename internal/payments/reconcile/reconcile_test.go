package reconcile_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/internal/payments/reconcile"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
	"github.com/fibe-dev/billing/wallet"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var (
	discard   = slog.New(slog.DiscardHandler)
	catalogue = map[string]fulfillment.SKU{"mana_1000": {Amount: 999, Currency: "usd", Mana: 1000}}
	secrets   = map[string][]string{"stripe": {"whsec_rec"}, "paddle": {"pdl_rec"}, "creem": {"whsec_creem"}}
)

type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	fake   *fakeapi.Server
	rec    *reconcile.Reconciler
	hooks  *httptest.Server // the webhook intake
	player int64
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := testdb.New(t)
	e := &env{t: t, pool: pool, river: startRiver(t, pool), fake: providertest.StartFake()}
	t.Cleanup(e.fake.Close)
	e.rec = reconcile.New(reconcile.Options{Pool: pool, Logger: discard, Listers: fakeListers(e.fake.URL)})
	e.hooks = httptest.NewServer(webhook.NewHandler(webhook.Options{Pool: pool, River: e.river, Logger: discard,
		Providers: provider.Select[webhook.Intake](drivers.New(fakeProviders(e.fake.URL)))}))
	t.Cleanup(e.hooks.Close)
	p, _, err := players.Create(context.Background(), pool, "buyer")
	require.NoError(t, err)
	e.player = p.ID
	return e
}

// fakeProviders are the drivers' options with Stripe's and Paddle's APIs
// pointed at the fake at url.
func fakeProviders(url string) map[string]provider.Options {
	return map[string]provider.Options{
		provider.Stripe: {APIKey: "sk_test_rec", APIURL: url, WebhookSecrets: secrets["stripe"]},
		provider.Paddle: {APIKey: "pdl_key", APIURL: url, WebhookSecrets: secrets["paddle"]},
		provider.Creem:  {WebhookSecrets: secrets["creem"]},
	}
}

// fakeListers are the drivers, Stripe's and Paddle's pointed at the fake at url.
func fakeListers(url string) map[string]reconcile.Lister { return listersOf(fakeProviders(url)) }

// listersOf are the drivers of opts, as the worker builds them.
func listersOf(opts map[string]provider.Options) map[string]reconcile.Lister {
	return provider.Select[reconcile.Lister](drivers.New(opts))
}

func startRiver(t *testing.T, pool *pgxpool.Pool) *river.Client[pgx.Tx] {
	t.Helper()
	return fulfillmenttest.StartRiver(t, pool, fulfillment.WorkerOptions{})
}

// paid creates an order and makes the provider list its completed payment
// (as if paid), returning the order and the event id. No webhook is sent.
func (e *env) paid(provider string) (*fulfillment.Order, string, []byte) {
	e.t.Helper()
	o, err := fulfillment.CreateCheckout(context.Background(), e.pool, catalogue,
		fulfillment.CheckoutParams{PlayerID: e.player, SKU: "mana_1000", Provider: provider})
	require.NoError(e.t, err)
	id := fmt.Sprintf("evt_%s_%d", provider, o.ID)
	body := providerevents.CompletedEvent(provider, id, o.ID, o.Amount, o.Currency)
	e.fake.AddEvent(provider, body)
	return o, id, body
}

// deliver sends the event as its webhook; safe from any goroutine.
func (e *env) deliver(provider string, body []byte) (int, error) {
	h, v, err := providerevents.Sign(provider, secrets[provider][0], body, time.Now())
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest(http.MethodPost, e.hooks.URL+"/webhooks/"+provider, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set(h, v)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (e *env) waitFulfilled(orderID int64) {
	e.t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for {
		o, err := fulfillment.OrderByID(context.Background(), e.pool, orderID)
		require.NoError(e.t, err)
		if o.Status == fulfillment.StatusFulfilled {
			return
		}
		require.True(e.t, time.Now().Before(deadline), "order %d not fulfilled in time: %s", orderID, o.Status)
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// requireClean runs the full audit: the wallet's ledger invariants, the
// fulfilment and webhook invariants.
func (e *env) requireClean() {
	e.t.Helper()
	ctx := context.Background()
	rep, err := wallet.Audit(ctx, e.pool, wallet.AuditOptions{})
	require.NoError(e.t, err)
	require.True(e.t, rep.Clean(), rep.String())
	fv, err := fulfillment.Audit(ctx, e.pool)
	require.NoError(e.t, err)
	require.Empty(e.t, fv)
	wv, err := webhook.Audit(ctx, e.pool, webhook.AuditOptions{Since: time.Unix(0, 0)})
	require.NoError(e.t, err)
	require.Empty(e.t, wv)
}

func (e *env) mana() int64 {
	e.t.Helper()
	b, err := wallet.New(e.pool, wallet.Options{}).Balances(context.Background(), e.player)
	require.NoError(e.t, err)
	return b[wallet.Mana]
}

func (e *env) run(provider string, dryRun bool) *reconcile.Summary {
	e.t.Helper()
	sum, err := e.rec.Run(context.Background(), e.river, provider, time.Now().Add(-72*time.Hour), dryRun)
	require.NoError(e.t, err)
	return sum
}

// TestLostWebhookIsRecovered: a payment whose webhook never came is
// fulfilled by the next reconciliation; the run after it, and a payment
// whose webhook did come, count as already claimed.
func TestLostWebhookIsRecovered(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"stripe", "paddle"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			lost, lostEvent, _ := e.paid(provider)
			delivered, _, body := e.paid(provider)
			status, err := e.deliver(provider, body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)

			dry := e.run(provider, true)
			require.Equal(t, reconcile.Summary{Provider: provider, Since: dry.Since, DryRun: true, Seen: 2,
				AlreadyClaimed: 1, Recovered: 1}, *dry)
			require.Zero(t, e.count(`SELECT count(*) FROM webhook_events WHERE event_id = $1`, lostEvent), "dry run claims nothing")

			sum := e.run(provider, false)
			require.Equal(t, 2, sum.Seen)
			require.Equal(t, 1, sum.AlreadyClaimed)
			require.Equal(t, 1, sum.Recovered)
			e.waitFulfilled(lost.ID)
			e.waitFulfilled(delivered.ID)
			require.EqualValues(t, 2000, e.mana())

			again := e.run(provider, false)
			require.Equal(t, 2, again.AlreadyClaimed)
			require.Zero(t, again.Recovered)
			require.EqualValues(t, 2000, e.mana())
			e.requireClean()
		})
	}
}

// TestReconcileRacesWebhook: the webhook and the reconciliation of one
// event, at the same moment on two processes (two pools, two River
// clients), make one claim and one mint, in many seeded orders.
func TestReconcileRacesWebhook(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := reconcileOnOtherProcess(t, e)
	const rounds = 12
	for seed := range rounds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		provider := []string{"stripe", "paddle"}[rng.IntN(2)]
		o, id, body := e.paid(provider)
		var (
			wg     sync.WaitGroup
			status int
			werr   error
			sum    *reconcile.Summary
			rerr   error
		)
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			status, werr = e.deliver(provider, body)
		})
		wg.Go(func() {
			<-start
			sum, rerr = other.rec.Run(context.Background(), other.river, provider, time.Now().Add(-time.Hour), false)
		})
		close(start)
		wg.Wait()
		require.NoError(t, werr)
		require.NoError(t, rerr)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, 1, e.count(`SELECT count(*) FROM webhook_events WHERE event_id = $1`, id), "seed %d", seed)
		require.Equal(t, 1, e.count(`SELECT count(*) FROM river_job WHERE kind = 'fulfill_order' AND args->>'order_id' = $1`,
			fmt.Sprint(o.ID)), "one fulfilment job, seed %d", seed)
		require.LessOrEqual(t, sum.Recovered, 1)
		e.waitFulfilled(o.ID)
	}
	require.EqualValues(t, rounds*1000, e.mana(), "one mint per payment")
	e.requireClean()
}

type process struct {
	rec   *reconcile.Reconciler
	river *river.Client[pgx.Tx]
}

// reconcileOnOtherProcess is a second "process" over the same database:
// its own pool and insert-only River client, listing the same fake.
func reconcileOnOtherProcess(t *testing.T, e *env) process {
	pool, err := pgxpool.New(context.Background(), e.pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: discard})
	require.NoError(t, err)
	rec := reconcile.New(reconcile.Options{Pool: pool, Logger: discard, Listers: fakeListers(e.fake.URL)})
	return process{rec: rec, river: client}
}

func TestReconcileRefusesUnlistableProviders(t *testing.T) {
	t.Parallel()
	rec := reconcile.New(reconcile.Options{Logger: discard, Listers: listersOf(nil)})
	_, err := rec.Run(context.Background(), nil, "creem", time.Now(), true)
	require.ErrorIs(t, err, provider.ErrNoListing)
	_, err = rec.Run(context.Background(), nil, "stripe", time.Now(), true)
	require.ErrorIs(t, err, provider.ErrNotConfigured)
}

// TestPeriodicReconciliation: the worker's periodic job (registered like
// the worker process does, on the configured schedule) fulfils a payment
// whose webhook never came, without anyone running the command.
func TestPeriodicReconciliation(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	fake := providertest.StartFake()
	t.Cleanup(fake.Close)
	sched := river.PeriodicInterval(time.Second)
	keys := map[string]provider.Options{provider.Stripe: {APIKey: "sk_test_periodic", APIURL: fake.URL},
		provider.Paddle: {APIKey: "pdl_periodic", APIURL: fake.URL}}
	workers := river.NewWorkers()
	fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: pool, Wallet: wallet.New(pool, wallet.Options{}), Logger: discard})
	periodic := reconcile.Register(workers, reconcile.WorkerOptions{Pool: pool, Listers: listersOf(keys), Schedule: sched, Logger: discard})
	require.Len(t, periodic, 2, "stripe and paddle list events; creem has no key and no listing")
	require.Empty(t, reconcile.Register(river.NewWorkers(), reconcile.WorkerOptions{Pool: pool, Listers: listersOf(nil),
		Schedule: sched, Logger: discard}), "no API key, no periodic job")

	p, _, err := players.Create(context.Background(), pool, "buyer")
	require.NoError(t, err)
	o, err := fulfillment.CreateCheckout(context.Background(), pool, catalogue,
		fulfillment.CheckoutParams{PlayerID: p.ID, SKU: "mana_1000", Provider: "paddle"})
	require.NoError(t, err)
	fake.AddEvent("paddle", providerevents.CompletedEvent("paddle", "evt_periodic", o.ID, o.Amount, o.Currency))

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues: map[string]river.QueueConfig{fulfillment.QueueFulfillment: {MaxWorkers: 2},
			river.QueueDefault: {MaxWorkers: 2}},
		Workers: workers, PeriodicJobs: periodic, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond, Logger: discard, TestOnly: true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	e := &env{t: t, pool: pool, player: p.ID}
	e.waitFulfilled(o.ID)
	require.EqualValues(t, 1000, e.mana())
	e.requireClean()
}

// TestRescuedRunRecoversSoon: a run left "running" by a worker killed
// mid-listing holds the provider's one-run-at-a-time slot until River's
// rescuer retries it, which it does only once the worker's timeout has
// passed. With reconcile_timeout short, the orphaned run is rescued and
// completes within seconds (with the old fixed 10-minute timeout it stayed
// running, and no reconciliation ran, for over ten minutes).
func TestRescuedRunRecoversSoon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	fake := providertest.StartFake()
	t.Cleanup(fake.Close)
	keys := map[string]provider.Options{provider.Stripe: {APIKey: "sk_test_rescue", APIURL: fake.URL}}
	workers := river.NewWorkers()
	fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: pool, Wallet: wallet.New(pool, wallet.Options{}), Logger: discard})
	require.Empty(t, reconcile.Register(workers, reconcile.WorkerOptions{Pool: pool, Listers: listersOf(keys),
		RunTimeout: 2 * time.Second, Logger: discard}), "no schedule, no periodic job")

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues: map[string]river.QueueConfig{fulfillment.QueueFulfillment: {MaxWorkers: 2},
			river.QueueDefault: {MaxWorkers: 2}},
		Workers: workers, JobTimeout: time.Second, RescueStuckJobsAfter: 3 * time.Second,
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond, Logger: discard, TestOnly: true,
	})
	require.NoError(t, err)
	res, err := client.Insert(ctx, reconcile.Args{Provider: provider.Stripe}, nil)
	require.NoError(t, err)
	// What a kill -9 mid-run leaves behind: running, attempted a while ago
	// by a client that no longer exists.
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '30 seconds',
		attempted_by = '{dead-worker}' WHERE id = $1`, res.Job.ID)
	require.NoError(t, err)

	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stop))
	})
	var state string
	var attempt int
	require.Eventually(t, func() bool {
		require.NoError(t, pool.QueryRow(ctx, `SELECT state, attempt FROM river_job WHERE id = $1`, res.Job.ID).Scan(&state, &attempt))
		return state == "completed"
	}, testdb.WorkDeadline, 100*time.Millisecond, "the orphaned run is rescued and completes")
	require.Equal(t, 2, attempt, "rescued once, then run")
}

// TestLostRefundIsRecovered: a refund whose webhook never came is claimed
// by the next reconciliation and clawed back, once, like a payment's.
func TestLostRefundIsRecovered(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"stripe", "paddle"} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			o, _, body := e.paid(p)
			status, err := e.deliver(p, body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)
			e.waitFulfilled(o.ID)
			refund := fmt.Sprintf("evt_refund_%s_%d", p, o.ID)
			e.fake.AddEvent(p, providerevents.ReversalEvent(p, refund, providerevents.OrderPaymentID(p, strconv.FormatInt(o.ID, 10)),
				"rf_"+refund, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 500, o.Currency))

			sum := e.run(p, false)
			require.Equal(t, 1, sum.Recovered, "the refund")
			require.Equal(t, 1, sum.AlreadyClaimed, "the payment")
			testkit.JobsOn(e.pool).Wait(t, testkit.KindWithArg("reverse_payment", "event_id", refund), 1,
				testkit.WaitOptions{Strict: true})
			require.EqualValues(t, 1000-501, e.mana())
			require.Zero(t, e.run(p, false).Recovered)
			audittest.RequireClean(t, e.pool, audit.Options{})
		})
	}
}

// waitDeadline bounds each wait on a condition (a server listening, a job
// finished): a second on an idle machine, far more at load 20 on two
// cores, so generous; a failing wait still ends with its message.
const waitDeadline = 2 * time.Minute
