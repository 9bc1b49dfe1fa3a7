package timeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

// MaxWalletLines is how many of each wallet's transactions a player's
// timeline shows at most, the newest; --since narrows it further.
const MaxWalletLines = 500

// maxPlayerOrders bounds the orders a player's timeline tells in full.
const maxPlayerOrders = 100

type playerRow struct {
	ID        int64
	Name      string
	CreatedAt time.Time
	Wallets   []walletRow
}

type walletRow struct {
	ID       int64
	Currency string
	Balance  int64
}

func loadPlayer(ctx context.Context, q dbtx.DB, id int64) (*playerRow, error) {
	p := &playerRow{ID: id}
	err := q.QueryRow(ctx, `SELECT name, created_at FROM players WHERE id = $1`, id).Scan(&p.Name, &p.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: no player %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("timeline: read player %d: %w", id, err)
	}
	p.Wallets, err = collect(ctx, q, "wallets", `SELECT id, currency, balance FROM wallets WHERE player_id = $1 ORDER BY currency`,
		[]any{id}, func(r pgx.Row) (walletRow, error) {
			var w walletRow
			return w, r.Scan(&w.ID, &w.Currency, &w.Balance)
		})
	return p, err
}

// playerTxsSQL takes each wallet's newest $2 transactions (a backward
// scan of its (wallet_id, id) index that stops there), then keeps those
// since $3: a long history before --since is never read.
const playerTxsSQL = `SELECT ` + txColumns + ` FROM unnest($1::bigint[]) AS w(id)
CROSS JOIN LATERAL (SELECT * FROM wallet_transactions t WHERE t.wallet_id = w.id ORDER BY t.id DESC LIMIT $2) t
WHERE t.created_at >= $3 ORDER BY t.id`

// playerOrdersSQL takes the player's newest orders since $2.
const playerOrdersSQL = `SELECT id FROM orders WHERE player_id = $1 AND created_at >= $2 ORDER BY id DESC LIMIT $3`

// paymentOrdersSQL finds the orders of payment rows.
const paymentOrdersSQL = `SELECT DISTINCT order_id FROM payments WHERE id = ANY($1)`

func playerTimeline(ctx context.Context, q dbtx.DB, id int64, since time.Time) (*Timeline, error) {
	p, err := loadPlayer(ctx, q, id)
	if err != nil {
		return nil, err
	}
	var walletIDs []int64
	for _, w := range p.Wallets {
		walletIDs = append(walletIDs, w.ID)
	}
	txs, err := collect(ctx, q, "wallet transactions", playerTxsSQL, []any{walletIDs, MaxWalletLines + 1, since}, scanTx)
	if err != nil {
		return nil, err
	}
	orders, err := playerOrders(ctx, q, id, since, txs)
	if err != nil {
		return nil, err
	}
	h, err := loadHistory(ctx, q, orders, nil)
	if err != nil {
		return nil, err
	}
	if err := h.addPlayer(ctx, q, id, since, txs); err != nil {
		return nil, err
	}
	t := h.timeline(Subject{Kind: SubjectPlayer, ID: strconv.FormatInt(id, 10), Since: sinceOrNil(since)}, h.playerVerdict(p, since))
	if err := addKeyLines(ctx, q, id, t); err != nil {
		return nil, err
	}
	t.Lines = slices.DeleteFunc(t.Lines, func(l Line) bool { return l.At.Before(since) })
	t.Notes = truncationNotes(p, txs)
	return t, nil
}

func sinceOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// playerOrders are the player's orders since since, and the older ones
// that a transaction since then names (a refund of last year's purchase).
func playerOrders(ctx context.Context, q dbtx.DB, player int64, since time.Time, txs []*txRow) ([]int64, error) {
	orders, err := collect(ctx, q, "orders", playerOrdersSQL, []any{player, since, maxPlayerOrders}, rowInt64)
	if err != nil {
		return nil, err
	}
	var payments []int64
	for _, t := range txs {
		parts := strings.SplitN(t.Key, ":", 3)
		if len(parts) < 3 {
			continue
		}
		n, err := strconv.ParseInt(parts[1], 10, 64)
		switch {
		case err != nil:
		case parts[0] == "order":
			orders = append(orders, n)
		case parts[0] == "payment":
			payments = append(payments, n)
		}
	}
	if len(payments) > 0 {
		more, err := collect(ctx, q, "orders of payments", paymentOrdersSQL, []any{payments}, rowInt64)
		if err != nil {
			return nil, err
		}
		orders = append(orders, more...)
	}
	slices.Sort(orders)
	return slices.Compact(orders), nil
}

