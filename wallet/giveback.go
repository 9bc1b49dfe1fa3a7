package wallet

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A write-off is recovered first. When money comes back on a reversal (a
// dispute won, an inquiry closed, a chargeback reversed) whose clawback
// left a debt that an operator then forgave, the forgiveness lost its
// cause: the Mana given back first reverses that write-off (a debit to
// bad_debt, kind debt_write_off, under <step key>:back:write_off), and
// only the rest reaches the player, settling any debt still open first.
// Without it the player would keep both the forgiven debt and the Mana.
//
// How much is recovered, taken under the player's debts row lock:
//
//	min(given back,
//	    debt the payment's clawbacks opened - what its give-backs recovered,
//	    Mana forgiven since its first debt - Mana recovered since then)
//
// so a forgiveness that came before the payment's debt, or wrote off only
// other debts already recovered, is never charged to it.

// GiveBackParams describe Mana a reversal gives back.
type GiveBackParams struct {
	PlayerID  int64
	Mana      int64
	Key       Key    // the reversal step's key: the legs derive from it
	Reference string // what gives it back
	// Clawbacks is the key prefix of the clawbacks this undoes
	// (ReversalPrefix of the payment), whose debt legs may have been
	// forgiven.
	Clawbacks string
}

// GivenBack is how a give-back was split.
type GivenBack struct {
	Recovered int64 // reversed a forgiveness (back to bad_debt)
	Settled   int64 // paid the player's open debt
	Replayed  bool
}

// GiveBackTx credits p.Mana back to the player inside tx under
// <p.Key>:back, recovers first what a forgiveness wrote off of the debts
// p.Clawbacks opened, then settles the player's open debt out of the
// wallet (<p.Key>:back:settle). A replayed step moves nothing again.
func (s *Store) GiveBackTx(ctx context.Context, tx pgx.Tx, p GiveBackParams) (*GivenBack, error) {
	if p.Mana <= 0 {
		return nil, ErrInvalidAmount
	}
	owed, err := LockDebtTx(ctx, tx, p.PlayerID)
	if err != nil {
		return nil, err
	}
	forgiven, err := recoverable(ctx, tx, p.PlayerID, p.Clawbacks)
	if err != nil {
		return nil, err
	}
	back := p.Key.GivenBack()
	t, err := s.CreditTx(ctx, tx, PostParams{PlayerID: p.PlayerID, Currency: Mana, Amount: p.Mana,
		Kind: KindClawbackReversal, Reference: p.Reference, IdempotencyKey: back, Account: AccountManaIssued})
	if err != nil || t.Replayed {
		return &GivenBack{Replayed: err == nil}, err
	}
	g := &GivenBack{Recovered: max(0, min(p.Mana, forgiven))}
	balance := t.BalanceAfter
	if g.Recovered > 0 {
		r, err := s.DebitTx(ctx, tx, PostParams{PlayerID: p.PlayerID, Currency: Mana, Amount: g.Recovered,
			Kind: KindDebtWriteOff, Reference: "write-off recovered: " + p.Reference, IdempotencyKey: back.recovery(),
			Account: AccountBadDebt})
		if err != nil {
			return nil, err
		}
		balance = r.BalanceAfter
	}
	if g.Settled = min(owed, balance); g.Settled > 0 {
		if _, err := s.DebitTx(ctx, tx, PostParams{PlayerID: p.PlayerID, Currency: Mana, Amount: g.Settled,
			Kind: KindDebtSettlement, Reference: p.Reference, IdempotencyKey: back.Settlement(),
			Account: AccountReceivable}); err != nil {
			return nil, err
		}
		if err := addDebt(ctx, tx, p.PlayerID, -g.Settled); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// recoverableSQL computes, for a player's Mana wallet and the key prefix
// of one payment's reversal steps, what a give-back of it may recover
// (before capping at what is given back). RecoverableSQL in the audit
// spells the same rule per give-back.
var recoverableSQL = `
WITH w AS (SELECT id FROM wallets WHERE player_id = $1 AND currency = 'mana'),
mine AS (SELECT min(t.id) FILTER (WHERE t.kind = 'debt') AS first,
		coalesce(sum(t.amount) FILTER (WHERE t.kind = 'debt'), 0) AS debt,
		coalesce(-sum(t.amount) FILTER (WHERE t.kind = 'debt_write_off' AND ` + isRecovery + `), 0) AS recovered
	FROM wallet_transactions t, w WHERE t.wallet_id = w.id AND left(t.idempotency_key, length($2)) = $2
		AND t.kind IN ('debt', 'debt_write_off'))
SELECT CASE WHEN mine.first IS NULL THEN 0 ELSE least(mine.debt - mine.recovered,
	(SELECT coalesce(sum(t.amount) FILTER (WHERE t.amount > 0), 0)
		- coalesce(-sum(t.amount) FILTER (WHERE t.amount < 0 AND ` + isRecovery + `), 0)
	FROM wallet_transactions t, w WHERE t.wallet_id = w.id AND t.kind = 'debt_write_off' AND t.id > mine.first))::bigint END
FROM mine`

// isRecovery is the SQL of a debt_write_off leg t that recovered a
// write-off out of Mana given back (not a forgiveness's own legs).
var isRecovery = SQLIsRecovery("t.idempotency_key")

func recoverable(ctx context.Context, tx pgx.Tx, playerID int64, clawbacks string) (int64, error) {
	var n int64
	if err := tx.QueryRow(ctx, recoverableSQL, playerID, clawbacks).Scan(&n); err != nil {
		return 0, fmt.Errorf("wallet: read forgiven debt of player %d: %w", playerID, err)
	}
	return n, nil
}
