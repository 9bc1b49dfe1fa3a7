package wallet

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostManyTx applies ps inside the caller's transaction, each exactly as
// PostTx would: a batch of debits (a batch of fund_day jobs) goes as ONE
// set statement under a savepoint (setRows), which answers the stored keys
// and applies each wallet's debits that fit; then PostTx takes whatever it
// could not: a refused debit (the wallet's later debits may fit), a debit
// of a missing wallet, a key given twice in the batch, every post of a
// batch that is not all debits, and every post when the set statement
// failed (a concurrent winner of a key).
//
// Results are per post, in the order of ps: out[i] is the transaction
// (Replayed for a replay) or errs[i] says why post i was refused
// (ErrInsufficientBalance, *KeyReusedError, validation errors); a refused
// post leaves tx usable and the others applied. err is a failure of tx
// itself, after which the caller must roll back.
//
// Posts are applied in (player, currency) order, whatever the order of ps,
// so that two batches locking the same wallets take them in the same order
// and never deadlock: the set statement locks its wallets in that order
// first, and what PostTx takes after it is in that order too.
func (s *Store) PostManyTx(ctx context.Context, tx pgx.Tx, ps []PostParams) (out []*Transaction, errs []error, err error) {
	start := time.Now()
	out, errs = make([]*Transaction, len(ps)), make([]error, len(ps))
	defer func() {
		for i, p := range ps {
			observe(p.Kind, start, out[i] != nil && out[i].Replayed, errs[i])
		}
	}()
	legs := make([]leg, len(ps))
	for i, p := range ps {
		legs[i], errs[i] = newLeg(p)
	}
	order, again := lockOrder(legs, errs)
	rest := order
	if allDebits(legs, order) {
		if rest, err = s.applySet(ctx, tx, legs, order, out, errs); err != nil {
			return out, errs, err
		}
	}
	// A key given twice: its first post is now visible in tx, so PostTx
	// answers the others as replays.
	for _, i := range append(rest, again...) {
		out[i], errs[i] = s.post(ctx, tx, ps[i])
	}
	return out, errs, nil
}

// lockOrder returns the valid posts to apply, in (player, currency) then
// batch order, and those repeating a key of the batch, in batch order.
func lockOrder(legs []leg, errs []error) (order, again []int) {
	seen := map[string]bool{}
	for i, l := range legs {
		switch {
		case errs[i] != nil:
		case seen[l.key]:
			again = append(again, i)
		default:
			seen[l.key] = true
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(legs[a].playerID, legs[b].playerID), cmp.Compare(legs[a].currency, legs[b].currency))
	})
	return order, again
}

// allDebits reports whether the batch is the set statement's: more than
// one post, every one a debit.
func allDebits(legs []leg, order []int) bool {
	for _, i := range order {
		if legs[i].delta >= 0 {
			return false
		}
	}
	return len(order) > 1
}

// applySet runs the set statement over the posts of order and answers
// those it took; it returns the others, in lock order. When the statement
// fails its savepoint is rolled back, nothing of it stays, and every post
// is returned; err is a failure of tx itself.
func (s *Store) applySet(ctx context.Context, tx pgx.Tx, legs []leg, order []int, out []*Transaction, errs []error) (rest []int, err error) {
	a, err := inSavepoint(ctx, tx, batchStatement, setArgs(legs, order))
	if errors.Is(err, errRollback) {
		return nil, err
	}
	if err != nil {
		debitSetsTotal.WithLabelValues("fallback").Inc()
		return order, nil
	}
	debitSetsTotal.WithLabelValues("applied").Inc()
	byKey := make(map[string]*Transaction, len(a.txs))
	for _, t := range a.txs {
		byKey[t.IdempotencyKey] = t
	}
	for _, i := range order {
		switch t := byKey[legs[i].key]; {
		case t == nil:
			rest = append(rest, i)
		case t.Replayed:
			out[i], errs[i] = legs[i].replay(t)
		default:
			out[i] = t
		}
	}
	return rest, nil
}

// setArgs are the set statement's parameters: each leg parameter as an
// array, in order.
func setArgs(legs []leg, order []int) []any {
	n := len(order)
	players, amounts := make([]int64, n), make([]int64, n)
	currencies, kinds, refs, keys, accounts := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for j, i := range order {
		l := legs[i]
		players[j], currencies[j], amounts[j], kinds[j] = l.playerID, string(l.currency), l.delta, string(l.kind)
		refs[j], keys[j], accounts[j] = l.reference, l.key, l.account
	}
	return []any{players, currencies, amounts, kinds, refs, keys, accounts}
}
