package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/dev/pglocal"
	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/creem/creemfake"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/paddle/paddlefake"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripefake"
)

// Options size a chaos run.
type Options struct {
	Seed     int64
	Players  int
	Duration time.Duration // how long the workload and the faults run
	Settle   time.Duration // how long the system gets to finish its work afterwards
	Binary   string        // the billing binary to run
	Dir      string        // logs and the PostgreSQL cluster
	Webs     int           // default 2
	Workers  int           // default 3
	// WorkerKillEvery is the mean interval between worker SIGKILLs.
	WorkerKillEvery time.Duration
	DropRate        float64 // share of SDK POST responses the proxy drops
	// ProviderDownFor is how long every payment provider's API answers 503,
	// from 60% of the way into the load (default: a quarter of Duration,
	// at most a minute).
	ProviderDownFor time.Duration
	// Failover runs the system on a pg_auto_failover formation (a monitor
	// and three data nodes) instead of one PostgreSQL, with 2 workers, and
	// injects the failover faults (failover.go) instead of the process and
	// database ones; Failovers is how many rounds of them (default 1:
	// three failovers and a round of cancelled synchronous waits). The
	// load then lasts until the faults are done, at most Duration.
	Failover  bool
	Failovers int
	Out       io.Writer
}

func (o *Options) defaults() {
	if o.Webs == 0 {
		o.Webs = 2
	}
	if o.Failover && o.Workers == 0 {
		o.Workers = 2
	}
	if o.Failover && o.Failovers == 0 {
		o.Failovers = 1
	}
	if o.Workers == 0 {
		o.Workers = 3
	}
	if o.WorkerKillEvery == 0 {
		o.WorkerKillEvery = 3 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = 90 * time.Second
	}
	if o.ProviderDownFor == 0 {
		o.ProviderDownFor = min(o.Duration/4, time.Minute)
	}
	if o.DropRate == 0 {
		o.DropRate = 0.2
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// Run is one chaos run in progress.
type Run struct {
	opts     Options
	pg       *pglocal.Server
	dbURL    string
	fo       *failoverRun // a failover run's formation, history and probe
	pool     *pgxpool.Pool
	webs     []*Proc
	workers  []*Proc
	proxy    *dropProxy
	proxyURL string
	hc       *http.Client
	secrets  map[string]string
	model    *model
	faults   faultCounts
	reader   *ledgerReader
	logMu    sync.Mutex
	// restarts tracks killed processes waiting to be started again: the
	// load's end waits for them, so that a late restart can neither race
	// the settle phase's own start nor outlive the run.
	restarts sync.WaitGroup
	// providers plays Stripe, Paddle and Creem for checkouts.
	providers *fakeapi.Server
	// events plays the platform's consumer of the events billing sends.
	events     *receiver
	configPath string
	// loadEnd (database clock): jobs created before it are the workload's.
	loadEnd time.Time
	// frozenAt (database clock): when the workers had stopped for the checks.
	frozenAt time.Time
}

type faultCounts struct {
	mu                                              sync.Mutex
	workerKills, webKills, pgRestarts, backendKills int
	providerOutages                                 int
}

// harnessAppName marks the harness's own database sessions, which the
// backend-terminating fault leaves alone.
const harnessAppName = "billing-chaos-harness"

// Execute performs a whole run: start, load under faults, settle, check.
func Execute(ctx context.Context, opts Options) (*Report, error) {
	opts.defaults()
	r := &Run{opts: opts, model: newModel(), hc: &http.Client{Timeout: 15 * time.Second},
		secrets: map[string]string{"stripe": "whsec_chaos_" + strconv.FormatInt(opts.Seed, 10), "paddle": "pdl_chaos", "creem": "creem_chaos"}}
	fmt.Fprintf(opts.Out, "chaos: seed %d, %d players, %v of load with faults, settle up to %v\n", opts.Seed, opts.Players, opts.Duration, opts.Settle)
	defer r.shutdown()
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	r.reader = startLedgerReader(ctx, r.pool)
	loadCtx, stopLoad := context.WithTimeout(ctx, opts.Duration)
	defer stopLoad()
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		r.injectFaults(loadCtx)
		if opts.Failover {
			stopLoad()
		}
	}()
	r.runWorkload(loadCtx)
	<-faultsDone
	r.restarts.Wait()
	if err := r.pool.QueryRow(ctx, `SELECT now()`).Scan(&r.loadEnd); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Out, "chaos: load done after %v; settling\n", time.Since(start).Round(time.Second))
	if err := r.ensureAllRunning(ctx); err != nil {
		return nil, err
	}
	if r.fo != nil {
		resolved, left := r.resolve(ctx, opts.Settle)
		fmt.Fprintf(opts.Out, "chaos: %d unknown operations replayed by key, %d still unknown\n", resolved, left)
	}
	settled, left := r.settle(ctx)
	r.reader.stop()
	if err := r.freeze(ctx); err != nil {
		return nil, err
	}
	return r.check(ctx, settled, left)
}

