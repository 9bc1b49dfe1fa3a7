// Package audit runs every invariant check of the system (docs/contract.md,
// invariants 1-11) as one audit: the wallet's ledger checks (1-3) and each
// domain's own (4: enforcer, 5: fulfillment, 6 and 11: webhook, and
// whatever a domain adds). `billing ledger verify` and every money test (through
// audittest.RequireClean) call Run, so "the full audit" means one thing.
//
// Each domain owns its checks' SQL; this package only composes them.
// Adding a domain check is one line in domainChecks.
package audit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/wallet"
)

// Options scope and observe an audit.
type Options struct {
	// PlayerID limits the audit to one player's wallets and transactions
	// (invariants 1-3); the domain checks, which span players, then do not
	// run. 0 audits everything.
	PlayerID int64
	// LedgerOnly runs invariants 1-3 alone: for the wallet's own tests,
	// which post other domains' kinds (funding, purchase) without those
	// domains' rows on purpose, to test the primitive.
	LedgerOnly bool
	// TZ is the service-day time zone Marquees are funded in; nil is UTC.
	TZ *time.Location
	// WebhookSince is ignored: invariant 11 checks every claimed event,
	// whatever its age (its outcome outlives its River job).
	WebhookSince time.Time
	// MaxViolations bounds the ledger violations the report keeps (all are
	// counted); 0 is the wallet's default.
	MaxViolations int
	// OnViolation, when set, sees every violation as it is found, as one
	// line naming its invariant and the ids to look at.
	OnViolation func(line string)
	// Progress, when set, is called as the ledger checks advance.
	Progress func(wallet.AuditProgress)
}

// domainCheck is one domain's checks of invariants from..to, as one line
// per violation.
type domainCheck struct {
	name     string
	from, to int
	run      func(ctx context.Context, db dbtx.DB, o Options) ([]string, error)
}

// domainChecks are the checks beyond the ledger's, in invariant order. A
// domain audit of the usual shape, func(ctx, db) ([]V, error) with V a
// fmt.Stringer, is one line: {"name", from, to, plain(pkg.Audit)}.
var domainChecks = []domainCheck{
	{"funding", 4, 4, func(ctx context.Context, db dbtx.DB, o Options) ([]string, error) {
		return lines(enforcer.AuditFunding(ctx, db, o.TZ))
	}},
	{"fulfillment", 5, 5, plain(fulfillment.Audit)},
	{"webhook", 6, 11, func(ctx context.Context, db dbtx.DB, o Options) ([]string, error) {
		return lines(webhook.Audit(ctx, db, webhook.AuditOptions{Since: o.WebhookSince}))
	}},
	{"payments", 7, 10, func(ctx context.Context, db dbtx.DB, _ Options) ([]string, error) {
		return lines(fulfillment.AuditPayments(ctx, db, drivers.Facts()...))
	}},
	{"events", events.Invariant, events.Invariant, plain(events.Audit)},
}

// plain adapts a domain audit that needs no options.
func plain[V fmt.Stringer](audit func(context.Context, dbtx.DB) ([]V, error)) func(context.Context, dbtx.DB, Options) ([]string, error) {
	return func(ctx context.Context, db dbtx.DB, _ Options) ([]string, error) { return lines(audit(ctx, db)) }
}

// lines turns a domain audit's violations into lines.
func lines[V fmt.Stringer](vs []V, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out, nil
}

// Report is what Run found.
type Report struct {
	// Ledger is the wallet's report (invariants 1-3).
	Ledger *wallet.AuditReport
	// Domain is every violation of the domain checks, one a line.
	Domain []string
	// Checked names the domain checks that ran.
	Checked []string
	// invariants spans the domain checks that ran, such as "4-6".
	invariants string
}

// Clean reports whether no invariant is broken.
func (r *Report) Clean() bool { return r.Ledger.Clean() && len(r.Domain) == 0 }

// Summary is one line: the ledger's counts and whether the domain checks
// were clean.
func (r *Report) Summary() string {
	switch {
	case !r.Ledger.Clean() || len(r.Checked) == 0:
		return r.Ledger.Summary()
	case len(r.Domain) > 0:
		return fmt.Sprintf("ledger NOT clean: %d violations of the %s checks (invariants %s)",
			len(r.Domain), strings.Join(r.Checked, ", "), r.invariants)
	}
	return fmt.Sprintf("%s; invariants %s clean", r.Ledger.Summary(), r.invariants)
}

// String is the summary and every kept violation, one a line.
func (r *Report) String() string {
	var b strings.Builder
	b.WriteString(r.Ledger.String())
	for _, l := range r.Domain {
		b.WriteString("\n  " + l)
	}
	if len(r.Checked) > 0 {
		b.WriteString("\n" + r.Summary())
	}
	return b.String()
}

// Run audits every invariant: the ledger in its own snapshot (bounded
// memory), then the domain checks in one REPEATABLE READ snapshot.
func Run(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Report, error) {
	if opts.TZ == nil {
		opts.TZ = time.UTC
	}
	ledger, err := wallet.Audit(ctx, pool, wallet.AuditOptions{
		PlayerID: opts.PlayerID, MaxViolations: opts.MaxViolations, Progress: opts.Progress,
		OnViolation: func(v wallet.Violation) {
			if opts.OnViolation != nil {
				opts.OnViolation(v.String())
			}
		},
	})
	if err != nil {
		return nil, err
	}
	r := &Report{Ledger: ledger}
	if opts.PlayerID != 0 || opts.LedgerOnly {
		return r, nil
	}
	return r, runDomains(ctx, pool, opts, r)
}

// runDomains runs every domain check in one read-only snapshot.
func runDomains(ctx context.Context, pool *pgxpool.Pool, opts Options, r *Report) error {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, c := range domainChecks {
		found, err := c.run(ctx, tx, opts)
		if err != nil {
			return fmt.Errorf("audit %s: %w", c.name, err)
		}
		for _, l := range found {
			if opts.OnViolation != nil {
				opts.OnViolation(l)
			}
		}
		r.Domain = append(r.Domain, found...)
		r.Checked = append(r.Checked, c.name)
	}
	first, last := domainChecks[0].from, 0
	for _, c := range domainChecks {
		last = max(last, c.to)
	}
	r.invariants = fmt.Sprintf("%d-%d", first, last)
	return nil
}
