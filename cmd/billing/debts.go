package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/wallet"
)

func newDebtsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "debts",
		Short: "See and forgive players' debts (Mana a refund or chargeback could not take back)",
	}
	cmd.AddCommand(newDebtsListCmd(), newDebtsForgiveCmd())
	return cmd
}

func newDebtsListCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List open debts, largest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) error {
				ds, err := newWallet(pool, cfg).Debts(ctx)
				if err != nil {
					return err
				}
				return printDebts(cmd.OutOrStdout(), ds, asJSON)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func printDebts(out io.Writer, ds []wallet.Debt, asJSON bool) error {
	var total int64
	for _, d := range ds {
		total += d.Mana
	}
	views := make([]debtJSON, len(ds))
	for i, d := range ds {
		views[i] = debtJSON{PlayerID: d.PlayerID, Mana: d.Mana, UpdatedAt: d.UpdatedAt}
	}
	return printList(out, views, asJSON, func(d debtJSON) string {
		return fmt.Sprintf("player=%d owes %d Mana (since %s)", d.PlayerID, d.Mana, d.UpdatedAt.UTC().Format("2006-01-02 15:04:05Z"))
	}, fmt.Sprintf("%s, %d Mana in total", count(len(ds), "open debt"), total))
}

func newDebtsForgiveCmd() *cobra.Command {
	var player int64
	var key, reason string
	var asJSON bool
	c := &cobra.Command{
		Use:   "forgive --player P --key K --reason R [--json]",
		Short: "Write a player's whole debt off, once per key",
		Long: `forgive writes the player's whole open debt off against the bad_debt account:
the wallet is unchanged, the debt becomes 0, and conversions are allowed again.
The key is spent whatever it found (0 Mana when nothing was owed): the same
--key again prints the first result and moves nothing, even after a new debt
(replay-safe); choose a new key for a new decision. The reason is kept in the ledger.
A forgiveness that wrote Mana off sends debt.forgiven, written in its transaction.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if reason == "" {
				return fmt.Errorf("--reason is required")
			}
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) error {
				f, err := fulfillment.ForgiveDebt(ctx, pool, newWallet(pool, cfg), player, key, reason)
				if err != nil {
					return err
				}
				return printResult(cmd.OutOrStdout(), asJSON, forgivenessJSON{PlayerID: f.PlayerID, Mana: f.Mana, Replayed: f.Replayed},
					fmt.Sprintf("player=%d forgiven %d Mana (replayed=%t)", f.PlayerID, f.Mana, f.Replayed))
			})
		},
	}
	c.Flags().Int64Var(&player, "player", 0, "the player's id (required)")
	c.Flags().StringVar(&key, "key", "", "the operator's idempotency key (required)")
	c.Flags().StringVar(&reason, "reason", "", "why, kept in the ledger (required)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	for _, f := range []string{"player", "key", "reason"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}
