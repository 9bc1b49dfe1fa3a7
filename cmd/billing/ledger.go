package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/platform/safetext"
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
	var asJSON bool
	c := &cobra.Command{
		Use:   "verify [--player ID] [--json]",
		Short: "Audit the ledger invariants; exit 0 when clean, 1 with a report",
		Long: `verify runs the full audit (every invariant of docs/contract.md). It checks
invariants 1-3 in one consistent snapshot: every
wallet balance equals the sum of its entries and its latest balance_after,
never negative, with gapless entry numbers; every transaction has two entries
summing to zero, and each currency sums to zero; one transaction per
idempotency key, and conversion legs in pairs. Then invariants 4-6: at most
one funding debit per Marquee per service day with paid_through backed by it,
at most one fulfillment credit per order and only for its snapshot, one claim
per provider event and no event with two jobs that ran. Then invariants 7-10:
one applied payment per order and no mint for an unapplied one, Mana clawed
back never more than a payment minted, each player's debt equal to their
receivable entries, and the books following the provider's refunds and
disputes. Then invariant 11: every claimed provider event (payments, refunds,
disputes) has one recorded outcome (applied, refused, ignored, waiting for
its payment) or a live River job, whatever its age; each one with neither
(its job was cancelled or discarded before it decided) is named as
"invariant 11 event_without_outcome <provider>/<event id>": billing webhooks
redrive re-enqueues it, billing webhooks close closes it on purpose. Then
invariant 12: every effect the outgoing event catalogue reports (a
fulfilment, a funding debit, a payment recorded unapplied or refunded, a
refund or dispute event accepted or refused, a debt opened, settled by a
fulfilment or forgiven) has its event, and no order.fulfilled or
debt.forgiven event lacks its effect.

Clean: one summary line on stdout (it names the invariants checked), exit 0. Otherwise every violation, one a
line with the ids to look at, then the summary, and exit 1. --player audits
one player's wallets and transactions (invariants 1-3); a player that does
not exist is an error (exit 1), not a clean audit.

--json prints one JSON object instead, streamed as the audit finds
violations: "violations" (each with "invariant", "check" and the "line"),
then "clean", "violations_total", "wallets", "transactions", "entries",
"checked" (the domain checks that ran) and "summary". The exit status is the
same.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) error {
				if player != 0 {
					if err := requirePlayer(ctx, pool, player); err != nil {
						return err
					}
				}
				return verifyLedger(cmd, pool, player, cfg.ServiceDayTZ, asJSON)
			})
		},
	}
	c.Flags().Int64Var(&player, "player", 0, "audit only this player's wallets and transactions")
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	return c
}

// requirePlayer refuses an audit of a player that does not exist, which
// would otherwise find nothing wrong in nothing and say "clean".
func requirePlayer(ctx context.Context, pool *pgxpool.Pool, id int64) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM players WHERE id = $1)`, id).Scan(&exists); err != nil {
		return fmt.Errorf("ledger verify: %w", err)
	}
	if !exists {
		return fmt.Errorf("ledger verify: --player %d: no such player", id)
	}
	return nil
}

func verifyLedger(cmd *cobra.Command, pool *pgxpool.Pool, player int64, tz *time.Location, asJSON bool) error {
	out := cmd.OutOrStdout()
	progress := progressTo(cmd.ErrOrStderr())
	var report violationReport = textViolations{out: out}
	if asJSON {
		report = &jsonViolations{out: out}
	}
	r, err := audit.Run(cmd.Context(), pool, audit.Options{
		PlayerID: player,
		TZ:       tz,
		// Violations stream out as found; the report keeps none of the
		// ledger's, so memory stays flat on a badly broken ledger.
		MaxViolations: 1,
		OnViolation: func(line string) {
			progress.clear()
			report.violation(line)
		},
		Progress: func(a wallet.AuditProgress) { progress.show("checking "+a.Stage, a.Done, a.Total) },
	})
	progress.clear()
	if err != nil {
		return err
	}
	if err := report.end(r); err != nil {
		return err
	}
	if !r.Clean() {
		return exitError{code: 1}
	}
	return nil
}

// violationReport writes ledger verify's report as the audit runs.
type violationReport interface {
	violation(line string)
	end(r *audit.Report) error
}

// textViolations: one line per violation, then the summary line.
type textViolations struct{ out io.Writer }

// violation prints line escaped: it names the provider's ids as sent.
func (t textViolations) violation(line string) { fmt.Fprintln(t.out, safetext.Escape(line)) }

func (t textViolations) end(r *audit.Report) error {
	_, err := fmt.Fprintln(t.out, safetext.Escape(r.Summary()))
	return err
}

// jsonViolations streams one JSON object: the violations array first, as
// found, then the totals.
type jsonViolations struct {
	out io.Writer
	n   int
}

func (j *jsonViolations) violation(line string) {
	sep := ","
	if j.n == 0 {
		sep = `{"violations":[`
	}
	b, _ := json.Marshal(audit.ParseViolation(line)) // cannot fail: strings and an int
	fmt.Fprintf(j.out, "%s\n%s", sep, b)
	j.n++
}

func (j *jsonViolations) end(r *audit.Report) error {
	head := "],"
	if j.n == 0 {
		head = `{"violations":[],`
	}
	checked := r.Checked
	if checked == nil {
		checked = []string{}
	}
	tail, _ := json.Marshal(struct {
		Clean        bool     `json:"clean"`
		Total        int64    `json:"violations_total"`
		Wallets      int64    `json:"wallets"`
		Transactions int64    `json:"transactions"`
		Entries      int64    `json:"entries"`
		Checked      []string `json:"checked"`
		Summary      string   `json:"summary"`
	}{r.Clean(), r.Ledger.Total + int64(len(r.Domain)), r.Ledger.Wallets, r.Ledger.Transactions, r.Ledger.Entries,
		checked, r.Summary()})
	_, err := fmt.Fprintf(j.out, "%s%s\n", head, tail[1:]) // tail without its opening brace
	return err
}
