package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/riverqueue/river"
	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/jobs"
)

func init() {
	Register(&Benchmark{
		Name: "timeline",
		Short: "billing explain's timelines (order, PaymentIntent, player) on an empty and then a large ledger " +
			"(10M transactions seeded by SQL), over histories made by the real intake and workers",
		Flags: func(fs *pflag.FlagSet) {
			fs.Int64("transactions", 10_000_000, "wallet transactions to grow the ledger to (seeded by SQL, as bench growth does)")
			fs.Int("players", 100_000, "players whose Sparks wallets hold the seeded transactions")
			fs.Int("histories", 25, "histories of each kind (double charge, partial refunds, chargeback lost then won, debt) to explain")
			fs.Int("orders", 5_000, "other paid orders (one refund each fifth) delivered through the intake, so events, payments and jobs are not empty")
		},
		Run: runTimeline,
	})
}

// timelineBench is one invocation's histories and the processes working
// them.
type timelineBench struct {
	env      Env
	intake   http.Handler
	client   *jobs.Client
	orders   []int64  // the histories' orders
	intents  []string // the second PaymentIntent of each double charge
	subjects []int64  // the histories' players
	seq      int
}

// timelineStep is what one ledger size measured.
type timelineStep struct {
	Transactions int64   `json:"transactions"`
	Order        *Report `json:"order"`
	Payment      *Report `json:"payment"`
	Player       *Report `json:"player"`
	Whale        *Report `json:"whale_player,omitempty"`
	LoadAverage  string  `json:"load_average"`
}

func runTimeline(ctx context.Context, env Env, fs *pflag.FlagSet) (*Report, error) {
	size, _ := fs.GetInt64("transactions")
	nPlayers, _ := fs.GetInt("players")
	histories, _ := fs.GetInt("histories")
	background, _ := fs.GetInt("orders")
	if size <= 0 || nPlayers <= 0 || histories <= 0 || background < 0 {
		return nil, errors.New("--transactions, --players and --histories must be positive, --orders not negative")
	}
	tb, stop, err := startTimelineBench(ctx, env)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := tb.seed(ctx, histories, background); err != nil {
		return nil, err
	}
	empty, err := tb.measure(ctx, 0)
	if err != nil {
		return nil, err
	}
	g := &growth{env: env, run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	if err := g.seedPlayers(ctx, nPlayers); err != nil {
		return nil, err
	}
	if err := g.grow(ctx, size, 0.01); err != nil {
		return nil, err
	}
	large, err := tb.measure(ctx, g.whale)
	if err != nil {
		return nil, err
	}
	for _, r := range []*Report{empty.Order, empty.Payment, empty.Player, large.Order, large.Payment, large.Player, large.Whale} {
		if r.Errors > 0 {
			return nil, fmt.Errorf("bench timeline: %d of %d %s timelines failed", r.Errors, r.Ops+r.Errors, r.Name)
		}
	}
	return timelineReport(empty, large), nil
}

func timelineReport(empty, large *timelineStep) *Report {
	report := *large.Order
	report.Name = "timeline"
	report.AddBaseline("order_empty", empty.Order)
	report.AddBaseline("payment_empty", empty.Payment)
	report.AddBaseline("player_empty", empty.Player)
	report.Note("steps", []*timelineStep{empty, large})
	report.Note("goal", "every timeline p99 < 100 ms on the large ledger")
	return &report
}

// startTimelineBench starts a River client working the fulfilment queue
// with the real workers (no refund API: unapplied payments stay
// unapplied) and the real webhook intake over it.
func startTimelineBench(ctx context.Context, env Env) (*timelineBench, func(), error) {
	// No refunders: nothing is refunded through a real provider.
	workers := river.NewWorkers()
	fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: env.Pool, Wallet: env.Wallet, Logger: env.Logger})
	client, err := jobs.NewClient(env.Pool, jobs.Options{Logger: env.Logger, Workers: workers,
		Queues: map[string]river.QueueConfig{jobs.QueueFulfillment: {MaxWorkers: 20}}, FetchPollInterval: 100 * time.Millisecond})
	if err != nil {
		return nil, nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, nil, err
	}
	opts := map[string]provider.Options{}
	for name, s := range benchSecrets {
		opts[name] = provider.Options{WebhookSecrets: s}
	}
	tb := &timelineBench{env: env, client: client, intake: webhook.NewHandler(webhook.Options{Pool: env.Pool, River: client,
		Providers: provider.Select[webhook.Intake](drivers.New(opts)), Logger: env.Logger})}
	return tb, func() { _ = jobs.Stop(context.WithoutCancel(ctx), client, 10*time.Second) }, nil
}

var benchSecrets = map[string][]string{"stripe": {"whsec_bench"}, "paddle": {"pdl_bench"}, "creem": {"whsec_bench_creem"}}

// deliver hands a signed event to the intake, as a provider's POST.
func (tb *timelineBench) deliver(provider string, body []byte) error {
	if body == nil {
		return fmt.Errorf("bench timeline: no %s event", provider)
	}
	h, v, err := providerevents.Sign(provider, benchSecrets[provider][0], body, time.Now())
	if err != nil {
		return err
	}
	req := httptest.NewRequest(http.MethodPost, "/webhooks/"+provider, bytes.NewReader(body))
	req.SetPathValue("provider", provider)
	req.Header.Set(h, v)
	rec := httptest.NewRecorder()
	tb.intake.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return fmt.Errorf("bench timeline: intake answered %d: %s", rec.Code, rec.Body.String())
	}
	return nil
}

// settle waits until every fulfilment job is finalized.
func (tb *timelineBench) settle(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var open int
		if err := tb.env.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1 AND finalized_at IS NULL`,
			jobs.QueueFulfillment).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench timeline: %d fulfilment jobs still open", open)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// order opens a mana_1000 order of a new player through provider.
func (tb *timelineBench) order(ctx context.Context, provider string) (*fulfillment.Order, error) {
	tb.seq++
	p, _, err := players.Create(ctx, tb.env.Pool, fmt.Sprintf("timeline-bench-%d", tb.seq))
	if err != nil {
		return nil, err
	}
	skus := tb.env.SKUs
	if len(skus) == 0 {
		skus = fulfillment.DefaultSKUs()
	}
	return fulfillment.CreateCheckout(ctx, tb.env.Pool, skus, fulfillment.CheckoutParams{PlayerID: p.ID,
		SKU: "mana_1000", Provider: provider})
}

// seed makes n histories of each kind and background paid orders, and
// waits for their jobs.
func (tb *timelineBench) seed(ctx context.Context, n, background int) error {
	start := time.Now()
	for i := range n {
		for _, kind := range []func(context.Context, int) error{tb.doubleCharge, tb.partialRefunds, tb.chargeback, tb.debt} {
			if err := kind(ctx, i); err != nil {
				return err
			}
		}
	}
	if err := tb.background(ctx, background); err != nil {
		return err
	}
	var undecided int
	if err := tb.env.Pool.QueryRow(ctx, `SELECT count(*) FROM reversal_events WHERE status <> 'accepted'`).Scan(&undecided); err != nil {
		return err
	}
	if undecided > 0 {
		return fmt.Errorf("bench timeline: %d refund or dispute events were not accepted: the histories are not what they should be", undecided)
	}
	if _, err := tb.env.Pool.Exec(ctx, `ANALYZE`); err != nil {
		return err
	}
	tb.env.Progressf("timeline: %d histories and %d other orders in %s", 4*n, background, time.Since(start).Round(time.Second))
	return nil
}
