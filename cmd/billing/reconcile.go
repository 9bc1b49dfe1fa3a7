package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/internal/payments/reconcile"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/jobs"
)

type reconcileOptions struct {
	provider string
	since    time.Duration
	dryRun   bool
	asJSON   bool
}

func newReconcileCmd() *cobra.Command {
	var o reconcileOptions
	cmd := &cobra.Command{
		Use:   "reconcile --provider stripe|paddle [--since 72h] [--dry-run] [--json]",
		Short: "Recover payments whose webhook never arrived, from the provider's event list",
		Long: `reconcile lists the provider's payment events of the last --since through its
API (Stripe: the Events API, filtered to the checkout completion types;
Paddle: its events API) and claims each one not yet recorded exactly as its
webhook would have, so its order is fulfilled once, whichever arrives first.
Creem offers no event listing and cannot be reconciled.

The worker does the same on its own (leader only) on reconcile_schedule
(BILLING_RECONCILE_SCHEDULE, default hourly) over the last 72h.

Prints seen, already_claimed and recovered; --dry-run claims nothing and
counts what would be recovered. Needs the provider's API key
(BILLING_STRIPE_SECRET_KEY, BILLING_PADDLE_API_KEY). Exit 0 when the run
completed, 1 on error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runReconcile(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.provider, "provider", "", "stripe or paddle (required)")
	f.DurationVar(&o.since, "since", reconcile.DefaultWindow, "how far back to list events")
	f.BoolVar(&o.dryRun, "dry-run", false, "claim nothing; count what would be recovered")
	f.BoolVar(&o.asJSON, "json", false, "print the summary as one JSON object")
	_ = cmd.MarkFlagRequired("provider")
	return cmd
}

func runReconcile(cmd *cobra.Command, o reconcileOptions) error {
	if err := knownProvider("reconcile", o.provider); err != nil {
		return err
	}
	if o.since <= 0 {
		return errors.New("reconcile: --since wants a positive duration such as 72h")
	}
	cfg, err := loadConfig(cmd, true)
	if err != nil {
		return err
	}
	listers := provider.Select[reconcile.Lister](newProviders(cfg))
	if _, err := reconcile.ListerFor(listers, o.provider); err != nil {
		return err
	}
	ctx := cmd.Context()
	pool, err := openPool(ctx, cfg.DatabaseURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := jobs.NewClient(pool, jobs.Options{Logger: newLogger(cfg, os.Stderr)})
	if err != nil {
		return err
	}
	progress := progressTo(os.Stderr)
	rec := reconcile.New(reconcile.Options{Pool: pool, Listers: listers,
		Logger: newLogger(cfg, os.Stderr), Progress: func(s reconcile.Summary) { progress.show("events", int64(s.Seen), 0) }})
	sum, err := rec.Run(ctx, client, o.provider, time.Now().Add(-o.since), o.dryRun)
	progress.clear()
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if o.asJSON {
		return json.NewEncoder(out).Encode(sum)
	}
	verb := "recovered"
	if o.dryRun {
		verb = "would recover"
	}
	fmt.Fprintf(out, "%s since %s: seen %d, already claimed %d, %s %d, malformed %d\n", sum.Provider,
		sum.Since.Format(time.RFC3339), sum.Seen, sum.AlreadyClaimed, verb, sum.Recovered, sum.Malformed)
	return nil
}
