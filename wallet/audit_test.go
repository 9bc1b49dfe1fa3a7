package wallet_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/wallet"
)

// seedLedger writes a small clean history for two players and returns the
// first player's Sparks wallet id.
func seedLedger(t *testing.T, pool *pgxpool.Pool) (walletID int64) {
	t.Helper()
	ctx := context.Background()
	s := wallet.New(pool, wallet.Options{SparksPerMana: 2})
	p1, p2 := newPlayer(t, pool), newPlayer(t, pool)
	fund(t, s, p1, wallet.Mana, 100)
	fund(t, s, p2, wallet.Sparks, 50)
	_, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p1, Mana: 30, IdempotencyKey: wallet.CallerKey("c")})
	require.NoError(t, err)
	for i, amount := range []int64{5, 7, 9} {
		_, err := s.Debit(ctx, wallet.PostParams{PlayerID: p1, Currency: wallet.Sparks, Amount: amount,
			Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey("f" + string(rune('0'+i)))})
		require.NoError(t, err)
	}
	report, err := wallet.Audit(ctx, pool, wallet.AuditOptions{})
	require.NoError(t, err)
	require.True(t, report.Clean(), report.String())
	require.Equal(t, int64(3), report.Wallets)
	require.Equal(t, int64(7), report.Transactions)
	require.Equal(t, int64(14), report.Entries)
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM wallets WHERE player_id = $1 AND currency = 'sparks'`, p1).Scan(&walletID))
	return walletID
}

// corrupt runs sql on a seeded ledger and returns the audit's report.
func corrupt(t *testing.T, sql string) (*wallet.AuditReport, int64) {
	t.Helper()
	report, walletID, _ := corruptPool(t, sql)
	return report, walletID
}

// corruptPool is corrupt, with the pool on the corrupted database.
func corruptPool(t *testing.T, sql string) (*wallet.AuditReport, int64, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	pool := testdbPool(t)
	walletID := seedLedger(t, pool)
	// No arguments: the simple protocol, so sql may hold several statements.
	_, err := pool.Exec(ctx, strings.ReplaceAll(sql, "$1", strconv.FormatInt(walletID, 10)))
	require.NoError(t, err)
	var seen []wallet.Violation
	report, err := wallet.Audit(ctx, pool, wallet.AuditOptions{ChunkSize: 2, OnViolation: func(v wallet.Violation) { seen = append(seen, v) }})
	require.NoError(t, err)
	require.False(t, report.Clean())
	require.Equal(t, report.Violations, seen)
	require.EqualValues(t, len(seen), report.Total)
	t.Log(report.String())
	return report, walletID, pool
}

// testdbPool is a pool without the clean-audit cleanup: these tests break
// the ledger on purpose.
func testdbPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, conns.Acquire(ctx, 3))
	t.Cleanup(func() { conns.Release(3) })
	pool, err := pgxpool.New(ctx, testdbURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func checks(r *wallet.AuditReport) map[string]bool {
	out := map[string]bool{}
	for _, v := range r.Violations {
		out[v.Check] = true
	}
	return out
}

func TestAuditFindsBalanceChangedWithoutEntry(t *testing.T) {
	t.Parallel()
	report, walletID := corrupt(t, `UPDATE wallets SET balance = balance + 5 WHERE id = $1`)
	require.Equal(t, map[string]bool{"balance_vs_entries": true, "balance_vs_latest_entry": true}, checks(report))
	for _, v := range report.Violations {
		require.Equal(t, walletID, v.WalletID)
		require.Equal(t, 1, v.Invariant)
	}
}

func TestAuditFindsDeletedEntry(t *testing.T) {
	t.Parallel()
	// The second entry of the Sparks wallet (the first funding debit).
	report, walletID := corrupt(t, `DELETE FROM ledger_entries WHERE wallet_id = $1 AND seq = 2`)
	got := checks(report)
	require.True(t, got["balance_vs_entries"], report.String())
	require.True(t, got["seq"], report.String())
	require.True(t, got["entry_history"], report.String())
	require.True(t, got["unbalanced_transaction"], report.String())
	require.True(t, got["currency_total"], report.String())
	for _, v := range report.Violations {
		if v.Check == "unbalanced_transaction" {
			require.Equal(t, walletID, v.WalletID)
			require.NotZero(t, v.TransactionID)
		}
	}
}

func TestAuditFindsUnbalancedTransaction(t *testing.T) {
	t.Parallel()
	report, _ := corrupt(t, `UPDATE ledger_entries SET amount = amount + 1
