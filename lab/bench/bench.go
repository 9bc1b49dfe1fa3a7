// Package bench holds the load generators behind `billing-lab bench <name>` and
// the side-by-side baselines (pgbench running equivalent raw SQL, River
// working a no-op job) they are compared against in the same invocation.
// Absolute numbers on a shared 2-core machine are noise; the ratios are not.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/wallet"
)

// Env is what a benchmark gets from the command line (cmd/billing builds
// it from the configuration).
type Env struct {
	Pool        *pgxpool.Pool
	DatabaseURL string
	// Wallet is the program's wallet store (over Pool), which every
	// benchmark posts through; SparksPerMana is the rate it converts at.
	// WalletOn is the same store over another pool, for a benchmark that
	// starts databases of its own (OwnDatabases: Pool and Wallet are nil).
	Wallet        *wallet.Store
	SparksPerMana int64
	WalletOn      func(*pgxpool.Pool) *wallet.Store
	// TZ is the service-day time zone (required).
	TZ *time.Location
	// SKUs is the catalogue orders are made from; nil is the built-in one.
	SKUs map[string]fulfillment.SKU
	// StripeSecrets are the Stripe webhook secrets; the webhooks benchmark
	// signs with the first (none: one made for the run).
	StripeSecrets []string
	Clients       int
	Duration      time.Duration
	Logger        *slog.Logger
	// Progress receives human-readable progress lines (stderr).
	Progress io.Writer
	// Billing is the path of the billing binary (cmd/billing) that the
	// benchmarks starting processes run as workers, web servers and the
	// audit; the lab never links the service's command.
	Billing string
}

// Report is the one JSON object a benchmark prints. The top-level numbers
// describe the system under test; Baselines hold the comparison runs and
// Ratios the system's rate divided by each baseline's.
type Report struct {
	Name      string             `json:"name"`
	Clients   int                `json:"clients"`
	Seconds   float64            `json:"seconds"`
	Ops       int64              `json:"ops"`
	OpsPerSec float64            `json:"ops_per_sec"`
	P50ms     float64            `json:"p50_ms"`
	P99ms     float64            `json:"p99_ms"`
	Errors    int64              `json:"errors"`
	Baselines map[string]*Report `json:"baselines,omitempty"`
	Ratios    map[string]float64 `json:"ratios,omitempty"`
	Notes     map[string]any     `json:"notes,omitempty"`
}

// AddBaseline records b and the ratio r.OpsPerSec / b.OpsPerSec under name.
func (r *Report) AddBaseline(name string, b *Report) {
	if r.Baselines == nil {
		r.Baselines, r.Ratios = map[string]*Report{}, map[string]float64{}
	}
	r.Baselines[name] = b
	if b.OpsPerSec > 0 {
		r.Ratios[name] = math.Round(r.OpsPerSec/b.OpsPerSec*100) / 100
	}
}

// Note attaches an extra fact (sizes, sweep times) to the report.
func (r *Report) Note(key string, v any) {
	if r.Notes == nil {
		r.Notes = map[string]any{}
	}
	r.Notes[key] = v
}

// Benchmark is one `billing-lab bench <name>`.
type Benchmark struct {
	Name  string
	Short string
	// Flags declares the benchmark's own flags; Run reads them from fs.
	Flags func(fs *pflag.FlagSet)
	// OwnDatabases: the benchmark starts the databases it compares and
	// needs no BILLING_DATABASE_URL (Env.Pool is nil).
	OwnDatabases bool
	Run          func(ctx context.Context, env Env, fs *pflag.FlagSet) (*Report, error)
}

var (
	registryMu sync.Mutex
	registry   = map[string]*Benchmark{}
)

// Register adds b; call it from an init function of this package.
func Register(b *Benchmark) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[b.Name]; dup {
		panic("bench: duplicate benchmark " + b.Name)
	}
	registry[b.Name] = b
}

// All returns the registered benchmarks by name.
func All() []*Benchmark {
	registryMu.Lock()
	defer registryMu.Unlock()
	out := make([]*Benchmark, 0, len(registry))
	for _, b := range registry {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Op is one operation of a closed-loop load: client is 0..clients-1, seq
// counts that client's operations from 0.
type Op func(ctx context.Context, client int, seq int64) error

// Load runs op from clients goroutines for d (closed loop: each client
// starts its next op when the previous one returns) and measures it. Each
// client's first op runs to its end whatever d, so a load whose ops are
// slower than d (a busy machine, a short test run) still measures one op
// per client instead of none.
func Load(ctx context.Context, name string, clients int, d time.Duration, op Op) *Report {
	first := ctx
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var errs atomic.Int64
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(0); seq == 0 || ctx.Err() == nil; seq++ {
				opCtx := ctx
				if seq == 0 {
					opCtx = first
				}
				t0 := time.Now()
				err := op(opCtx, c, seq)
				if opCtx.Err() != nil {
					return // cut off by the deadline: neither a success nor an error
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	return Summarize(name, clients, time.Since(start), lat, errs.Load())
}

// Summarize builds a report from per-client latencies.
func Summarize(name string, clients int, elapsed time.Duration, lat [][]time.Duration, errs int64) *Report {
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := &Report{Name: name, Clients: clients, Seconds: round(elapsed.Seconds()), Ops: int64(len(all)), Errors: errs}
	if elapsed > 0 {
		r.OpsPerSec = round(float64(len(all)) / elapsed.Seconds())
	}
	r.P50ms = round(ms(percentile(all, 0.50)))
	r.P99ms = round(ms(percentile(all, 0.99)))
	return r
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(f float64) float64 { return math.Round(f*100) / 100 }

// Progressf writes a progress line when env has somewhere to write it.
func (e Env) Progressf(format string, args ...any) {
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, format+"\n", args...)
	}
}