func (r *Run) logf(format string, args ...any) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	f, err := os.OpenFile(filepath.Join(r.opts.Dir, "chaos.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
}

func (r *Run) start(ctx context.Context) error {
	var err error
	if r.opts.Failover {
		err = r.startFormation(ctx)
	} else if r.pg, err = pglocal.Start(pglocal.Options{Dir: filepath.Join(r.opts.Dir, "pg"), Fast: true}); err == nil {
		r.dbURL = r.pg.URL()
	}
	if err != nil {
		return err
	}
	if err := r.startProviders(); err != nil {
		return err
	}
	env := r.env()
	migrate := NewProc("migrate", r.opts.Binary, env, r.logFile("migrate"), "migrate")
	if err := migrate.Start(); err != nil {
		return err
	}
	if err := migrate.Wait(2 * time.Minute); err != nil {
		return fmt.Errorf("e2e: migrate: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(r.dbURL)
	if err != nil {
		return err
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = harnessAppName
	if r.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	if err := r.startReceiver(ctx); err != nil {
		return err
	}
	for i := range r.opts.Webs {
		p := NewProc(fmt.Sprintf("web%d", i+1), r.opts.Binary, env, r.logFile(fmt.Sprintf("web%d", i+1)), "web", "--config", r.configPath)
		if err := listenOnFreePort(p); err != nil {
			return err
		}
		r.webs = append(r.webs, p)
	}
	for i := range r.opts.Workers {
		r.workers = append(r.workers, NewProc(fmt.Sprintf("worker%d", i+1), r.opts.Binary, env, r.logFile(fmt.Sprintf("worker%d", i+1)), "worker", "--config", r.configPath))
	}
	if r.fo != nil {
		if err := r.watchMetrics(append(append([]*Proc{}, r.webs...), r.workers...)); err != nil {
			return err
		}
	}
	for _, p := range append(append([]*Proc{}, r.webs...), r.workers...) {
		if err := p.Start(); err != nil {
			return err
		}
	}
	if err := r.ensureAllRunning(ctx); err != nil {
		return err
	}
	r.proxy = newDropProxy(r.opts.Seed, r.opts.DropRate, r.liveWebAddrs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(ln, r.proxy) }()
	r.proxyURL = "http://" + ln.Addr().String()
	return r.createPlayers(ctx)
}

func (r *Run) env() []string {
	return []string{
		"BILLING_DATABASE_URL=" + r.dbURL,
		"BILLING_ENFORCER_SCHEDULE=@every 2s",
		"BILLING_STRIPE_WEBHOOK_SECRET=" + r.secrets["stripe"],
		"BILLING_PADDLE_WEBHOOK_SECRET=" + r.secrets["paddle"],
		"BILLING_CREEM_WEBHOOK_SECRET=" + r.secrets["creem"],
		"BILLING_SHUTDOWN_TIMEOUT=5s",
		"BILLING_JOB_TIMEOUT=5s",
		"BILLING_RESCUE_STUCK_JOBS_AFTER=10s",
		"BILLING_LOG_FORMAT=json",
		"BILLING_STRIPE_SECRET_KEY=sk_test_chaos", "BILLING_STRIPE_API_URL=" + r.providers.URL,
		"BILLING_PADDLE_API_KEY=pdl_chaos", "BILLING_PADDLE_ENVIRONMENT=" + r.providers.URL,
		"BILLING_CREEM_API_KEY=creem_chaos", "BILLING_CREEM_API_URL=" + r.providers.URL,
		"BILLING_RECONCILE_SCHEDULE=@every 2s",
		// A run on a worker killed mid-listing is rescued only after this.
		"BILLING_RECONCILE_TIMEOUT=10s",
		// Every event delivered within the settle window, retries included
		// (receiver.go).
		"BILLING_EVENTS_TIMEOUT=" + eventsTimeout.String(),
		"BILLING_EVENTS_RETRY_SCHEDULE=" + eventsSchedule,
	}
}

// startProviders starts the provider fake and writes the billing.yaml that
// gives each SKU its Creem product (Creem prices by product), under the
// key Creem's facts declare.
func (r *Run) startProviders() error {
	r.providers = fakeapi.Start(stripefake.Routes, paddlefake.Routes, creemfake.Routes) // providertest.StartFake, without linking testing
	var yaml strings.Builder
	yaml.WriteString("skus:\n")
	for name, sku := range fulfillment.DefaultSKUs() {
		fmt.Fprintf(&yaml, "  %s: {amount: %d, currency: %s, mana: %d, %s: prod_%s}\n",
			name, sku.Amount, sku.Currency, sku.Mana, catalogueKey(provider.Creem), name)
		r.providers.SetProduct("prod_"+name, fakeapi.Product{Price: sku.Amount, Currency: sku.Currency})
	}
	r.configPath = filepath.Join(r.opts.Dir, "billing.yaml")
	return os.WriteFile(r.configPath, []byte(yaml.String()), 0o644)
}

// catalogueKey is the billing.yaml key of an SKU's id in name's
// catalogue, as its driver's facts declare it.
func catalogueKey(name string) string {
	for _, f := range drivers.Facts() {
		if f.Name == name {
			return f.Settings.CatalogueID
		}
	}
	return ""
}

func (r *Run) logFile(name string) io.Writer {
	f, err := os.OpenFile(filepath.Join(r.opts.Dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return io.Discard
	}
	return f // closed when the process exits for good: the run's end
}

func (r *Run) createPlayers(ctx context.Context) error {
	for i := range r.opts.Players {
		p, key, err := players.Create(ctx, r.pool, fmt.Sprintf("chaos-%d", i+1))
		if err != nil {
			return err
		}
		r.model.addPlayer(p.ID, key)
	}
	return nil
}

func (r *Run) runWorkload(ctx context.Context) {
	var wg sync.WaitGroup
	i := uint64(0)
	for _, pm := range r.model.players {
		i++
		pl := r.newPlayer(pm, uint64(r.opts.Seed)*1_000_003+i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			pl.loop(ctx)
		}()
	}
	wg.Wait()
}

// liveWebAddrs lists the web processes that are running now.
func (r *Run) liveWebAddrs() []string {
	var out []string
	for _, w := range r.webs {
		if w.Running() {
			out = append(out, w.Addr())
		}
	}
	return out
}

func (r *Run) ensureAllRunning(ctx context.Context) error {
	for _, p := range append(append([]*Proc{}, r.webs...), r.workers...) {
		if !p.Running() {
			if err := p.Start(); err != nil {
				return err
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, w := range r.webs {
		if err := r.startHealthy(wctx, w); err != nil {
			return err
		}
	}
	return nil
}

// startHealthy waits for web process w to answer /healthz. A free port is
// picked before the process binds it, so another process can take it in
// between: when w exits before it is healthy, it is started again on a new
// port, a few times.
func (r *Run) startHealthy(ctx context.Context, w *Proc) error {
	for attempt := 1; ; attempt++ {
		err := waitHealthy(ctx, r.hc, w)
		if !errors.Is(err, procs.ErrExited) || attempt == 3 {
			return err
		}
		r.logf("%v; starting it again on another port", err)
		if err := listenOnFreePort(w); err != nil {
			return err
		}
		if err := w.Start(); err != nil {
			return err
		}
	}
}

// listenOnFreePort gives web process p a free loopback port.
func listenOnFreePort(p *Proc) error {
	addr, err := procs.FreeAddr()
	if err != nil {
		return err
	}
	p.listenOn(addr)
	return nil
}

func (r *Run) shutdown() {
	for _, p := range append(append([]*Proc{}, r.webs...), r.workers...) {
		if p.Running() {
			if err := p.Stop(15 * time.Second); err != nil {
				r.logf("stop %s: %v", p.Name, err)
			}
		}
	}
	if r.events != nil {
		r.events.close()
	}
	if r.pool != nil {
		r.pool.Close()
	}
	if r.providers != nil {
		r.providers.Close()
	}
	if r.pg != nil {
		if err := r.pg.Stop(); err != nil {
			r.logf("stop postgres: %v", err)
		}
	}
	if r.fo != nil {
		if err := r.fo.f.Stop(); err != nil {
			r.logf("stop formation: %v", err)
		}
	}
}

func decodeJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

// pick returns a random element.
func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }
