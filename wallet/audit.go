package wallet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// AuditOptions scope and observe an audit.
type AuditOptions struct {
	// PlayerID limits the audit to one player's wallets and transactions;
	// 0 audits the whole database (and adds the per-currency totals).
	PlayerID int64
	// MaxViolations bounds how many violations the report keeps (all are
	// counted); 0 means 1000. OnViolation sees every one of them.
	MaxViolations int
	// OnViolation, when set, is called with each violation as it is found.
	OnViolation func(Violation)
	// Progress, when set, is called after each chunk.
	Progress func(AuditProgress)
	// ChunkSize is how many ids one query covers; 0 means 5000.
	ChunkSize int64
	// Parallel is how many connections the checks run on at once, all in
	// the same snapshot; 0 means 2, and it is capped by the pool's size.
	Parallel int
}

// AuditProgress tells how far a stage of the audit is (ids, not rows).
type AuditProgress struct {
	Stage string // wallets, entries, transactions, keys, currencies
	Done  int64
	Total int64
}

// Violation is one broken invariant, with the ids to look at.
type Violation struct {
	Invariant     int    `json:"invariant"` // 1..3, as numbered in docs/contract.md
	Check         string `json:"check"`
	WalletID      int64  `json:"wallet_id,omitempty"`
	TransactionID int64  `json:"transaction_id,omitempty"`
	EntryID       int64  `json:"entry_id,omitempty"`
	Detail        string `json:"detail"`
}

func (v Violation) String() string {
	var ids []string
	if v.WalletID != 0 {
		ids = append(ids, fmt.Sprintf("wallet=%d", v.WalletID))
	}
	if v.TransactionID != 0 {
		ids = append(ids, fmt.Sprintf("transaction=%d", v.TransactionID))
	}
	if v.EntryID != 0 {
		ids = append(ids, fmt.Sprintf("entry=%d", v.EntryID))
	}
	return strings.Join(append([]string{fmt.Sprintf("invariant %d %s", v.Invariant, v.Check)}, ids...), " ") + ": " + v.Detail
}

// AuditReport is what Audit found.
type AuditReport struct {
	Wallets      int64       `json:"wallets"`
	Transactions int64       `json:"transactions"`
	Entries      int64       `json:"entries"`
	Total        int64       `json:"violations_total"`
	Violations   []Violation `json:"violations"` // the first MaxViolations
	ByCheck      map[string]int64
}

// Clean reports whether no invariant is broken.
func (r *AuditReport) Clean() bool { return r.Total == 0 }

