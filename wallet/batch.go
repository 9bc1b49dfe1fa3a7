package wallet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/dbtx"
)

// PostManyTx applies ps inside the caller's transaction, each exactly as
// PostTx would (the pre-check by key, the locked conditional statement under
// its own savepoint, the rescue of a concurrent winner), but in a few round
// trips for the whole batch instead of two per post: one lookup of every
// key; then, when every new post is a debit (a batch of fund_day jobs), one
// set-based statement for all of them (debitSetSQL); what that did not
// apply (a refusal, a failed statement) and any other batch go as every
// statement in one pipeline under one savepoint; only if one of them fails
// is the pipeline undone and each post redone under a savepoint of its own.
//
// Results are per post, in the order of ps: out[i] is the transaction
// (Replayed for a replay) or errs[i] says why post i was refused
// (ErrInsufficientBalance, *KeyReusedError, validation errors); a refused
// post leaves tx usable and the others applied. err is a failure of tx
// itself, after which the caller must roll back.
//
// Posts are applied in (player, currency) order, whatever the order of ps,
// so that two batches locking the same wallets take them in the same order
// and never deadlock.
func (s *Store) PostManyTx(ctx context.Context, tx pgx.Tx, ps []PostParams) (out []*Transaction, errs []error, err error) {
	start := time.Now()
	out, errs = make([]*Transaction, len(ps)), make([]error, len(ps))
	defer func() {
		for i, p := range ps {
			observe(p.Kind, start, out[i] != nil && out[i].Replayed, errs[i])
		}
	}()
	legs := make([]leg, len(ps))
	var keys []string
	for i, p := range ps {
		if legs[i], errs[i] = newLeg(p); errs[i] == nil {
			keys = append(keys, legs[i].key)
		}
	}
	stored, err := lookupMany(ctx, tx, keys)
	if err != nil {
		return out, errs, err
	}
	pending, again := s.prepare(legs, errs, out, stored)
	if allDebits(legs, pending) {
		if pending, err = applyDebitSet(ctx, tx, legs, pending, out); err != nil {
			return out, errs, err
		}
	}
	applied, err := applyAll(ctx, tx, legs, pending, out, errs)
	if err != nil {
		return out, errs, err
	}
	if !applied {
		if err := s.applyPipelined(ctx, tx, legs, pending, out, errs); err != nil {
			return out, errs, err
		}
	}
	for _, i := range pending {
		if errs[i] == errRefused {
			out[i], errs[i] = s.rescue(ctx, tx, legs[i], errRefused)
		}
	}
	// A key given twice in one batch: the first application is now visible
	// in tx, so the ordinary path answers the others as replays.
	for _, i := range again {
		out[i], errs[i] = s.post(ctx, tx, ps[i])
	}
	return out, errs, nil
}

// prepare answers the posts whose key is already stored and returns the
// indexes still to apply, in lock order, and those repeating a key of the
// batch.
func (s *Store) prepare(legs []leg, errs []error, out []*Transaction, stored map[string]*Transaction) (pending, again []int) {
	seen := map[string]bool{}
	for i, l := range legs {
		switch {
		case errs[i] != nil:
		case stored[l.key] != nil:
			t := *stored[l.key]
			out[i], errs[i] = l.replay(&t)
		case seen[l.key]:
			again = append(again, i)
		default:
			seen[l.key] = true
			pending = append(pending, i)
		}
	}
	slices.SortStableFunc(pending, func(a, b int) int {
		return cmp.Or(cmp.Compare(legs[a].playerID, legs[b].playerID),
			cmp.Compare(legs[a].currency, legs[b].currency))
	})
	return pending, again
}

// batchSavepoint guards applyAll's pipeline as a whole.
const batchSavepoint = "wallet_batch"

