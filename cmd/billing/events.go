package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/events"
)

func newEventsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "See the events billing sent and send one again",
		Long: `Every event's id is the webhook-id of each of its deliveries; a resend makes
a new delivery under the same id and body.`,
	}
	cmd.AddCommand(newEventsListCmd(), newEventsShowCmd(), newEventsResendCmd())
	return cmd
}

func outgoingEventLine(e events.Stored) string {
	return fmt.Sprintf("%s %s player=%d seq=%d at %s", e.ID, e.Type, e.PlayerID, e.Sequence,
		e.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"))
}

func newEventsListCmd() *cobra.Command {
	var f events.Filter
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--player P] [--type T] [--limit N] [--json]",
		Short: "List events, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.Type != "" {
				if err := events.CheckTypes([]string{f.Type}); err != nil {
					return err
				}
			}
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				es, err := events.List(ctx, pool, f)
				if err != nil {
					return err
				}
				return printList(cmd.OutOrStdout(), es, asJSON, outgoingEventLine, count(len(es), "event"))
			})
		},
	}
	c.Flags().Int64Var(&f.PlayerID, "player", 0, "only this player's events")
	c.Flags().StringVar(&f.Type, "type", "", "only events of this type")
	c.Flags().IntVar(&f.Limit, "limit", 100, "at most this many")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func newEventsShowCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show EVENT_ID [--json]",
		Short: "Show an event, its body and every delivery attempt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				s, err := events.Show(ctx, pool, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printResult(cmd.OutOrStdout(), true, s, "")
				}
				return printShown(cmd.OutOrStdout(), s)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return c
}

func printShown(out io.Writer, s *events.Shown) error {
	lines := []string{outgoingEventLine(s.Stored), string(s.Body)}
	for _, d := range s.Deliveries {
		lines = append(lines, fmt.Sprintf("delivery=%d endpoint=%d %s: %s, %s", d.ID, d.EndpointID, d.URL, d.State,
			count(len(d.Attempts), "attempt")))
		for _, a := range d.Attempts {
			lines = append(lines, fmt.Sprintf("  %s status=%d %dms %s %q", a.At.UTC().Format(time.RFC3339),
				a.StatusCode, a.LatencyMS, a.Error, a.Response))
		}
	}
	for _, l := range lines {
		if err := printResult(out, false, nil, l); err != nil {
			return err
		}
	}
	return nil
}

func newEventsResendCmd() *cobra.Command {
	var endpoint int64
	var asJSON bool
	c := &cobra.Command{
		Use:   "resend EVENT_ID [--endpoint ID] [--json]",
		Short: "Deliver an event again, under the same id and body",
		Long: `resend makes a new delivery of the event to --endpoint, or to every enabled
endpoint that wants its type. A disabled endpoint must be enabled first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				n, err := events.Resend(ctx, pool, args[0], endpoint)
				if err != nil {
					return err
				}
				return printResult(cmd.OutOrStdout(), asJSON, map[string]any{"event_id": args[0], "deliveries": n},
					fmt.Sprintf("%s: %s queued", args[0], count(n, "delivery")))
			})
		},
	}
	c.Flags().Int64Var(&endpoint, "endpoint", 0, "only to this endpoint")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return c
}
