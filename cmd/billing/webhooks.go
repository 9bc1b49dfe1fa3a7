package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/jobs"
)

// `billing webhooks` is about the provider events billing receives and
// claims (invariant 11: each ends in one recorded outcome). `billing
// events` is kept for the events billing sends.
func newWebhooksCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "Inspect and repair claimed provider events (list, redrive, close)",
		Long: `Every provider event billing claims ends in one recorded outcome (invariant 11
of docs/contract.md): applied (naming what it made), refused (with its
reason), ignored (a type billing only acknowledges), waiting (a refund or
dispute whose payment is not known yet), or none yet while its River job is
live. An event with no outcome and no live job (its job was cancelled or
discarded before it decided) is orphaned: ledger verify names it, the
provider's next redelivery re-enqueues it, and redrive does so on demand.`,
	}
	cmd.AddCommand(newWebhooksListCmd(), newWebhooksRedriveCmd(), newWebhooksCloseCmd())
	return cmd
}

func newWebhooksListCmd() *cobra.Command {
	var p webhook.ListParams
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--outcome O] [--provider P] [--event-id ID] [--limit N] [--json]",
		Short: "List claimed provider events and their outcomes, oldest first",
		Long: `list prints claimed provider events, oldest first: provider, event id, type,
when claimed, outcome (applied, refused, ignored, waiting, or "none" with
"live job" while its job may still run) and its reference or reason.
--outcome refused lists the events refused (an unappliable payload, an order
that does not exist, a mismatched payment, a closed one); --outcome orphaned
the events with no outcome and no live job, which redrive repairs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				events, err := webhook.List(ctx, pool, p)
				if err != nil {
					return err
				}
				return printList(cmd.OutOrStdout(), events, asJSON, eventLine, count(len(events), "event"))
			})
		},
	}
	c.Flags().StringVar(&p.Outcome, "outcome", "", "only events with this outcome: applied, refused, ignored, waiting or orphaned")
	c.Flags().StringVar(&p.Provider, "provider", "", "only this provider's events")
	c.Flags().StringVar(&p.EventID, "event-id", "", "only this event")
	c.Flags().IntVar(&p.Limit, "limit", 1000, "at most this many events")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func eventLine(e webhook.ClaimedEvent) string {
	out := e.Outcome
	switch {
	case out == "" && e.Live:
		out = "none (live job)"
	case out == "":
		out = "none, NO LIVE JOB (orphaned: billing webhooks redrive)"
	}
	line := fmt.Sprintf("%s %s %s claimed %s: %s", e.Provider, e.EventID, e.Type, e.ClaimedAt.UTC().Format("2006-01-02 15:04:05Z"), out)
	if e.Ref != "" {
		line += " " + e.Ref
	}
	if e.Reason != "" {
		line += " (" + e.Reason + ")"
	}
	return line
}

type redriveOptions struct {
	provider, eventID string
	all, dryRun       bool
	asJSON            bool
}

func newWebhooksRedriveCmd() *cobra.Command {
	var o redriveOptions
	c := &cobra.Command{
		Use:   "redrive (--provider P --event-id ID | --all) [--dry-run] [--json]",
		Short: "Re-enqueue the work of claimed events with no outcome and no live job",
		Long: `redrive re-drives a claimed event whose job was cancelled or discarded before
it decided (no outcome, no live job) through the same claim as a
redelivery: under the claim's lock, its job is enqueued again from the
payload stored at the claim (or, for an event that needs no job, its
outcome recorded). An event that has an outcome, or a live job, is left
alone, so redrive is idempotent and safe beside the provider's own
redeliveries: any number of them at once enqueue one job. The workers are
idempotent too: a payment or refund already applied is not applied twice.

--provider and --event-id re-drive one event; --all every orphaned one
(billing webhooks list --outcome orphaned). --dry-run lists what it would
re-drive and changes nothing: run it first. A redrive is not a delivery: it
counts none on the claim. Exit 1 when an event named does not exist.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRedrive(cmd, o) },
	}
	c.Flags().StringVar(&o.provider, "provider", "", "the event's provider")
	c.Flags().StringVar(&o.eventID, "event-id", "", "the provider's event id")
	c.Flags().BoolVar(&o.all, "all", false, "every claimed event with no outcome and no live job")
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "list what would be re-driven; change nothing")
	c.Flags().BoolVar(&o.asJSON, "json", false, "print a JSON object")
	return c
}

