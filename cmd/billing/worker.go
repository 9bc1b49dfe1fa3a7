package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/internal/web/httpapi"
	"github.com/fibe-dev/billing/jobs"
)

func newWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "worker",
		Short: "Run River workers and the leader-elected periodic enforcer (Procfile worker)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := startProcess(cmd, "worker", 40)
			if err != nil {
				return err
			}
			defer p.close()
			return runWorker(cmd.Context(), p.app, p.logger)
		},
	}
}

// runWorker works a's jobs until ctx is done, then stops River: soft stop
// within the shutdown timeout, then hard stop. The pool outlives the client.
func runWorker(ctx context.Context, a *app, logger *slog.Logger) error {
	workers, periodic := registry(a.jobsDeps(logger))
	client, err := jobs.NewClient(a.pool, jobs.Options{Logger: logger, Workers: workers, PeriodicJobs: periodic,
		JobTimeout: a.cfg.JobTimeout, RescueStuckJobsAfter: a.cfg.RescueAfter})
	if err != nil {
		return err
	}
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	logger.Info("worker started", "periodic_jobs", len(periodic))
	<-ctx.Done()
	logger.Info("worker stopping", "timeout", a.cfg.ShutdownTimeout.String())
	if err := jobs.Stop(context.WithoutCancel(ctx), client, a.cfg.ShutdownTimeout); err != nil {
		return err
	}
	logger.Info("worker stopped")
	return nil
}

// process is what `billing web` and `billing worker` start with: the
// configuration's app, the process's logger and, with metrics_addr set,
// the operator listener. close stops the listener, then closes the pool.
type process struct {
	*app
	logger *slog.Logger
	close  func()
}

// startProcess loads the configuration, connects with at most maxConns
// connections and serves the operator listener for the process name.
func startProcess(cmd *cobra.Command, name string, maxConns int32) (*process, error) {
	cfg, err := loadConfig(cmd, true)
	if err != nil {
		return nil, err
	}
	logger := newLogger(cfg, os.Stderr).With("process", name)
	pool, err := openPool(cmd.Context(), cfg.DatabaseURL, maxConns)
	if err != nil {
		return nil, err
	}
	stopOps := func() {}
	if cfg.MetricsAddr != "" {
		if _, stopOps, err = serveOps(cfg.MetricsAddr, pool, logger); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return &process{app: newApp(cfg, pool), logger: logger, close: func() { stopOps(); pool.Close() }}, nil
}

// serveOps serves /metrics and /healthz on addr, the operator listener
// (BILLING_METRICS_ADDR), for whichever processes run here: each process
// has its own counters (the worker's fundings and fulfilments live only in
// the worker), and the public API listener does not show them. It returns
// the bound address (addr may ask for port 0) and a stop function.
func serveOps(addr string, pool *pgxpool.Pool, logger *slog.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics_addr: %w", err)
	}
	srv := &http.Server{Handler: httpapi.NewOpsHandler(pool, prometheus.DefaultGatherer, logger),
		ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server", "error", err)
		}
	}()
	logger.Info("metrics listening", "addr", ln.Addr().String())
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
