package wallet

import (
	"context"
	"fmt"
	"strings"

	"github.com/fibe-dev/billing/internal/platform/durable"
)

// AdjustParams describe an operator's manual correction.
type AdjustParams struct {
	PlayerID int64
	Currency Currency
	Amount   int64 // signed: positive credits, negative debits
	Reason   string
	Key      string // the operator's idempotency key, stored as OperatorKey(OperatorAdjust, Key)
}

// Adjust credits or debits a wallet by hand through the one post (a debit
// is refused rather than going negative). The operator's key makes it
// replay-safe; the reason is kept as the transaction's reference, so the
// ledger shows why. A Mana credit settles an open debt first, like any
// later Mana credit.
func (s *Store) Adjust(ctx context.Context, p AdjustParams) (*Transaction, error) {
	key := OperatorKey(OperatorAdjust, p.Key)
	if err := key.check(); err != nil {
		return nil, err // it names the key and the package once, like every post's
	}
	if strings.TrimSpace(p.Reason) == "" {
		return nil, fmt.Errorf("%w: an adjustment needs a reason", ErrInvalidPost)
	}
	if p.Amount == 0 {
		return nil, ErrInvalidAmount
	}
	pp := PostParams{PlayerID: p.PlayerID, Currency: p.Currency, Amount: p.Amount, Direction: Credit,
		Kind: KindAdjustment, Reference: "adjust: " + p.Reason, IdempotencyKey: key, Account: AccountAdjustments}
	if p.Amount < 0 {
		pp.Amount, pp.Direction = -p.Amount, Debit
		return s.Post(ctx, pp)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("wallet: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	t, _, err := s.CreditSettlingTx(ctx, tx, pp)
	if err != nil {
		return nil, err
	}
	return t, durable.Commit(ctx, tx)
}