// redriveResult is redrive's report.
type redriveResult struct {
	DryRun   bool                   `json:"dry_run"`
	Orphaned []webhook.ClaimedEvent `json:"orphaned"`
	Redriven int                    `json:"redriven"`
}

func runRedrive(cmd *cobra.Command, o redriveOptions) error {
	if o.all == (o.eventID != "") || (o.eventID != "") != (o.provider != "") {
		return errors.New("webhooks redrive: give --provider and --event-id, or --all")
	}
	return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) error {
		if o.eventID != "" {
			if err := requireClaimed(ctx, pool, o.provider, o.eventID); err != nil {
				return err
			}
		}
		orphans, err := webhook.List(ctx, pool, webhook.ListParams{Outcome: webhook.Orphaned, Provider: o.provider,
			EventID: o.eventID, Limit: 1 << 30})
		if err != nil {
			return err
		}
		res := redriveResult{DryRun: o.dryRun, Orphaned: orphans}
		if res.Orphaned == nil {
			res.Orphaned = []webhook.ClaimedEvent{}
		}
		if !o.dryRun && len(orphans) > 0 {
			if res.Redriven, err = redrive(ctx, pool, cfg, orphans); err != nil {
				return err
			}
		}
		return printResult(cmd.OutOrStdout(), o.asJSON, res, redriveText(res))
	})
}

func requireClaimed(ctx context.Context, pool *pgxpool.Pool, provider, eventID string) error {
	found, err := webhook.Claimed(ctx, pool, provider, eventID)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w: %s %q", webhook.ErrNotClaimed, provider, eventID)
	}
	return nil
}

// redrive re-drives each orphan through the claim; an event that found a
// job or an outcome meanwhile (a redelivery came first) is not counted.
func redrive(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, orphans []webhook.ClaimedEvent) (int, error) {
	client, err := jobs.NewClient(pool, jobs.Options{Logger: newLogger(cfg, os.Stderr)})
	if err != nil {
		return 0, err
	}
	claimer := webhook.NewClaimer(webhook.Options{Pool: pool, River: client,
		Providers: provider.Select[webhook.Intake](newProviders(cfg)), Logger: newLogger(cfg, os.Stderr)})
	n := 0
	for _, e := range orphans {
		done, err := claimer.Redrive(ctx, e.Provider, e.EventID)
		if err != nil {
			return n, err
		}
		if done {
			n++
		}
	}
	return n, nil
}

func redriveText(r redriveResult) string {
	if len(r.Orphaned) == 0 {
		return "no claimed event without an outcome and a live job: nothing to redrive"
	}
	text := ""
	for _, e := range r.Orphaned {
		text += eventLine(e) + "\n"
	}
	if r.DryRun {
		return text + fmt.Sprintf("dry run: would redrive %s", count(len(r.Orphaned), "event"))
	}
	return text + fmt.Sprintf("redrove %s", count(r.Redriven, "event"))
}

func newWebhooksCloseCmd() *cobra.Command {
	var providerName, eventID, reason string
	var asJSON bool
	c := &cobra.Command{
		Use:   "close --provider P --event-id ID --reason R [--json]",
		Short: "Close a claimed event on purpose: record it refused, with a reason",
		Long: `close records a claimed event refused on purpose ("closed by operator: R"),
for an orphaned event no job must apply (a test event, one settled by hand
at the provider), or a refund or dispute waiting for a payment that will
never come. It moves no money, and the event leaves ledger verify's report.
Only an event with no outcome (or waiting) and no live job can be closed:
one with a live job is refused (cancel the job in the River UI first, or
let it decide). Closing an event already decided changes nothing (exit 0,
"changed": false). Exit 1 for an event never claimed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				changed, err := webhook.Close(ctx, pool, providerName, eventID, reason)
				if err != nil {
					return err
				}
				text := fmt.Sprintf("closed %s %s: refused (closed by operator: %s)", providerName, eventID, reason)
				if !changed {
					text = fmt.Sprintf("%s %s already has its outcome: nothing changed", providerName, eventID)
				}
				return printResult(cmd.OutOrStdout(), asJSON, struct {
					Provider string `json:"provider"`
					EventID  string `json:"event_id"`
					Changed  bool   `json:"changed"`
				}{providerName, eventID, changed}, text)
			})
		},
	}
	c.Flags().StringVar(&providerName, "provider", "", "the event's provider (required)")
	c.Flags().StringVar(&eventID, "event-id", "", "the provider's event id (required)")
	c.Flags().StringVar(&reason, "reason", "", "why it is closed, recorded as its refusal (required)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	for _, f := range []string{"provider", "event-id", "reason"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}
