package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/wallet"
)

func newWalletCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wallet",
		Short: "Operator corrections to players' wallets",
	}
	cmd.AddCommand(newWalletAdjustCmd())
	return cmd
}

func newWalletAdjustCmd() *cobra.Command {
	var (
		player      int64
		currency    string
		amount      int64
		reason, key string
		asJSON      bool
	)
	c := &cobra.Command{
		Use:   "adjust --player P --currency mana|sparks --amount N --reason R --key K [--json]",
		Short: "Credit (N > 0) or debit (N < 0) a wallet by hand, once per key",
		Long: `adjust posts a manual correction through the wallet's one post: a credit for a
positive --amount, a debit for a negative one, refused (409-like error, nothing
moves) when it would take the wallet below zero. The operator's --key makes it
replay-safe: the same key with the same request prints the first transaction
and moves nothing; with a different request it is refused. The --reason is the
transaction's reference in the ledger. A Mana credit settles an open debt first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) error {
				t, err := newWallet(pool, cfg).Adjust(ctx, wallet.AdjustParams{
					PlayerID: player, Currency: wallet.Currency(currency), Amount: amount, Reason: reason, Key: key})
				if errors.Is(err, wallet.ErrInvalidAmount) {
					// The wallet's own word, "positive", is about the amount of one
					// leg; an adjustment's sign says credit or debit.
					return fmt.Errorf("wallet adjust: --amount must be a nonzero integer (positive credits, negative debits), got %d", amount)
				}
				if err != nil {
					return err
				}
				return printResult(cmd.OutOrStdout(), asJSON, viewTransaction(t), fmt.Sprintf("transaction %d: player=%d %+d %s, balance %d (replayed=%t)",
					t.ID, t.PlayerID, t.Amount, t.Currency, t.BalanceAfter, t.Replayed))
			})
		},
	}
	c.Flags().Int64Var(&player, "player", 0, "the player's id (required)")
	c.Flags().StringVar(&currency, "currency", "", "mana or sparks (required)")
	c.Flags().Int64Var(&amount, "amount", 0, "signed amount: positive credits, negative debits (required)")
	c.Flags().StringVar(&reason, "reason", "", "why, kept in the ledger (required)")
	c.Flags().StringVar(&key, "key", "", "the operator's idempotency key (required)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	for _, f := range []string{"player", "currency", "amount", "reason", "key"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}
