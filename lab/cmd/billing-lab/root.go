package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/lab/e2e"
	"github.com/fibe-dev/billing/wallet"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "billing-lab",
		Short: "Measure and attack billing: benchmarks beside their baselines, chaos and failover runs",
		Long: `billing-lab is the lab of billing: it measures the service (bench) and attacks
it as real processes (chaos). It runs the service's own binary for every
process it starts: --billing names it, else it is built from the repository
this command runs in (go build ./cmd/billing).

Configuration is the service's: flags > BILLING_* environment > billing.yaml (--config).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	config.BindFlags(root.PersistentFlags())
	root.PersistentFlags().String("billing", "", "path of the billing binary to run (default: built from the repository for this run)")
	root.AddCommand(newBenchCmd(), newChaosCmd())
	return root
}

// loadConfig loads the service's configuration for cmd.
func loadConfig(cmd *cobra.Command, requireDB bool) (*config.Config, error) {
	return config.Load(cmd.Flags(), config.Options{RequireDatabase: requireDB, Providers: drivers.Facts()})
}

// newLogger logs JSON to w, as the service does off a terminal.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, nil))
}

// newWallet is the wallet store over pool, posting at cfg's rate, as the
// service builds it.
func newWallet(pool *pgxpool.Pool, cfg *config.Config) *wallet.Store {
	return wallet.New(pool, wallet.Options{SparksPerMana: cfg.SparksPerMana,
		Observer: events.LowBalance{Days: cfg.LowBalanceDays}})
}

// skus is the catalogue: billing.yaml's, else the built-in one.
func skus(cfg *config.Config) map[string]fulfillment.SKU {
	if cfg.SKUs == nil {
		return fulfillment.DefaultSKUs()
	}
	out := make(map[string]fulfillment.SKU, len(cfg.SKUs))
	for name, s := range cfg.SKUs {
		out[name] = fulfillment.SKU(s)
	}
	return out
}

// openPool connects to the database, acknowledging through durable like the
// service, and checks it answers.
func openPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database_url: %w", err)
	}
	if maxConns > 0 {
		pcfg.MaxConns = maxConns
	}
	durable.Configure(pcfg, nil)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}

// billingBinary is the --billing flag's binary, else one built into dir
// from the repository that holds the working directory.
func billingBinary(cmd *cobra.Command, dir string) (string, error) {
	if bin, _ := cmd.Flags().GetString("billing"); bin != "" {
		return filepath.Abs(bin)
	}
	root, err := repositoryRoot()
	if err != nil {
		return "", err
	}
	cmd.PrintErrf("billing-lab: building %s/cmd/billing (--billing names a built one)\n", root)
	return e2e.BuildBinary(cmd.Context(), root, dir, false)
}

// repositoryRoot is the nearest directory at or above the working directory
// whose go.mod is the service's module.
func repositoryRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/fibe-dev/billing\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no billing repository above the working directory: pass --billing")
		}
		dir = parent
	}
}