WHERE account <> 'wallet' AND transaction_id = (SELECT max(transaction_id) FROM ledger_entries WHERE wallet_id = $1)`)
	require.Equal(t, map[string]bool{"unbalanced_transaction": true, "currency_total": true}, checks(report))
	for _, v := range report.Violations {
		require.Equal(t, 2, v.Invariant)
	}
}

func TestAuditFindsDuplicateKeyAndHalfConversion(t *testing.T) {
	t.Parallel()
	report, _ := corrupt(t, `
ALTER TABLE wallet_transactions DROP CONSTRAINT wallet_transactions_idempotency_key_key;
-- Erase the Sparks wallet's whole (consistent) history, conversion leg included.
DELETE FROM ledger_entries WHERE transaction_id IN (SELECT id FROM wallet_transactions WHERE wallet_id = $1);
DELETE FROM wallet_transactions WHERE wallet_id = $1;
UPDATE wallets SET balance = 0, seq = 0 WHERE id = $1;
INSERT INTO wallet_transactions (wallet_id, player_id, currency, amount, kind, idempotency_key, balance_after)
SELECT wallet_id, player_id, currency, amount, kind, idempotency_key, balance_after FROM wallet_transactions WHERE idempotency_key = 'c:mana_debit'`)
	got := checks(report)
	require.True(t, got["duplicate_key"], report.String())
	require.True(t, got["conversion_legs"], report.String())
	for _, v := range report.Violations {
		if v.Check == "duplicate_key" || v.Check == "conversion_legs" {
			require.Equal(t, 3, v.Invariant)
			require.NotZero(t, v.TransactionID)
		}
	}
}

func TestAuditOfOnePlayer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{})
	p1, p2 := newPlayer(t, pool), newPlayer(t, pool)
	fund(t, s, p1, wallet.Sparks, 10)
	fund(t, s, p2, wallet.Sparks, 20)
	report, err := wallet.Audit(ctx, pool, wallet.AuditOptions{PlayerID: p2})
	require.NoError(t, err)
	require.True(t, report.Clean(), report.String())
	require.Equal(t, int64(1), report.Wallets)
	require.Equal(t, int64(1), report.Transactions)
	require.Equal(t, int64(2), report.Entries)
}

// TestAuditFindsBrokenTransaction corrupts one transaction in each way the
// transactions check's cheap first pass must let through to the exact one:
// each kind must be reported, on that transaction, and nothing else of
// invariant 2 but what the corruption also breaks.
func TestAuditFindsBrokenTransaction(t *testing.T) {
	t.Parallel()
	// The Sparks wallet's latest transaction: the last funding debit (key f2).
	const latest = `(SELECT max(id) FROM wallet_transactions WHERE wallet_id = $1)`
	for _, c := range []struct {
		name, sql string
		want      map[string]bool
	}{
		{"balance_after", `UPDATE wallet_transactions SET balance_after = balance_after + 1 WHERE id = ` + latest,
			map[string]bool{"wallet_entry": true}},
		{"amount", `UPDATE wallet_transactions SET amount = amount - 1 WHERE id = ` + latest,
			map[string]bool{"wallet_entry": true}},
		{"two_wallet_entries", `UPDATE ledger_entries SET account = 'wallet', wallet_id = $1, balance_after = 0, seq = 1000
