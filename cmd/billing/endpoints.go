package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/events"
)

func newEndpointsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "endpoints",
		Short: "Manage the endpoints billing sends its signed events to",
		Long: `Endpoints receive billing's events (docs/contract.md, "Events billing sends"),
signed per Standard Webhooks with the endpoint's whsec_ secret.`,
	}
	cmd.AddCommand(newEndpointsAddCmd(), newEndpointsListCmd(), newEndpointsSetCmd(true), newEndpointsSetCmd(false),
		newEndpointsRotateCmd())
	return cmd
}

// endpointJSON is an endpoint as the commands print it; Secret only when
// it was just made.
type endpointJSON struct {
	*events.Endpoint
	Created bool   `json:"created,omitempty"`
	Secret  string `json:"secret,omitempty"`
}

func endpointLine(e *events.Endpoint) string {
	types := "all types"
	if len(e.Types) > 0 {
		types = strings.Join(e.Types, ",")
	}
	state := "enabled"
	if !e.Enabled {
		state = "disabled: " + e.DisabledReason
	}
	return fmt.Sprintf("endpoint=%d %s (%s) %s", e.ID, e.URL, types, state)
}

func newEndpointsAddCmd() *cobra.Command {
	var types []string
	var asJSON bool
	c := &cobra.Command{
		Use:   "add URL [--types a,b] [--json]",
		Short: "Add an endpoint (idempotent on the URL); prints its whsec_ secret once",
		Long: `add registers URL (http or https) for the given event types (all types by
default). Adding a URL that is already registered changes nothing and prints
the endpoint without its secret: the secret is printed only when it is made.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				a, err := events.AddEndpoint(ctx, pool, args[0], types)
				if err != nil {
					return err
				}
				text := endpointLine(a.Endpoint) + " (already registered; its secret is not shown again)"
				if a.Created {
					text = endpointLine(a.Endpoint) + "\nsecret (shown once): " + a.Secret
				}
				return printResult(cmd.OutOrStdout(), asJSON, endpointJSON{a.Endpoint, a.Created, a.Secret}, text)
			})
		},
	}
	c.Flags().StringSliceVar(&types, "types", nil, "event types to send, comma-separated (default: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return c
}

func newEndpointsListCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List endpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				eps, err := events.Endpoints(ctx, pool)
				if err != nil {
					return err
				}
				return printList(cmd.OutOrStdout(), eps, asJSON, endpointLine, count(len(eps), "endpoint"))
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func newEndpointsSetCmd(enable bool) *cobra.Command {
	var asJSON bool
	var reason string
	use, short := "disable ID [--reason R]", "Stop sending to an endpoint (pending deliveries end at their next attempt)"
	if enable {
		use, short = "enable ID", "Send to an endpoint again (resend what it missed with billing events resend)"
	}
	c := &cobra.Command{
		Use:   use + " [--json]",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return fmt.Errorf("endpoint id %q: %w", args[0], err)
			}
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				e, err := events.SetEnabled(ctx, pool, id, enable, reason)
				if err != nil {
					return err
				}
				return printResult(cmd.OutOrStdout(), asJSON, endpointJSON{Endpoint: e}, endpointLine(e))
			})
		},
	}
	if !enable {
		c.Flags().StringVar(&reason, "reason", "disabled by an operator", "why, shown in the list")
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return c
}

func newEndpointsRotateCmd() *cobra.Command {
	var asJSON bool
	var grace time.Duration
	c := &cobra.Command{
		Use:   "rotate-secret ID [--grace 24h] [--json]",
		Short: "Give an endpoint a new secret; prints it once",
		Long: `rotate-secret makes a new whsec_ secret. Until --grace has passed, every
request carries two signatures, one per secret, so the receiver can switch
to the new secret whenever it likes within the grace.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return fmt.Errorf("endpoint id %q: %w", args[0], err)
			}
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				e, secret, err := events.RotateSecret(ctx, pool, id, grace)
				if err != nil {
					return err
				}
				return printResult(cmd.OutOrStdout(), asJSON, endpointJSON{Endpoint: e, Secret: secret},
					fmt.Sprintf("%s\nnew secret (shown once): %s; the old one signs too until %s", endpointLine(e), secret,
						e.PreviousSecretUntil.UTC().Format(time.RFC3339)))
			})
		},
	}
	c.Flags().DurationVar(&grace, "grace", 24*time.Hour, "how long the old secret keeps signing")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return c
}