// applyAll is the common case in one round trip: every pending statement
// under ONE savepoint, without a savepoint of its own (a subtransaction
// per post costs its SAVEPOINT and RELEASE, and past 64 of them in one
// transaction PostgreSQL's subtransaction cache overflows). A refusal is
// an answer, not an error. If any statement fails (a concurrent winner's
// key, an overflow), the whole pipeline is rolled back, nothing of it
// stays, and it reports applied == false for applyPipelined to redo the
// posts one savepoint each.
func applyAll(ctx context.Context, tx pgx.Tx, legs []leg, pending []int, out []*Transaction, errs []error) (applied bool, err error) {
	if len(pending) == 0 {
		return true, nil
	}
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + batchSavepoint)
	for _, i := range pending {
		sql, args := legs[i].sql()
		b.Queue(sql, args...)
	}
	b.Queue("RELEASE SAVEPOINT " + batchSavepoint)
	br := tx.SendBatch(ctx, b)
	failed := readAll(br, pending, out, errs)
	if cerr := br.Close(); failed == nil && cerr != nil {
		failed = cerr
	}
	if failed == nil {
		return true, nil
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+batchSavepoint+"; RELEASE SAVEPOINT "+batchSavepoint); err != nil {
		return false, fmt.Errorf("wallet: roll back batch after %w: %w", failed, err)
	}
	for _, i := range pending {
		out[i], errs[i] = nil, nil
	}
	return false, nil
}

// readAll reads applyAll's answers; the first error stops it.
func readAll(br pgx.BatchResults, pending []int, out []*Transaction, errs []error) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	for _, i := range pending {
		t, err := scanTx(br.QueryRow())
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			errs[i] = errRefused
		case err != nil:
			return err
		default:
			out[i] = t
		}
	}
	_, err := br.Exec()
	return err
}

// applyPipelined sends the pending posts' statements in one pipeline. A
// statement error stops the pipeline where it happened (PostgreSQL skips
// the rest): that post's savepoint is rolled back, it is rescued or refused
// alone, and the remaining posts go out in a new pipeline.
func (s *Store) applyPipelined(ctx context.Context, tx pgx.Tx, legs []leg, pending []int, out []*Transaction, errs []error) error {
	for len(pending) > 0 {
		failed, err := sendPosts(ctx, tx, legs, pending, out, errs)
		if failed < 0 && err != nil {
			return fmt.Errorf("wallet: post batch: %w", err)
		}
		if failed >= 0 {
			// Undo the failed post first: until then tx is aborted.
			if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint+"; RELEASE SAVEPOINT "+savepoint); rerr != nil {
				return fmt.Errorf("wallet: roll back savepoint after %w: %w", err, rerr)
			}
			i := pending[failed]
			out[i], errs[i] = s.rescue(ctx, tx, legs[i], classify(err))
		}
		if failed < 0 {
			return nil
		}
		pending = pending[failed+1:]
	}
	return nil
}

// sendPosts pipelines SAVEPOINT, statement, RELEASE for each pending post
// and reads the answers (a refusal is an answer: errRefused in errs). When a
// statement failed it returns the position in pending of the failed post
// and its error; failed < 0 with an error is a failure of the pipeline
// itself.
func sendPosts(ctx context.Context, tx pgx.Tx, legs []leg, pending []int, out []*Transaction, errs []error) (failed int, err error) {
	b := &pgx.Batch{}
	for _, i := range pending {
		sql, args := legs[i].sql()
		b.Queue("SAVEPOINT " + savepoint)
		b.Queue(sql, args...)
		b.Queue("RELEASE SAVEPOINT " + savepoint)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for n, i := range pending {
		if _, err := br.Exec(); err != nil {
			return n, err
		}
		t, err := scanTx(br.QueryRow())
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			errs[i] = errRefused
		case err != nil:
			return n, err
		default:
			out[i] = t
		}
		if _, err := br.Exec(); err != nil {
			return n, err
		}
	}
	return -1, br.Close()
}

// lookupMany returns the stored transactions of keys, by key.
func lookupMany(ctx context.Context, q dbtx.DB, keys []string) (map[string]*Transaction, error) {
	out := map[string]*Transaction{}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT `+txColumns+` FROM wallet_transactions WHERE idempotency_key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("wallet: look up keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		t, err := scanTx(rows)
		if err != nil {
			return nil, fmt.Errorf("wallet: look up keys: %w", err)
		}
		out[t.IdempotencyKey] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("wallet: look up keys: %w", err)
	}
	return out, nil
}