WHERE account <> 'wallet' AND transaction_id = ` + latest,
			map[string]bool{"wallet_entry": true, "balance_vs_entries": true, "seq": true, "balance_vs_latest_entry": true, "entry_history": true}},
		{"entry_currency", `UPDATE ledger_entries SET currency = 'mana' WHERE account <> 'wallet' AND transaction_id = ` + latest,
			map[string]bool{"entry_currency": true, "currency_total": true}},
		{"wallet_owner", `UPDATE wallet_transactions SET player_id = player_id + 1000000 WHERE id = ` + latest,
			map[string]bool{"wallet_owner": true}},
		{"third_entry", `INSERT INTO ledger_entries (transaction_id, account, currency, amount)
SELECT id, 'revenue', 'sparks', 0 FROM wallet_transactions WHERE id = ` + latest,
			map[string]bool{"unbalanced_transaction": true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			report, walletID := corrupt(t, c.sql)
			require.Equal(t, c.want, checks(report), report.String())
			for _, v := range report.Violations {
				if v.Invariant == 2 && v.Check != "currency_total" {
					require.Equal(t, walletID, v.WalletID, v.String())
					require.NotZero(t, v.TransactionID, v.String())
				}
			}
		})
	}
}

// TestAuditParallelFindsTheSame breaks the ledger in several ways at once and
// audits it on one connection and on several sharing a snapshot: the checks
// running at once must find exactly what they find one after another.
func TestAuditParallelFindsTheSame(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdbPool(t)
	walletID := seedLedger(t, pool)
	_, err := pool.Exec(ctx, strings.ReplaceAll(`
UPDATE wallets SET balance = balance + 5 WHERE id = $1;
UPDATE ledger_entries SET currency = 'mana' WHERE account <> 'wallet'
  AND transaction_id = (SELECT max(id) FROM wallet_transactions WHERE wallet_id = $1);
UPDATE wallet_transactions SET balance_after = balance_after + 1
  WHERE id = (SELECT min(id) FROM wallet_transactions WHERE wallet_id = $1)`, "$1", strconv.FormatInt(walletID, 10)))
	require.NoError(t, err)
	var reports []*wallet.AuditReport
	for _, parallel := range []int{1, 2, 3} {
		var stages sync.Map
		report, err := wallet.Audit(ctx, pool, wallet.AuditOptions{ChunkSize: 1, Parallel: parallel,
			Progress: func(p wallet.AuditProgress) { stages.Store(p.Stage, true) }})
		require.NoError(t, err)
		for _, s := range []string{"wallets", "entries", "transactions"} {
			_, ok := stages.Load(s)
			require.True(t, ok, "no progress for %s", s)
		}
		reports = append(reports, report)
	}
	want := reports[0]
	require.Equal(t, map[string]bool{"balance_vs_entries": true, "balance_vs_latest_entry": true, "entry_currency": true,
		"currency_total": true, "wallet_entry": true}, checks(want), want.String())
	for _, r := range reports[1:] {
		require.Equal(t, want.ByCheck, r.ByCheck)
		require.Equal(t, want.Total, r.Total)
		require.ElementsMatch(t, want.Violations, r.Violations)
		require.Equal(t, [3]int64{want.Wallets, want.Transactions, want.Entries}, [3]int64{r.Wallets, r.Transactions, r.Entries})
	}
}

// An audit whose caller holds all but one of a small pool's connections
// runs on that one instead of waiting for a second that never comes.
func TestAuditWithNoSpareConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, conns.Acquire(ctx, 2))
	t.Cleanup(func() { conns.Release(2) })
	pool := testdb.NewPool(t, 2)
	seedLedger(t, pool)
	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(held.Release)
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	report, err := wallet.Audit(deadline, pool, wallet.AuditOptions{Parallel: 2})
	require.NoError(t, err)
	require.True(t, report.Clean(), report.String())
}

// found is the (invariant, check) pairs of r's violations, with details
// for the conversion_legs check, which names several problems.
func found(r *wallet.AuditReport) map[string]bool {
	out := map[string]bool{}
	for _, v := range r.Violations {
		k := fmt.Sprintf("%d:%s", v.Invariant, v.Check)
		if v.Check == "conversion_legs" {
			k += ": " + v.Detail[strings.Index(v.Detail, ": ")+2:]
		}
		out[k] = true
	}
	return out
}

// Each check of the audit, seeded with exactly the violation it exists to
// find (and what that violation cannot help breaking besides), is
// reported, by the whole audit and by the audit of the wallet's player,
// while the other player's audit stays clean. $1 is the first player's
// Sparks wallet: a conversion's credit of 60 then funding debits of 5, 7
// and 9 (balance 39); the conversion's key is c.
func TestAuditFindsEachViolation(t *testing.T) {
	t.Parallel()
	const latest = `(SELECT max(id) FROM wallet_transactions WHERE wallet_id = $1)`
	rename := func(from, to string) string {
		return `UPDATE wallet_transactions SET idempotency_key = '` + to + `' WHERE idempotency_key = '` + from + `';`
	}
	for _, c := range []struct {
		name, sql string
		want      []string
	}{
		{"negative balance that its entries agree with", `ALTER TABLE wallets DROP CONSTRAINT wallets_balance_check;
