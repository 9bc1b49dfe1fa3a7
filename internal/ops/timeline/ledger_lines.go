package timeline

import (
	"fmt"
	"strings"

	"github.com/fibe-dev/billing/wallet"
)

// adjustPrefix starts the reference of an operator's adjustment
// (`billing wallet adjust`); other adjustments (seeds, benchmarks) are not
// an operator's.
const adjustPrefix = "adjust: "

// ledgerLines are the wallet transactions (each once, however it was
// found) and the forgiveness decisions.
func (h *history) ledgerLines() []Line {
	var out []Line
	seen := map[int64]bool{}
	for _, t := range h.allTxs() {
		if !seen[t.ID] {
			seen[t.ID] = true
			out = append(out, txLine(t))
		}
	}
	if h.debt != nil {
		for _, f := range h.debt.Forgiven {
			out = append(out, forgivenLine(f, h.playerID()))
		}
	}
	return out
}

func (h *history) allTxs() []*txRow {
	if h.debt == nil {
		return h.txs
	}
	return append(append([]*txRow(nil), h.txs...), h.debt.Legs...)
}

func (h *history) playerID() int64 {
	if h.player != 0 {
		return h.player
	}
	if len(h.orders) > 0 {
		return h.orders[0].PlayerID
	}
	return 0
}

func txLine(t *txRow) Line {
	l := Line{At: t.CreatedAt, Layer: LayerWallet, Type: "wallet", Keys: []Key{{KeyWallet, t.Key}}, Entries: t.Entries,
		Refs: Refs{TransactionID: t.ID, PlayerID: t.PlayerID}}
	what := fmt.Sprintf("%s %s", signed(t.Amount, t.Currency), t.Kind)
	switch wallet.Kind(t.Kind) {
	case wallet.KindDebt:
		l.Layer, l.Type = LayerDebt, "debt_opened"
		what = fmt.Sprintf("Debt opened: %s lent from receivable, which the clawback took at once", units(t.Amount, t.Currency))
	case wallet.KindDebtSettlement:
		l.Layer, l.Type = LayerDebt, "debt_settled"
		what = fmt.Sprintf("Debt settled: %s of a later credit paid towards it", units(-t.Amount, t.Currency))
	case wallet.KindDebtWriteOff:
		l.Layer, l.Type = LayerDebt, "debt_written_off"
		what = fmt.Sprintf("Debt written off: %s leg", signed(t.Amount, t.Currency))
	case wallet.KindClawbackReversal:
		what = fmt.Sprintf("%s given back", signed(t.Amount, t.Currency))
	case wallet.KindAdjustment:
		if reason, ok := strings.CutPrefix(t.Reference, adjustPrefix); ok {
			l.Layer, l.Type = LayerOperator, "adjustment"
			what = fmt.Sprintf("Operator adjustment %s: %s", signed(t.Amount, t.Currency), reason)
		}
	}
	if l.Type != "adjustment" {
		what += " (" + t.Reference + ")"
	}
	l.Text = fmt.Sprintf("%s; wallet balance after: %s", what, units(t.BalanceAfter, t.Currency))
	return l
}

// EntriesText spells a wallet line's ledger entries:
// "wallet +1000 (balance after 1000), mana_issued -1000".
func (l Line) EntriesText() string {
	parts := make([]string, len(l.Entries))
	for i, e := range l.Entries {
		parts[i] = fmt.Sprintf("%s %+d", e.Account, e.Amount)
		if e.BalanceAfter != nil {
			parts[i] += fmt.Sprintf(" (balance after %d)", *e.BalanceAfter)
		}
	}
	return strings.Join(parts, ", ")
}

func forgivenLine(f *forgivenRow, player int64) Line {
	l := Line{At: f.CreatedAt, Layer: LayerOperator, Type: "debt_forgiven", Keys: []Key{{KeyForgiveness, f.Key}},
		Refs: Refs{PlayerID: player}}
	if f.Mana == 0 {
		l.Text = "Operator forgiveness found nothing owed (0 Mana; the key is spent): " + f.Reason
	} else {
		l.Text = fmt.Sprintf("Operator forgave %s of debt: %s", units(f.Mana, "mana"), f.Reason)
	}
	return l
}
