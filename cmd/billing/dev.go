package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/pglocal"
	"github.com/fibe-dev/billing/migrations"
)

func newDevCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything locally: an embedded PostgreSQL, migrations, a demo player, web + worker in one process",
		Long: `dev starts a private PostgreSQL from this machine's binaries (data kept under
--dir across restarts), migrates it, seeds a demo player, and runs the web
server and the worker in one process. Ctrl-C stops everything cleanly.
Set BILLING_DATABASE_URL to use an existing server instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), cmd, dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".billing-dev", "where the embedded PostgreSQL keeps its data")
	cmd.AddCommand(newDevSendWebhookCmd())
	return cmd
}

func runDev(ctx context.Context, cmd *cobra.Command, dir string) error {
	cfg, err := loadConfig(cmd, false)
	if err != nil {
		return err
	}
	base := newLogger(cfg, os.Stderr)
	logger := base.With("process", "dev")
	out := cmd.OutOrStdout()
	if cfg.DatabaseURL == "" {
		srv, err := startDevPostgres(dir)
		if err != nil {
			return err
		}
		defer func() {
			if err := srv.Stop(); err != nil {
				logger.Error("stop postgres", "error", err)
				return
			}
			logger.Info("postgres stopped")
		}()
		cfg.DatabaseURL = srv.URL()
	}
	if cfg.RiverUIUser == "" {
		// The dev UI is always mounted, behind credentials made for this run.
		cfg.RiverUIUser, cfg.RiverUIPassword = "admin", randomHex(12)
	}
	pool, err := openPool(ctx, cfg.DatabaseURL, 40)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	metricsAddr, stopOps, err := serveOps(devMetricsAddr(cfg), pool, base.With("process", "dev"))
	if err != nil {
		return err
	}
	defer stopOps()
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http_addr: %w", err)
	}
	seed, err := seedDemo(ctx, pool, cfg, dir, ln.Addr().String())
	if err != nil {
		ln.Close()
		return err
	}
	// Providers without an API key get the simulated checkout page.
	cfg.DevCheckoutURL = "http://" + strings.Replace(ln.Addr().String(), "[::]", "localhost", 1)
	printDevBanner(out, cfg, ln.Addr().String(), metricsAddr, seed)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return runWeb(gctx, cfg, pool, ln, base.With("process", "web")) })
	g.Go(func() error { return runWorker(gctx, cfg, pool, base.With("process", "worker")) })
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func startDevPostgres(dir string) (*pglocal.Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	srv, err := pglocal.Start(pglocal.Options{Dir: dir, Log: logFile})
	if err != nil {
		logFile.Close()
		if errors.Is(err, pglocal.ErrNoBinaries) {
			return nil, err
		}
		return nil, fmt.Errorf("%w (log: %s)", err, filepath.Join(dir, "postgres.log"))
	}
	return srv, nil
}

// devMetricsAddr is where dev serves /metrics: BILLING_METRICS_ADDR, or a
// free loopback port (printed in the banner) so two dev runs never clash.
func devMetricsAddr(cfg *config.Config) string {
	if cfg.MetricsAddr != "" {
		return cfg.MetricsAddr
	}
	return "127.0.0.1:0"
}

func printDevBanner(w io.Writer, cfg *config.Config, addr, metricsAddr string, seed *demoSeed) {
	base := "http://" + strings.Replace(addr, "[::]", "localhost", 1)
	metrics := "http://" + strings.Replace(metricsAddr, "[::]", "localhost", 1)
	fmt.Fprintf(w, `
billing dev is running.
  API        %[1]s/v1/
  River UI   %[1]s/riverui/   (user %[2]s, password %[3]s)
  Metrics    %[5]s/metrics
  Health     %[1]s/healthz
  Database   %[4]s
`, base, cfg.RiverUIUser, cfg.RiverUIPassword, redactURL(cfg.DatabaseURL), metrics)
	if cfg.DevCheckoutURL != "" {
		fmt.Fprintf(w, `Buy in a browser: POST /v1/checkouts answers a checkout_url; for a provider
without an API key it is a simulated page here (%s/dev/checkout/<order>)
whose Pay button sends the provider's signed webhook to this server.
`, cfg.DevCheckoutURL)
	}
	seed.print(w, base)
	fmt.Fprintln(w, "\nCtrl-C stops everything.")
}

func redactURL(u string) string {
	if i, j := strings.Index(u, "://"), strings.LastIndex(u, "@"); i >= 0 && j > i {
		if k := strings.Index(u[i+3:j], ":"); k >= 0 {
			return u[:i+3+k+1] + "***" + u[j:]
		}
	}
	return u
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}
