package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/platform/telemetry"
	"github.com/fibe-dev/billing/internal/web/httpapi"
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
			p, err := startProcess(cmd, "web", 20)
			if err != nil {
				return err
			}
			defer p.close()
			ln, err := net.Listen("tcp", p.cfg.HTTPAddr)
			if err != nil {
				return fmt.Errorf("http_addr: %w", err)
			}
			return runWeb(cmd.Context(), p.app, p.apiOptions(p.logger), ln, p.logger)
		},
	}
}

// registerStateCollector registers the River job-state gauge once per process.
var registerStateCollector sync.Once

// runWeb serves opts (a's, which a dev run adds to) until ctx is done,
// then shuts down gracefully.
func runWeb(ctx context.Context, a *app, opts httpapi.Options, ln net.Listener, logger *slog.Logger) error {
	client, err := jobs.NewClient(a.pool, jobs.Options{Logger: logger})
	if err != nil {
		return err
	}
	registerStateCollector.Do(func() {
		prometheus.MustRegister(jobs.NewStateCollector(a.pool), enforcer.NewUnfundedCollector(a.pool, nil), wallet.NewDebtCollector(a.pool),
			events.NewCollector(a.pool))
	})
	opts.River = client
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
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http shutdown: %w", err)
	}
	logger.Info("web stopped")
	return nil
}
