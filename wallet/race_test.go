package wallet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// race runs fn from n goroutines released at the same instant.
func race(n int, fn func(i int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			fn(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// requireOnce checks that key moved the wallet exactly once, by amount.
func requireOnce(t *testing.T, pool *pgxpool.Pool, key string, results []*wallet.Transaction, errs []error) {
	t.Helper()
	replays := 0
	for i, err := range errs {
		require.NoError(t, err, "caller %d", i)
		require.Equal(t, results[0].ID, results[i].ID, "caller %d got another transaction", i)
		if results[i].Replayed {
			replays++
		}
	}
	require.Equal(t, len(results)-1, replays, "all but one caller see a replay")
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = $1`, key))
	require.Equal(t, int64(2), count(t, pool,
		`SELECT count(*) FROM ledger_entries e JOIN wallet_transactions t ON t.id = e.transaction_id WHERE t.idempotency_key = $1`, key))
}

func TestSameKeyRace(t *testing.T) {
	t.Parallel()
	const n = 50
	for _, dir := range []wallet.Direction{wallet.Credit, wallet.Debit} {
		t.Run(string(dir), func(t *testing.T) {
			ctx := context.Background()
			pool := newPool(t, n)
			s := wallet.New(pool, wallet.Options{})
			p := newPlayer(t, pool)
			// A debit of 60 on 100: only one can ever fit, so a loser that
			// waited on the row lock is refused and must still answer with
			// the winner's row.
			fund(t, s, p, wallet.Sparks, 100)
			params := wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 60, Direction: dir,
				Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey("same:" + string(dir))}
			results, errs := make([]*wallet.Transaction, n), make([]error, n)
			race(n, func(i int) { results[i], errs[i] = s.Post(ctx, params) })
			requireOnce(t, pool, params.IdempotencyKey.String(), results, errs)
			want := map[wallet.Direction]int64{wallet.Credit: 160, wallet.Debit: 40}[dir]
			require.Equal(t, want, balance(t, pool, p, wallet.Sparks))
		})
	}
}

// The same race inside callers' transactions: the loser's insert fails
// under the savepoint, and its caller still commits.
func TestSameKeyRaceInCallersTransactions(t *testing.T) {
	t.Parallel()
	const n = 50
	for _, dir := range []wallet.Direction{wallet.Credit, wallet.Debit} {
		t.Run(string(dir), func(t *testing.T) {
			ctx := context.Background()
			pool := newPool(t, n)
			s := wallet.New(pool, wallet.Options{})
			p := newPlayer(t, pool)
			fund(t, s, p, wallet.Sparks, 100)
			_, err := pool.Exec(ctx, `CREATE TABLE caller_work (caller int PRIMARY KEY, transaction_id bigint NOT NULL)`)
			require.NoError(t, err)
			params := wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 60, Direction: dir,
				Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey("same-tx:" + string(dir))}
			results, errs := make([]*wallet.Transaction, n), make([]error, n)
			race(n, func(i int) {
				errs[i] = func() error {
					tx, err := pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(ctx)
					if results[i], err = s.PostTx(ctx, tx, params); err != nil {
						return err
					}
					// The caller's own work after the post must still run.
					if _, err := tx.Exec(ctx, `INSERT INTO caller_work VALUES ($1, $2)`, i, results[i].ID); err != nil {
						return fmt.Errorf("caller's transaction unusable: %w", err)
					}
					return tx.Commit(ctx)
				}()
			})
			requireOnce(t, pool, params.IdempotencyKey.String(), results, errs)
			require.Equal(t, int64(n), count(t, pool, `SELECT count(*) FROM caller_work WHERE transaction_id = $1`, results[0].ID))
			want := map[wallet.Direction]int64{wallet.Credit: 160, wallet.Debit: 40}[dir]
			require.Equal(t, want, balance(t, pool, p, wallet.Sparks))
		})
	}
}

func TestConcurrentDebitsNeverOverdraw(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 40)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Sparks, 1000)
	const n = 200
	errs := make([]error, n)
	race(n, func(i int) {
		_, errs[i] = s.Debit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Amount: 7,
			Kind: wallet.KindFunding, IdempotencyKey: wallet.CallerKey(fmt.Sprintf("debit:%d", i))})
	})
	ok, refused := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, wallet.ErrInsufficientBalance):
			refused++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	require.Equal(t, 142, ok)
	require.Equal(t, 58, refused)
	require.Equal(t, int64(6), balance(t, pool, p, wallet.Sparks))
	require.Equal(t, int64(142), count(t, pool, `SELECT count(*) FROM ledger_entries WHERE account = 'wallet' AND amount = -7`))
	require.Equal(t, int64(142), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'funding'`))
}
