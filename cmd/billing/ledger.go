package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/audit"
	"github.com/fibe-dev/billing/wallet"
)

func newLedgerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Inspect the double-entry ledger",
	}
	cmd.AddCommand(newLedgerVerifyCmd())
	return cmd
}

func newLedgerVerifyCmd() *cobra.Command {
	var player int64
	c := &cobra.Command{
		Use:   "verify",
		Short: "Audit the ledger invariants; exit 0 when clean, 1 with a report",
		Long: `verify runs the full audit (every invariant of docs/contract.md). It checks
invariants 1-3 in one consistent snapshot: every
wallet balance equals the sum of its entries and its latest balance_after,
never negative, with gapless entry numbers; every transaction has two entries
summing to zero, and each currency sums to zero; one transaction per
idempotency key, and conversion legs in pairs. Then invariants 4-6: at most
one funding debit per Marquee per service day with paid_through backed by it,
at most one fulfillment credit per order and only for its snapshot, one claim
per provider event and a job for every claimed payment (events younger than
River's job retention). Then invariants 7-9: one applied payment per order
and no mint for an unapplied one, Mana clawed back never more than a payment
minted, and each player's debt equal to their receivable entries.

Clean: one summary line on stdout, exit 0. Otherwise every violation, one a
line with the ids to look at, then the summary, and exit 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(_ context.Context, pool *pgxpool.Pool, cfg *config.Config) error {
				return verifyLedger(cmd, pool, player, cfg.ServiceDayTZ)
			})
		},
	}
	c.Flags().Int64Var(&player, "player", 0, "audit only this player's wallets and transactions")
	return c
}

func verifyLedger(cmd *cobra.Command, pool *pgxpool.Pool, player int64, tz *time.Location) error {
	out := cmd.OutOrStdout()
	progress := progressTo(cmd.ErrOrStderr())
	report, err := audit.Run(cmd.Context(), pool, audit.Options{
		PlayerID: player,
		TZ:       tz,
		// Violations stream out as found; the report keeps none of the
		// ledger's, so memory stays flat on a badly broken ledger.
		MaxViolations: 1,
		OnViolation: func(line string) {
			progress.clear()
			fmt.Fprintln(out, line)
		},
		Progress: func(a wallet.AuditProgress) { progress.show("checking "+a.Stage, a.Done, a.Total) },
	})
	progress.clear()
	if err != nil {
		return err
	}
	fmt.Fprintln(out, report.Summary())
	if !report.Clean() {
		return exitError{code: 1}
	}
	return nil
}
