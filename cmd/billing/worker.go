package main

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"log/slog"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/jobs"
)

func newWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "worker",
		Short: "Run River workers and the leader-elected periodic enforcer (Procfile worker)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, true)
			if err != nil {
				return err
			}
			logger := newLogger(cfg, os.Stderr).With("process", "worker")
			pool, err := openPool(cmd.Context(), cfg.DatabaseURL, 40)
			if err != nil {
				return err
			}
			defer pool.Close()
			return runWorker(cmd.Context(), cfg, pool, logger)
		},
	}
}

// runWorker works jobs until ctx is done, then stops River: soft stop
// within the shutdown timeout, then hard stop. The pool outlives the client.
func runWorker(ctx context.Context, cfg *config.Config, pool *pgxpool.Pool, logger *slog.Logger) error {
	workers, periodic, err := jobs.Registry(jobs.Deps{Pool: pool, Config: cfg, Logger: logger})
	if err != nil {
		return err
	}
	client, err := jobs.NewClient(pool, jobs.Options{Logger: logger, Workers: workers, PeriodicJobs: periodic,
		JobTimeout: cfg.JobTimeout, RescueStuckJobsAfter: cfg.RescueAfter})
	if err != nil {
		return err
	}
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	logger.Info("worker started", "periodic_jobs", len(periodic))
	<-ctx.Done()
	logger.Info("worker stopping", "timeout", cfg.ShutdownTimeout.String())
	if err := jobs.Stop(context.WithoutCancel(ctx), client, cfg.ShutdownTimeout); err != nil {
		return err
	}
	logger.Info("worker stopped")
	return nil
}