// Summary is one line: the counts and, when not clean, the violations by check.
func (r *AuditReport) Summary() string {
	s := fmt.Sprintf("%d wallets, %d transactions, %d ledger entries", r.Wallets, r.Transactions, r.Entries)
	if r.Clean() {
		return "ledger clean: " + s
	}
	checks := make([]string, 0, len(r.ByCheck))
	for c, n := range r.ByCheck {
		checks = append(checks, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(checks)
	return fmt.Sprintf("ledger NOT clean: %d violations (%s) in %s", r.Total, strings.Join(checks, " "), s)
}

// String is the summary and every kept violation, one a line.
func (r *AuditReport) String() string {
	var b strings.Builder
	b.WriteString(r.Summary())
	for _, v := range r.Violations {
		b.WriteString("\n  " + v.String())
	}
	if int64(len(r.Violations)) < r.Total {
		fmt.Fprintf(&b, "\n  ... and %d more", r.Total-int64(len(r.Violations)))
	}
	return b.String()
}

// auditor carries one audit's snapshot and findings. Checks running at
// once each have a copy with its own tx (same snapshot) and share the rest.
type auditor struct {
	tx     pgx.Tx
	opts   AuditOptions
	report *AuditReport
	player *int64      // nil: whole database
	mu     *sync.Mutex // guards report and serializes the callbacks
}

func (a *auditor) add(v Violation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.report.Total++
	a.report.ByCheck[v.Check]++
	if len(a.report.Violations) < a.opts.MaxViolations {
		a.report.Violations = append(a.report.Violations, v)
	}
	if a.opts.OnViolation != nil {
		a.opts.OnViolation(v)
	}
}

// Audit checks invariants 1-3 of docs/contract.md over the database (or one
// player) in one REPEATABLE READ snapshot, so concurrent posts cannot show
// up half-applied. Every check is a SQL aggregation over a bounded id range
// whose only output rows are violations: memory stays flat however large
// the ledger. Independent checks run at once on Parallel connections that
// share the snapshot (pg_export_snapshot), so they see the same ledger.
func Audit(ctx context.Context, pool *pgxpool.Pool, opts AuditOptions) (*AuditReport, error) {
	if opts.MaxViolations <= 0 {
		opts.MaxViolations = 1000
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = 5000
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 2
	}
	opts.Parallel = min(opts.Parallel, int(pool.Config().MaxConns))
	txs, err := snapshotTxs(ctx, pool, opts.Parallel)
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("wallet: audit: %w", err)
	}
	a := &auditor{opts: opts, report: &AuditReport{ByCheck: map[string]int64{}}, mu: &sync.Mutex{}}
	if opts.PlayerID != 0 {
		a.player = &opts.PlayerID
	}
	if err := a.run(ctx, txs); err != nil {
		return nil, fmt.Errorf("wallet: audit: %w", err)
	}
	return a.report, nil
}

// run runs every check, longest first, each on the first free tx.
func (a *auditor) run(ctx context.Context, txs []pgx.Tx) error {
	steps := make(chan func(*auditor, context.Context) error, 6)
	for _, s := range []func(*auditor, context.Context) error{
		(*auditor).transactions, (*auditor).entries, (*auditor).keys,
		(*auditor).wallets, (*auditor).currencies, (*auditor).counts,
	} {
		steps <- s
	}
	close(steps)
	g, gctx := errgroup.WithContext(ctx)
	for _, tx := range txs {
		w := *a
		w.tx = tx
		g.Go(func() error {
			for step := range steps {
				if err := step(&w, gctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// snapshotTxs begins n read-only REPEATABLE READ transactions on their own
// connections, all in the first one's snapshot. The caller rolls back every
// tx returned, also on error.
func snapshotTxs(ctx context.Context, pool *pgxpool.Pool, n int) ([]pgx.Tx, error) {
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	first, err := pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	txs := []pgx.Tx{first}
	var snapshot string
	if n > 1 {
		if err := first.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshot); err != nil {
			return txs, err
		}
	}
	for len(txs) < n {
		tx, err := beginExtra(ctx, pool, opts)
		if errors.Is(err, errNoSpareConn) {
			break // audit on the connections there are
		}
		if err != nil {
			return txs, err
		}
		txs = append(txs, tx)
		// Must be the transaction's first statement.
		if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+snapshot+`'`); err != nil {
			return txs, err
		}
	}
	for _, tx := range txs {
		// Every check runs a few statements many times with different
		// ranges: plan each execution for its own range, not generically.
		if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_custom_plan`); err != nil {
			return txs, err
		}
		// The entry history sorts a chunk's entries by wallet and seq: at
		// the default 4MB that sort spills to disk.
		if _, err := tx.Exec(ctx, `SET LOCAL work_mem = '64MB'`); err != nil {
			return txs, err
		}
	}
	return txs, nil
}

// spareConnWait is how long an audit waits for a connection beyond its
// first: the extra ones only make it faster, so a caller that holds the
// rest of a small pool gets an audit on fewer connections, not a hang.
const spareConnWait = time.Second

var errNoSpareConn = errors.New("no spare connection")

// beginExtra begins one more audit transaction if the pool has a connection
// to spare within spareConnWait.
func beginExtra(ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions) (pgx.Tx, error) {
	wait, cancel := context.WithTimeout(ctx, spareConnWait)
	defer cancel()
	tx, err := pool.BeginTx(wait, opts)
	if err != nil && ctx.Err() == nil && wait.Err() != nil {
		return nil, errNoSpareConn
	}
	return tx, err
}

func (a *auditor) counts(ctx context.Context) error {
	return a.tx.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM wallets WHERE $1::bigint IS NULL OR player_id = $1),
  (SELECT count(*) FROM wallet_transactions WHERE $1::bigint IS NULL OR player_id = $1),
  (SELECT count(*) FROM ledger_entries e WHERE $1::bigint IS NULL
     OR e.transaction_id IN (SELECT id FROM wallet_transactions WHERE player_id = $1))`, a.player).
		Scan(&a.report.Wallets, &a.report.Transactions, &a.report.Entries)
}

// chunks calls fn for consecutive id ranges (lo, hi] of size ids up to
// max(id) of table.
func (a *auditor) chunks(ctx context.Context, stage, table string, size int64, fn func(lo, hi int64) error) error {
	var maxID int64
	if err := a.tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM `+table).Scan(&maxID); err != nil {
		return err
	}
	for lo := int64(0); lo < maxID; lo += size {
		hi := min(lo+size, maxID)
		if err := fn(lo, hi); err != nil {
			return fmt.Errorf("%s %d..%d: %w", stage, lo+1, hi, err)
		}
		if a.opts.Progress != nil {
			a.mu.Lock()
			a.opts.Progress(AuditProgress{Stage: stage, Done: hi, Total: maxID})
			a.mu.Unlock()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// each runs a query and scans every row into dest before calling fn.
func (a *auditor) each(ctx context.Context, sql string, args []any, dest []any, fn func() error) error {
	rows, err := a.tx.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, dest, fn)
	return err
}
