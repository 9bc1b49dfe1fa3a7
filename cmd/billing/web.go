package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/checkout"
	"github.com/fibe-dev/billing/internal/devcheckout"
	"github.com/fibe-dev/billing/internal/httpapi"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/telemetry"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

func newWebCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "web",
		Short: "Serve the HTTP API, webhook intake, /riverui/ and /healthz (Procfile web)",
		Long: `web serves the public HTTP API, the webhook intake, the River UI (when
BILLING_RIVERUI_USER is set) and /healthz on BILLING_HTTP_ADDR. Prometheus
metrics show business volumes, so they are not on that listener: with
BILLING_METRICS_ADDR set, /metrics (and /healthz again) are served on that
operator address, which only Prometheus should reach.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, true)
			if err != nil {
				return err
			}
			logger := newLogger(cfg, os.Stderr).With("process", "web")
			pool, err := openPool(cmd.Context(), cfg.DatabaseURL, 20)
			if err != nil {
				return err
			}
			defer pool.Close()
			if cfg.MetricsAddr != "" {
				_, stop, err := serveOps(cfg.MetricsAddr, pool, logger)
				if err != nil {
					return err
				}
				defer stop()
			}
			ln, err := net.Listen("tcp", cfg.HTTPAddr)
			if err != nil {
				return fmt.Errorf("http_addr: %w", err)
			}
			return runWeb(cmd.Context(), cfg, newProviders(cfg), pool, ln, logger)
		},
	}
}

// registerStateCollector registers the River job-state gauge once per process.
var registerStateCollector sync.Once

// runWeb serves until ctx is done, then shuts down gracefully.
func runWeb(ctx context.Context, cfg *config.Config, providers *provider.Registry, pool *pgxpool.Pool, ln net.Listener,
	logger *slog.Logger) error {
	client, err := jobs.NewClient(pool, jobs.Options{Logger: logger})
	if err != nil {
		return err
	}
	registerStateCollector.Do(func() {
		prometheus.MustRegister(jobs.NewStateCollector(pool), enforcer.NewUnfundedCollector(pool, nil), wallet.NewDebtCollector(pool))
	})
	opts := httpapi.Options{Pool: pool, River: client, Config: cfg, Providers: providers, Logger: logger}
	if cfg.DevCheckoutURL != "" {
		opts.DevCheckout = devcheckout.Handler(devcheckout.Options{Pool: pool,
			BaseURL: cfg.DevCheckoutURL, Secrets: webhookSecrets(cfg), Logger: logger})
		opts.Checkouts = devCheckouts(cfg, providers, logger)
	}
	srv, err := httpapi.New(opts)
	if err != nil {
		return err
	}
	uiCtx, stopUI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopUI()
	if err := srv.Start(uiCtx); err != nil {
		return err
	}
	httpSrv := &http.Server{
		Handler:           telemetry.HTTPHandler(srv),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(httpapi.ProblemListener(ln)) }()
	logger.Info("web listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	logger.Info("web shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http shutdown: %w", err)
	}
	logger.Info("web stopped")
	return nil
}

// devCheckouts are `billing dev`'s checkouts: a provider without an API key
// gets the simulated hosted checkout page at cfg.DevCheckoutURL.
func devCheckouts(cfg *config.Config, providers *provider.Registry, logger *slog.Logger) *checkout.Service {
	openers := checkout.WithSimulated(provider.Select[checkout.Opener](providers), provider.Names(), cfg.DevCheckoutURL)
	return checkout.NewService(checkout.Options{Openers: openers, SKUs: cfg.SKUs,
		SuccessURL: cfg.CheckoutSuccessURL, CancelURL: cfg.CheckoutCancelURL, Logger: logger})
}
