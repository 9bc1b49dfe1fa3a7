package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/lab/bench"
	"github.com/fibe-dev/billing/wallet"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench <name>",
		Short: "Run a load generator (lab/bench) against BILLING_DATABASE_URL, beside its baseline",
		Long: `bench runs one load generator against the database in BILLING_DATABASE_URL and,
in the same invocation, the baseline it is judged against (pgbench on the
equivalent raw SQL, or River working a no-op job). It prints one JSON object
with ops_per_sec, p50_ms, p99_ms, errors, the baselines and the ratios.
Benchmarks create their own players and rows; run them on a scratch database.`,
	}
	for _, b := range bench.All() {
		cmd.AddCommand(newOneBenchCmd(b))
	}
	return cmd
}

func newOneBenchCmd(b *bench.Benchmark) *cobra.Command {
	var clients int
	var duration time.Duration
	var asJSON bool
	var cpuProfile string
	c := &cobra.Command{
		Use:   b.Name,
		Short: b.Short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, !b.OwnDatabases)
			if err != nil {
				return err
			}
			logger := newLogger(os.Stderr)
			dir, err := os.MkdirTemp("", "billing-lab-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			bin, err := billingBinary(cmd, dir)
			if err != nil {
				return err
			}
			env := bench.Env{Billing: bin, DatabaseURL: cfg.DatabaseURL, SparksPerMana: cfg.SparksPerMana,
				WalletOn: func(pool *pgxpool.Pool) *wallet.Store { return newWallet(pool, cfg) }, TZ: cfg.ServiceDayTZ,
				SKUs: skus(cfg), StripeSecrets: cfg.Providers[provider.Stripe].WebhookSecrets, Clients: clients, Duration: duration, Logger: logger,
				Progress: os.Stderr}
			if !b.OwnDatabases {
				pool, err := openPool(cmd.Context(), cfg.DatabaseURL, int32(clients*2+10))
				if err != nil {
					return err
				}
				defer pool.Close()
				env.Pool, env.Wallet = pool, env.WalletOn(pool)
			}
			stop, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			report, err := b.Run(cmd.Context(), env, cmd.Flags())
			stop()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				return enc.Encode(report)
			}
			b, _ := json.MarshalIndent(report, "", "  ")
			fmt.Fprintln(out, string(b))
			return nil
		},
	}
	c.Flags().IntVar(&clients, "clients", 8, "concurrent clients")
	c.Flags().DurationVar(&duration, "duration", 10*time.Second, "how long each measured run lasts")
	c.Flags().BoolVar(&asJSON, "json", false, "print one compact JSON object")
	c.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of this process (load generator and in-process servers) to this file, for go tool pprof")
	if b.Flags != nil {
		b.Flags(c.Flags())
	}
	return c
}

// startCPUProfile profiles this process into path until the returned stop
// is called; with an empty path it does nothing. Where the Go side of a
// bench spends its CPU is what decides which round trip or encoding to cut.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
