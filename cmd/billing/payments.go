package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/fulfillment"
)

func newPaymentsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "payments",
		Short: "Inspect provider payments (applied, unapplied, refunded)",
	}
	cmd.AddCommand(newPaymentsListCmd())
	return cmd
}

func newPaymentsListCmd() *cobra.Command {
	var unapplied, asJSON bool
	var order int64
	c := &cobra.Command{
		Use:   "list [--unapplied] [--order ID] [--json]",
		Short: "List recorded payments, oldest first",
		Long: `list prints every recorded provider payment: the order it paid, amount,
currency, the Mana it minted and its status. applied minted the order's Mana;
unapplied is money received that minted nothing (a second, distinct payment
for an order already paid, or a payment the order refused) and must be
refunded; refunded is an unapplied payment refunded through the provider's API.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				ps, err := fulfillment.ListPayments(ctx, pool, fulfillment.ListPaymentsParams{UnappliedOnly: unapplied, OrderID: order})
				if err != nil {
					return err
				}
				return printPayments(cmd.OutOrStdout(), ps, asJSON)
			})
		},
	}
	c.Flags().BoolVar(&unapplied, "unapplied", false, "only unapplied payments (to refund)")
	c.Flags().Int64Var(&order, "order", 0, "only this order's payments")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func printPayments(out io.Writer, ps []fulfillment.Payment, asJSON bool) error {
	if asJSON {
		if ps == nil {
			ps = []fulfillment.Payment{}
		}
		return json.NewEncoder(out).Encode(ps)
	}
	for _, p := range ps {
		fmt.Fprintf(out, "%s %s order=%d player=%d %d %s minted=%d clawed_back=%d %s", p.Provider, p.PaymentID, p.OrderID,
			p.PlayerID, p.Amount, p.Currency, p.ManaMinted, p.ClawedBackMana, p.Status)
		if p.RefundID != "" {
			fmt.Fprintf(out, " refund=%s", p.RefundID)
		}
		if p.Reason != "" {
			fmt.Fprintf(out, " reason=%q", p.Reason)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "%d payments\n", len(ps))
	return nil
}

// withPool loads the configuration, opens a small pool and runs f.
func withPool(cmd *cobra.Command, f func(context.Context, *pgxpool.Pool, *config.Config) error) error {
	cfg, err := loadConfig(cmd, true)
	if err != nil {
		return err
	}
	pool, err := openPool(cmd.Context(), cfg.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(cmd.Context(), pool, cfg)
}

// auditPayments checks invariants 7-9 (payments mint once, clawbacks never
// exceed what a payment minted, debts equal the receivable account),
// printing each violation, and returns how many it found.
func auditPayments(ctx context.Context, pool *pgxpool.Pool, out io.Writer) (int, error) {
	vs, err := fulfillment.AuditPayments(ctx, pool)
	if err != nil {
		return 0, err
	}
	for _, v := range vs {
		fmt.Fprintln(out, v.String())
	}
	return len(vs), nil
}
