package timeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/wallet"
)

// txRow is one wallet transaction with its ledger entries.
type txRow struct {
	ID, WalletID, PlayerID int64
	Currency               string
	Amount                 int64
	Kind, Reference, Key   string
	BalanceAfter           int64
	CreatedAt              time.Time
	Entries                []Entry
}

const txColumns = `t.id, t.wallet_id, t.player_id, t.currency, t.amount, t.kind, t.reference, t.idempotency_key,
	t.balance_after, t.created_at`

// txsSQL finds the transactions under the keys $1 and every transaction
// whose key starts with one of the prefixes $2 (each up to the matching
// bound $3: a byte-wise range, served by the partial index on payment
// keys whatever the database's collation).
var txsSQL = `SELECT ` + txColumns + ` FROM wallet_transactions t WHERE t.idempotency_key = ANY($1)
UNION
SELECT ` + txColumns + ` FROM unnest($2::text[], $3::text[]) AS p(lo, hi)
	JOIN wallet_transactions t ON ` + wallet.SQLIsReversalKey("t.idempotency_key") + `
		AND t.idempotency_key ~>=~ p.lo AND t.idempotency_key ~<~ p.hi
ORDER BY 1`

func scanTx(r pgx.Row) (*txRow, error) {
	var t txRow
	err := r.Scan(&t.ID, &t.WalletID, &t.PlayerID, &t.Currency, &t.Amount, &t.Kind, &t.Reference, &t.Key,
		&t.BalanceAfter, &t.CreatedAt)
	return &t, err
}

// loadTxs reads the transactions under keys and under each payment's
// reversal-step prefix, with their entries.
func loadTxs(ctx context.Context, q dbtx.DB, keys []string, payments []int64) ([]*txRow, error) {
	var lo, hi []string
	for _, p := range payments {
		// Every key of the payment's reversal steps starts with pre; ';' is
		// the byte after ':'.
		pre := wallet.ReversalPrefix(p)
		lo, hi = append(lo, pre), append(hi, pre[:len(pre)-1]+";")
	}
	txs, err := collect(ctx, q, "wallet transactions", txsSQL, []any{keys, lo, hi}, scanTx)
	if err != nil {
		return nil, err
	}
	return txs, loadEntries(ctx, q, txs)
}

const entriesSQL = `SELECT transaction_id, account, amount, balance_after FROM ledger_entries
WHERE transaction_id = ANY($1) ORDER BY id`

func loadEntries(ctx context.Context, q dbtx.DB, txs []*txRow) error {
	if len(txs) == 0 {
		return nil
	}
	byID := make(map[int64]*txRow, len(txs))
	ids := make([]int64, len(txs))
	for i, t := range txs {
		byID[t.ID], ids[i] = t, t.ID
	}
	type entry struct {
		tx int64
		e  Entry
	}
	es, err := collect(ctx, q, "ledger entries", entriesSQL, []any{ids}, func(r pgx.Row) (entry, error) {
		var e entry
		return e, r.Scan(&e.tx, &e.e.Account, &e.e.Amount, &e.e.BalanceAfter)
	})
	for _, e := range es {
		byID[e.tx].Entries = append(byID[e.tx].Entries, e.e)
	}
	return err
}

// debtState is a player's debt and what opened, settled or forgave it
// since a moment.
type debtState struct {
	Outstanding int64
	UpdatedAt   time.Time
	Legs        []*txRow // kind debt, debt_settlement, debt_write_off
	Forgiven    []*forgivenRow
}

// forgivenRow is one debt_forgiveness row: an operator's key, spent once.
type forgivenRow struct {
	Key       string
	Mana      int64
	Reason    string
	CreatedAt time.Time
}

// The kinds of a debt's legs (wallet's KindDebt, KindDebtSettlement,
// KindDebtWriteOff); the partial index on them spells the same list.
const debtLegsSQL = `SELECT ` + txColumns + ` FROM wallet_transactions t
WHERE t.player_id = $1 AND t.kind IN ('debt', 'debt_settlement', 'debt_write_off') AND t.id >= $2
ORDER BY t.id LIMIT $3`

const forgivenSQL = `SELECT key, mana, reason, created_at FROM debt_forgiveness
WHERE player_id = $1 AND created_at >= $2 ORDER BY created_at LIMIT $3`

// maxDebtLines bounds the debt legs and forgiveness a timeline shows.
const maxDebtLines = 200

// loadDebt reads player's debt, and its legs and forgiveness from
// transaction fromTx and time from on.
func loadDebt(ctx context.Context, q dbtx.DB, player, fromTx int64, from time.Time) (*debtState, error) {
	d, err := loadDebtState(ctx, q, player, from)
	if err != nil {
		return nil, err
	}
	if d.Legs, err = collect(ctx, q, "debt", debtLegsSQL, []any{player, fromTx, maxDebtLines}, scanTx); err != nil {
		return nil, err
	}
	return d, loadEntries(ctx, q, d.Legs)
}

// loadDebtState reads player's debt and the forgiveness decided from
// time from on.
func loadDebtState(ctx context.Context, q dbtx.DB, player int64, from time.Time) (*debtState, error) {
	d := &debtState{}
	err := q.QueryRow(ctx, `SELECT outstanding, updated_at FROM debts WHERE player_id = $1`, player).
		Scan(&d.Outstanding, &d.UpdatedAt)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("timeline: read debt of player %d: %w", player, err)
	}
	d.Forgiven, err = collect(ctx, q, "forgiveness", forgivenSQL, []any{player, from, maxDebtLines},
		func(r pgx.Row) (*forgivenRow, error) {
			var f forgivenRow
			return &f, r.Scan(&f.Key, &f.Mana, &f.Reason, &f.CreatedAt)
		})
	return d, err
}
