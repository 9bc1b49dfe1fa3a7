package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/telemetry"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "billing",
		Short: "Moves money exactly once: wallets, daily Marquee funding, provider webhooks, an idempotent API",
		Long: `billing runs durable River jobs on PostgreSQL: a cron-driven enforcer funds every
Marquee once per service day, webhook intake claims each provider event once,
and an idempotent wallet with a double-entry ledger backs every credit and debit.

Configuration: flags > BILLING_* environment > billing.yaml (--config).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	config.BindFlags(root.PersistentFlags())
	root.AddCommand(
		newMigrateCmd(),
		newWebCmd(),
		newWorkerCmd(),
		newDevCmd(),
		newLedgerCmd(),
		newEnforceCmd(),
		newPlayersCmd(),
		newReconcileCmd(),
		newPaymentsCmd(),
		newDebtsCmd(),
		newWalletCmd(),
		newExplainCmd(),
		newWebhooksCmd(),
		newEndpointsCmd(),
		newEventsCmd(),
	)
	plainBoolUsage(root)
	return root
}

// loadConfig loads the configuration for cmd; requireDB makes a missing
// database URL an error.
func loadConfig(cmd *cobra.Command, requireDB bool) (*config.Config, error) {
	return load(cmd.Flags(), config.Options{RequireDatabase: requireDB})
}

// newLogger logs JSON when stderr is not a terminal (production, CI), text
// on a terminal, unless log_format says otherwise. Both are safe for what
// a provider chose: JSON escapes control characters, and slog's text
// handler quotes any value holding one (internal/platform/telemetry's tests hold it
// to that).
func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	format := cfg.LogFormat
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	h := telemetry.LogHandler(slog.NewJSONHandler(w, nil))
	if format == "text" {
		h = telemetry.LogHandler(slog.NewTextHandler(w, nil))
	}
	// The database's own events (internal/platform/durable) log through the default.
	slog.SetDefault(slog.New(h))
	return slog.New(h)
}

// openPool connects to the database and checks it answers.
func openPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database_url: %w", err)
	}
	if maxConns > 0 {
		pcfg.MaxConns = maxConns
	}
	pcfg.ConnConfig.Tracer = telemetry.QueryTracer()
	durable.Configure(pcfg, nil)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		// pgx's error names the user, database and address already.
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}