func rowInt64(r pgx.Row) (int64, error) {
	var n int64
	return n, r.Scan(&n)
}

// addPlayer adds the player's own transactions and debt to h.
func (h *history) addPlayer(ctx context.Context, q dbtx.DB, id int64, since time.Time, txs []*txRow) error {
	h.player = id
	seen := map[int64]bool{}
	for _, t := range h.txs {
		seen[t.ID] = true
	}
	var own []*txRow
	for _, t := range txs {
		if !seen[t.ID] {
			own = append(own, t)
		}
	}
	if err := loadEntries(ctx, q, own); err != nil {
		return err
	}
	h.txs = append(h.txs, own...)
	// The debt legs are among the player's wallet transactions, read above.
	d, err := loadDebtState(ctx, q, id, since)
	h.debt = d
	return err
}

// truncationNotes says which wallets show only their newest lines.
func truncationNotes(p *playerRow, txs []*txRow) []string {
	counts := map[int64]int{}
	for _, t := range txs {
		counts[t.WalletID]++
	}
	var notes []string
	for _, w := range p.Wallets {
		if counts[w.ID] > MaxWalletLines {
			notes = append(notes, fmt.Sprintf("Only the newest %d %s transactions are shown; narrow the time with --since.",
				MaxWalletLines, inApp(w.Currency)))
		}
	}
	return notes
}

// playerVerdict sums the player up: balances, debt, and every order that
// needs an operator.
func (h *history) playerVerdict(p *playerRow, since time.Time) verdict {
	v := verdict{headline: "Nothing open"}
	var bal []string
	for _, w := range p.Wallets {
		bal = append(bal, units(w.Balance, w.Currency))
	}
	if len(bal) == 0 {
		bal = []string{"no wallet yet"}
	}
	s := fmt.Sprintf("Player %d (%s) holds %s", p.ID, p.Name, strings.Join(bal, " and "))
	if h.debt != nil && h.debt.Outstanding > 0 {
		s += fmt.Sprintf(" and owes %s (conversions are refused until it is settled)", units(h.debt.Outstanding, "mana"))
		v.headline, v.attention = "Owes "+units(h.debt.Outstanding, "mana"), true
	}
	v.add(s + ".")
	v.add(h.orderCounts(since))
	v.add(h.forgivenSentence())
	for _, o := range h.orders {
		if ov := h.orderVerdict(o); ov.attention {
			v.add(fmt.Sprintf("Order %d: %s", o.ID, ov.text()))
			if !v.attention {
				v.headline = "Needs attention"
			}
			v.attention = true
		}
	}
	return v
}

// moneyBack is what went back of an order's money, for the player's
// counts: "paid once" alone would hide two orders refunded in full.
func moneyBack(o *orderRow) string {
	switch {
	case o.Disputed:
		return " and disputed"
	case o.RefundedAmount > 0 && o.RefundedAmount >= o.Amount:
		return " and refunded"
	case o.RefundedAmount > 0:
		return " and refunded in part"
	}
	return ""
}

// forgivenSentence says how much of the player's debt an operator
// forgave in this history, or "".
func (h *history) forgivenSentence() string {
	if h.debt == nil || len(h.debt.Forgiven) == 0 {
		return ""
	}
	var mana int64
	for _, f := range h.debt.Forgiven {
		mana += f.Mana
	}
	return fmt.Sprintf("%s of debt forgiven by an operator (%s).", units(mana, "mana"), plural(len(h.debt.Forgiven), "write-off"))
}

// orderCounts counts the orders by their verdict's headline and what went
// back of their money.
func (h *history) orderCounts(since time.Time) string {
	if len(h.orders) == 0 {
		return ""
	}
	counts := map[string]int{}
	var order []string
	for _, o := range h.orders {
		hl := h.orderVerdict(o).headline + moneyBack(o)
		if counts[hl] == 0 {
			order = append(order, hl)
		}
		counts[hl]++
	}
	parts := make([]string, len(order))
	for i, hl := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[hl], strings.ToLower(hl))
	}
	when := ""
	if !since.IsZero() {
		when = " since " + minute(since)
	}
	return fmt.Sprintf("%s%s: %s.", titled(plural(len(h.orders), "order")), when, strings.Join(parts, ", "))
}