UPDATE wallet_transactions SET amount = -57, balance_after = -9 WHERE id = ` + latest + `;
UPDATE ledger_entries SET amount = -57, balance_after = -9 WHERE wallet_id IS NOT NULL AND transaction_id = ` + latest + `;
UPDATE ledger_entries SET amount = 57 WHERE wallet_id IS NULL AND transaction_id = ` + latest + `;
UPDATE wallets SET balance = -9 WHERE id = $1`, []string{"1:negative_balance"}},
		{"wallet entry in another currency", `UPDATE ledger_entries SET currency = 'mana' WHERE transaction_id = ` + latest,
			[]string{"1:entry_currency", "2:entry_currency"}},
		{"seq counted past the entries", `UPDATE wallets SET seq = seq + 1 WHERE id = $1`, []string{"1:seq"}},
		{"a gap in the entries' seq", `UPDATE ledger_entries SET seq = seq + 2 WHERE wallet_id = $1 AND seq = 4`,
			[]string{"1:seq", "1:entry_history"}},
		{"conversion legs swapped", rename("c:mana_debit", "swap") + rename("c:sparks_credit", "c:mana_debit") + rename("swap", "c:sparks_credit"),
			[]string{`3:conversion_legs: mana leg is not a Mana debit`, `3:conversion_legs: sparks leg is not a Sparks credit`}},
		{"conversion legs under two parents", rename("c:mana_debit", "d:mana_debit"),
			[]string{`3:conversion_legs: no sparks leg`, `3:conversion_legs: no mana leg`}},
		{"conversion leg under no leg key", rename("c:mana_debit", "c:other"),
			[]string{`3:conversion_legs: key is not a conversion leg key`, `3:conversion_legs: no mana leg`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			report, walletID, pool := corruptPool(t, c.sql)
			want := map[string]bool{}
			for _, w := range c.want {
				want[w] = true
			}
			require.Equal(t, want, found(report), report.String())
			requirePlayerAudits(t, pool, report.Violations, walletID, want)
		})
	}
}

// requirePlayerAudits audits the owner of walletID alone (same findings as
// want) and the seeded ledger's other player (clean), and requires each of
// vs to name the wallet, or a transaction for the key checks.
func requirePlayerAudits(t *testing.T, pool *pgxpool.Pool, vs []wallet.Violation, walletID int64, want map[string]bool) {
	t.Helper()
	ctx := context.Background()
	var owner, other int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT player_id FROM wallets WHERE id = $1`, walletID).Scan(&owner))
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(player_id) FROM wallets WHERE player_id <> $1`, owner).Scan(&other))
	mine, err := wallet.Audit(ctx, pool, wallet.AuditOptions{PlayerID: owner, ChunkSize: 2})
	require.NoError(t, err)
	require.Equal(t, want, found(mine), mine.String())
	theirs, err := wallet.Audit(ctx, pool, wallet.AuditOptions{PlayerID: other, ChunkSize: 2})
	require.NoError(t, err)
	require.True(t, theirs.Clean(), theirs.String())
	for _, v := range vs {
		if v.Invariant != 3 {
			require.Equal(t, walletID, v.WalletID, v.String())
		} else {
			require.NotZero(t, v.TransactionID, v.String())
		}
	}
}
