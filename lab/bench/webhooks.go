package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
	"github.com/fibe-dev/billing/jobs"
)

func init() {
	Register(&Benchmark{
		Name:  "webhooks",
		Short: "Signed Stripe deliveries over HTTP (new events and duplicates) beside a pgbench claim+enqueue baseline",
		Flags: func(fs *pflag.FlagSet) {
			fs.Float64("dup-ratio", 0.25, "fraction of deliveries that redeliver an event already sent")
			fs.Int("orders", 64, "orders the completed payments are spread over")
			processesFlag(fs, "web")
		},
		Run: runWebhooks,
	})
}

// dupPool is how many pre-claimed events the baseline's duplicates hit.
const dupPool = 1000

// The baseline: the same claim insert and, for a won claim, the same job
// insert, in one transaction; duplicates only attempt the claim. Raw SQL
// through pgbench, no Go, no HTTP, no signature.
const claimEnqueueScript = `\set r random(1, 100)
\set n random(1, 1000000000000)
\if :r <= :dup_pct
\set d random(1, :dup_pool)
BEGIN;
INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount, paid_currency, payload, claimed_at)
  VALUES ('pgbench', 'evt_dup_' || :d::bigint, 'checkout.session.completed', :order_id::bigint, 999, 'usd',
    convert_to(:payload::text, 'UTF8'), now())
  ON CONFLICT (provider, event_id) DO NOTHING RETURNING id;
COMMIT;
\else
BEGIN;
INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount, paid_currency, payload, claimed_at)
  VALUES ('pgbench', 'evt_' || :run::text || '_' || :client_id::int || '_' || :n::bigint, 'checkout.session.completed',
    :order_id::bigint, 999, 'usd', convert_to(:payload::text, 'UTF8'), now())
  ON CONFLICT (provider, event_id) DO NOTHING RETURNING id;
INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags)
  VALUES (jsonb_build_object('order_id', :order_id::bigint,
    'event_id', 'evt_' || :run::text || '_' || :client_id::int || '_' || :n::bigint,
    'provider', 'pgbench', 'paid_amount', 999, 'paid_currency', 'usd'),
    'fulfill_order', 25, 1, 'fulfillment', 'available', now(), '{}') RETURNING id;
COMMIT;
\endif
`

func runWebhooks(ctx context.Context, env Env, fs *pflag.FlagSet) (*Report, error) {
	dupRatio, _ := fs.GetFloat64("dup-ratio")
	nOrders, _ := fs.GetInt("orders")
	if dupRatio < 0 || dupRatio > 1 || nOrders < 1 {
		return nil, errors.New("--dup-ratio must be within 0..1 and --orders at least 1")
	}
	plan, err := processCounts(fs)
	if err != nil {
		return nil, err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	secret := "whsec_bench_" + run
	if len(env.StripeSecrets) > 0 {
		secret = env.StripeSecrets[0]
	}
	orders, err := benchOrders(ctx, env, nOrders)
	if err != nil {
		return nil, err
	}
	sample := providerevents.CompletedEvent(provider.Stripe, "evt_sample_"+run, orders[0].ID, orders[0].Amount, orders[0].Currency)
	if err := seedDupEvents(ctx, env, orders[0].ID, sample); err != nil {
		return nil, err
	}

	dupPct := int(dupRatio * 100)
	vars := map[string]string{"dup_pct": strconv.Itoa(dupPct), "order_id": strconv.FormatInt(orders[0].ID, 10),
		"payload": string(sample), "run": run, "dup_pool": strconv.Itoa(dupPool)}
	baseline := func(when string) (*Report, error) {
		env.Progressf("baseline %s: pgbench claim + job insert in one transaction, %d%% duplicates, %d clients, %s",
			when, dupPct, env.Clients, env.Duration)
		vars["run"] = run + when
		return PgBench(ctx, "pgbench_claim_enqueue", env.DatabaseURL, claimEnqueueScript, env.Clients, env.Duration, vars)
	}
	before, err := baseline("before")
	if err != nil {
		return nil, err
	}
	if plan != nil {
		return webhooksProcesses(ctx, env, plan, secret, run, orders, dupRatio, func() (*Report, error) {
			after, err := baseline("after")
			if err != nil {
				return nil, err
			}
			return meanReport(before, after), nil
		})
	}

	url, stop, err := serveWebhooks(ctx, env, secret)
	if err != nil {
		return nil, err
	}
	defer stop()
	d := &deliverer{urls: []string{url + "/webhooks/stripe"}, secret: secret, run: run, orders: orders, dupRatio: dupRatio,
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: env.Clients * 2, MaxIdleConnsPerHost: env.Clients * 2}},
		sent: make([][][]byte, env.Clients)}
	env.Progressf("warm-up: 1s of deliveries")
	Load(ctx, "warmup", env.Clients, time.Second, d.op)
	d.claimed.Store(0)
	d.duplicates.Store(0)
	env.Progressf("webhooks: signed Stripe deliveries over HTTP, %d clients, %s", env.Clients, env.Duration)
	r := Load(ctx, "webhooks", env.Clients, env.Duration, d.op)
	after, err := baseline("after")
	if err != nil {
		return nil, err
	}
	// The baseline runs before and after the measured run and counts as
	// their mean, so drift in the machine's load (others compile here)
	// biases neither side.
	r.AddBaseline("pgbench_claim_enqueue", meanReport(before, after))
	r.Note("baseline_before_ops_per_sec", before.OpsPerSec)
	r.Note("baseline_after_ops_per_sec", after.OpsPerSec)
	r.Note("dup_ratio", dupRatio)
	r.Note("claimed", d.claimed.Load())
	r.Note("duplicates", d.duplicates.Load())
	r.Note("latency", "closed loop over a real loopback HTTP listener; each op is sign + POST + claim (+ InsertTx)")
	return r, nil
}

