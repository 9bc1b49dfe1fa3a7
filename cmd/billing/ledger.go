package main

import (
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

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
		Long: `verify checks invariants 1-3 of the design in one consistent snapshot: every
wallet balance equals the sum of its entries and its latest balance_after,
never negative, with gapless entry numbers; every transaction has two entries
summing to zero, and each currency sums to zero; one transaction per
idempotency key, and conversion legs in pairs.

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
			return verifyLedger(cmd, pool, player)
		},
	}
	c.Flags().Int64Var(&player, "player", 0, "audit only this player's wallets and transactions")
	return c
}

func verifyLedger(cmd *cobra.Command, pool *pgxpool.Pool, player int64) error {
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
		Progress: progress.show,
	}
	report, err := wallet.Audit(cmd.Context(), pool, opts)
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

// progressLine redraws one status line on a terminal and stays silent
// otherwise, so logs and pipes get only the line-oriented report.
type progressLine struct {
	w     io.Writer // nil when not a terminal
	drawn bool
}

func progressTo(w io.Writer) *progressLine {
	f, ok := w.(*os.File)
	if !ok {
		return &progressLine{}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return &progressLine{}
	}
	return &progressLine{w: w}
}

func (p *progressLine) show(a wallet.AuditProgress) {
	if p.w == nil {
		return
	}
	fmt.Fprintf(p.w, "\r\033[Kchecking %s: %d/%d", a.Stage, a.Done, a.Total)
	p.drawn = true
}

func (p *progressLine) clear() {
	if p.w != nil && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}
