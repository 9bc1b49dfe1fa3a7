package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/wallet"
	"github.com/fibe-dev/billing/webhook"
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
		Long: `verify checks invariants 1-3 of the design in one consistent snapshot: every
wallet balance equals the sum of its entries and its latest balance_after,
never negative, with gapless entry numbers; every transaction has two entries
summing to zero, and each currency sums to zero; one transaction per
idempotency key, and conversion legs in pairs. Then invariants 4-6: at most
one funding debit per Marquee per service day with paid_through backed by it,
at most one fulfilment credit per order and only for its snapshot, one claim
per provider event and a job for every claimed payment (events younger than
River's job retention). Then invariants 7-9: one applied payment per order
and no mint for an unapplied one, Mana clawed back never more than a payment
minted, and each player's debt equal to their receivable entries.

Clean: one summary line on stdout, exit 0. Otherwise every violation, one a
line with the ids to look at, then the summary, and exit 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, true)
			if err != nil {
				return err
			}
			pool, err := openPool(cmd.Context(), cfg.DatabaseURL, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			return verifyLedger(cmd, pool, player, cfg.ServiceDayTZ)
		},
	}
	c.Flags().Int64Var(&player, "player", 0, "audit only this player's wallets and transactions")
	return c
}

func verifyLedger(cmd *cobra.Command, pool *pgxpool.Pool, player int64, tz *time.Location) error {
	out := cmd.OutOrStdout()
	progress := progressTo(cmd.ErrOrStderr())
	opts := wallet.AuditOptions{
		PlayerID: player,
		// Violations stream out as found; the report keeps none, so memory
		// stays flat on a badly broken ledger.
		MaxViolations: 1,
		OnViolation: func(v wallet.Violation) {
			progress.clear()
			fmt.Fprintln(out, v.String())
		},
		Progress: func(a wallet.AuditProgress) { progress.show("checking "+a.Stage, a.Done, a.Total) },
	}
	report, err := wallet.Audit(cmd.Context(), pool, opts)
	progress.clear()
	if err != nil {
		return err
	}
	domain := 0
	if player == 0 {
		if domain, err = auditDomains(cmd.Context(), pool, tz, out); err != nil {
			return err
		}
	}
	switch {
	case !report.Clean():
		fmt.Fprintln(out, report.Summary())
		return exitError{code: 1}
	case domain > 0:
		fmt.Fprintf(out, "ledger NOT clean: %d funding, fulfilment or webhook violations (invariants 4-6)\n", domain)
		return exitError{code: 1}
	case player == 0:
		fmt.Fprintln(out, report.Summary()+"; invariants 4-6 clean")
	default:
		fmt.Fprintln(out, report.Summary())
	}
	return nil
}

// auditDomains checks invariants 4-6 (funding once per Marquee-day and
// paid_through monotonic, one fulfilment credit per order matching its
// snapshot, one claim per provider event with its job), printing each
// violation, and returns how many it found.
func auditDomains(ctx context.Context, pool *pgxpool.Pool, tz *time.Location, out io.Writer) (int, error) {
	n := 0
	funding, err := enforcer.AuditFunding(ctx, pool, tz)
	if err != nil {
		return 0, err
	}
	for _, v := range funding {
		fmt.Fprintln(out, v.String())
	}
	n += len(funding)
	orders, err := fulfillment.Audit(ctx, pool)
	if err != nil {
		return 0, err
	}
	for _, v := range orders {
		fmt.Fprintln(out, v.String())
	}
	n += len(orders)
	payments, err := auditPayments(ctx, pool, out)
	if err != nil {
		return 0, err
	}
	n += payments
	claims, err := webhook.Audit(ctx, pool, webhook.AuditOptions{})
	if err != nil {
		return 0, err
	}
	for _, v := range claims {
		fmt.Fprintln(out, v.String())
	}
	return n + len(claims), nil
}