// benchOrders makes a player and n pending orders of the first SKU.
func benchOrders(ctx context.Context, env Env, n int) ([]*fulfillment.Order, error) {
	p, _, err := players.Create(ctx, env.Pool, "bench-webhooks")
	if err != nil {
		return nil, err
	}
	skus := env.SKUs
	if len(skus) == 0 {
		skus = fulfillment.DefaultSKUs()
	}
	var name string
	for k := range skus {
		if name == "" || k < name {
			name = k
		}
	}
	out := make([]*fulfillment.Order, 0, n)
	for range n {
		o, err := fulfillment.CreateCheckout(ctx, env.Pool, skus, fulfillment.CheckoutParams{
			PlayerID: p.ID, SKU: name, Provider: provider.Stripe})
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// seedDupEvents pre-claims the events the baseline's duplicates hit.
func seedDupEvents(ctx context.Context, env Env, orderID int64, payload []byte) error {
	_, err := env.Pool.Exec(ctx, `INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount,
		paid_currency, payload) SELECT 'pgbench', 'evt_dup_' || g, 'checkout.session.completed', $1, 999, 'usd', $2
		FROM generate_series(1, $3::int) g ON CONFLICT DO NOTHING`, orderID, payload, dupPool)
	if err != nil {
		return fmt.Errorf("bench: seed duplicate events: %w", err)
	}
	return nil
}

// serveWebhooks serves the real intake handler on a loopback listener.
func serveWebhooks(ctx context.Context, env Env, secret string) (string, func(), error) {
	client, err := jobs.NewClient(env.Pool, jobs.Options{Logger: env.Logger})
	if err != nil {
		return "", nil, err
	}
	h := webhook.NewHandler(webhook.Options{Pool: env.Pool, River: client, Logger: env.Logger,
		Providers: provider.Select[webhook.Intake](drivers.New(map[string]provider.Options{
			provider.Stripe: {WebhookSecrets: []string{secret}}}))})
	return serveLoopback(ctx, h)
}

// serveLoopback serves h on a fresh loopback port until stop is called.
func serveLoopback(ctx context.Context, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// deliverer is the provider side: it signs and POSTs completed payments,
// redelivering an event it already sent with probability dupRatio.
type deliverer struct {
	urls        []string // client i delivers to urls[i % len]
	secret, run string
	orders      []*fulfillment.Order
	dupRatio    float64
	http        *http.Client
	sent        [][][]byte   // per client, bodies already delivered (a ring)
	next        atomic.Int64 // numbers new events across runs (warm-up, measured)
	claimed     atomic.Int64
	duplicates  atomic.Int64
}

const sentRing = 256

func (d *deliverer) op(ctx context.Context, client int, _ int64) error {
	n := d.next.Add(1)
	rng := rand.New(rand.NewPCG(uint64(n), uint64(client)))
	var body []byte
	if sent := d.sent[client]; len(sent) > 0 && rng.Float64() < d.dupRatio {
		body = sent[rng.IntN(len(sent))] // a redelivery: same event, signed afresh
	} else {
		o := d.orders[int(n)%len(d.orders)]
		body = providerevents.CompletedEvent(provider.Stripe, fmt.Sprintf("evt_%s_%d", d.run, n),
			o.ID, o.Amount, o.Currency)
		if len(d.sent[client]) < sentRing {
			d.sent[client] = append(d.sent[client], body)
		} else {
			d.sent[client][n%sentRing] = body
		}
	}
	name, value := stripeevents.Sign(d.secret, body, time.Now())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.urls[client%len(d.urls)], bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(name, value)
	res, err := d.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: delivery answered %d: %s", res.StatusCode, raw)
	}
	var ans struct{ Status string }
	if err := json.Unmarshal(raw, &ans); err != nil {
		return err
	}
	switch ans.Status {
	case webhook.OutcomeClaimed:
		d.claimed.Add(1)
	case webhook.OutcomeDuplicate:
		d.duplicates.Add(1)
	}
	return nil
}

// meanReport averages two runs of the same baseline.
func meanReport(a, b *Report) *Report {
	m := *a
	m.Seconds = a.Seconds + b.Seconds
	m.Ops = a.Ops + b.Ops
	m.OpsPerSec = round((a.OpsPerSec + b.OpsPerSec) / 2)
	m.P50ms = round((a.P50ms + b.P50ms) / 2)
	m.Errors = a.Errors + b.Errors
	m.Notes = map[string]any{"latency": "pgbench mean, reported as p50; mean of a run before and one after"}
	return &m
}
