package wallet_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/wallet"
)

// The derived keys read as their grammar says.
func TestDerivedKeysReadLikeTheirGrammar(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	sum := sha256.Sum256([]byte(long))
	for got, want := range map[wallet.Key]string{
		wallet.FulfilmentKey(42):                               "order:42:fulfilment",
		wallet.FundingKey(7, "2026-03-01"):                     "marquee:7:2026-03-01:funding",
		wallet.ReversalKey(9, 3, "re_1"):                       "payment:9:3:re_1",
		wallet.ReversalKey(9, 3, "re_1").GivenBack():           "payment:9:3:re_1:back",
		wallet.ReversalKey(9, 1, long):                         "payment:9:1:" + long[:160],
		wallet.APIKey(5, "conversion", "abc"):                  "api:5:conversion:abc",
		wallet.APIKey(5, "conversion", long):                   "api:5:conversion/sha256:" + hex.EncodeToString(sum[:]),
		wallet.OperatorKey(wallet.OperatorAdjust, "ops-1"):     "operator:adjust:ops-1",
		wallet.OperatorKey(wallet.OperatorForgive, long[:250]): "operator:forgive/sha256:" + sha(long[:250]),
		wallet.CallerKey("bench:1"):                            "bench:1",
	} {
		require.Equal(t, want, got.String())
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// reservedForms is every form the system derives keys in, each with the
// namespace a refusal names.
func reservedForms() map[string]string {
	forms := map[string]string{
		"order:1:fulfilment": "order:", "order:1:fulfilment:settle": "order:",
		"payment:2:1:re_1": "payment:", "payment:2:1:re_1:debt": "payment:", "payment:2:1:re_1:back:settle": "payment:",
		"payment:2:1:re_1:back:write_off": "payment:", "k:back:write_off": ":back:write_off",
		"marquee:3:2026-01-02:funding": "marquee:",
		"api:4:conversion:k":           "api:", "api:4:conversion:k:mana_debit": "api:", "api:4:conversion/sha256:00": "api:",
		"operator:adjust:k": "operator:", "operator:forgive:k:write_off": "operator:",
		"k" + wallet.ManaDebitSuffix: wallet.ManaDebitSuffix, "k" + wallet.SparksCreditSuffix: wallet.SparksCreditSuffix,
		"k:debt": ":debt", "k:mana": ":mana", "k:sparks": ":sparks", "k:settle": ":settle",
		"k:write_off": ":write_off", "k:receivable": ":receivable", "k:back": ":back",
	}
	// And whatever the constructors build.
	for _, k := range []wallet.Key{wallet.FulfilmentKey(8), wallet.FundingKey(8, "2026-01-03"),
		wallet.ReversalKey(8, 1, "dp_1"), wallet.ReversalKey(8, 1, "dp_1").GivenBack(),
		wallet.APIKey(8, "conversion", "k"), wallet.OperatorKey(wallet.OperatorAdjust, "k")} {
		forms[k.String()] = k.String()[:strings.Index(k.String(), ":")+1]
	}
	return forms
}

// requireReserved requires err to be a *ReservedKeyError for key in ns.
func requireReserved(t *testing.T, err error, key, ns string) {
	t.Helper()
	require.ErrorIs(t, err, wallet.ErrReservedKey, key)
	var re *wallet.ReservedKeyError
	require.ErrorAs(t, err, &re, key)
	require.Equal(t, key, re.Key)
	require.Equal(t, ns, re.Namespace, key)
	require.Contains(t, err.Error(), `"`+ns+`"`)
	require.Equal(t, 1, strings.Count(err.Error(), "wallet:"), "the error names its package once: %s", err)
}

// Every way a caller or operator names a key refuses every reserved form,
// and nothing moves: a plain post, a conversion, a clawback, an API
// conversion's client key, an adjustment (credit, debit) and a
// forgiveness of a real debt.
func TestChosenKeysStayOutOfReservedNamespaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 3)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 10)
	clawback(t, s, pool, p, 25, "cb")
	before := snapshot(t, pool)
	for key, ns := range reservedForms() {
		_, err := s.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 1, Kind: wallet.KindAdjustment,
			IdempotencyKey: wallet.CallerKey(key)})
		requireReserved(t, err, key, ns)
		_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 1, IdempotencyKey: wallet.CallerKey(key)})
		requireReserved(t, err, key, ns)
		_, err = s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 1, IdempotencyKey: wallet.APIKey(p, "conversion", key)})
		requireReserved(t, err, key, ns)
		tx := testdb.Begin(t, pool)
		_, err = s.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: p, Mana: 1, Key: wallet.CallerKey(key), Reference: "t"})
		requireReserved(t, err, key, ns)
		require.NoError(t, tx.Rollback(ctx))
		for _, amount := range []int64{1, -1} {
			_, err = s.Adjust(ctx, wallet.AdjustParams{PlayerID: p, Currency: wallet.Mana, Amount: amount, Reason: "r", Key: key})
			requireReserved(t, err, key, ns)
		}
		_, err = s.ForgiveDebt(ctx, p, key, "r")
		requireReserved(t, err, key, ns)
	}
	require.Equal(t, before, snapshot(t, pool))
	require.Equal(t, int64(15), debtOf(t, pool, p))
}

// snapshot is what a refused post must leave as it was.
func snapshot(t *testing.T, pool *pgxpool.Pool) [3]int64 {
	t.Helper()
	return [3]int64{count(t, pool, `SELECT count(*) FROM wallet_transactions`),
		count(t, pool, `SELECT count(*) FROM debt_forgiveness`),
		count(t, pool, `SELECT coalesce(sum(balance), 0) FROM wallets`)}
}

// An operator's key lives in its namespace whatever it says: the same key
// for an adjustment and a forgiveness are two keys, and neither is the key
// a caller would have posted under.
func TestOperatorKeysHaveANamespacePerPurpose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, 2)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	fund(t, s, p, wallet.Mana, 5)
	clawback(t, s, pool, p, 9, "cb")
	a, err := s.Adjust(ctx, wallet.AdjustParams{PlayerID: p, Currency: wallet.Mana, Amount: 10, Reason: "gift", Key: "same"})
	require.NoError(t, err)
	require.Equal(t, "operator:adjust:same", a.IdempotencyKey)
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = 'operator:adjust:same:settle'`))
	clawback(t, s, pool, p, 20, "cb2")
	f, err := s.ForgiveDebt(ctx, p, "same", "support")
	require.NoError(t, err)
	require.False(t, f.Replayed)
	require.Equal(t, int64(14), f.Mana)
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM debt_forgiveness WHERE key = 'operator:forgive:same'`))
	_, err = s.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 1, Kind: wallet.KindAdjustment,
		IdempotencyKey: wallet.CallerKey("same")})
	require.NoError(t, err, "a caller's key is not an operator's")
}

// While the system posts an order's fulfilment (the Mana credit that
// settles the player's debt), operators and callers race it with that
// very key: every adjustment, forgiveness, conversion and plain post
// spelling it is refused as reserved, the system's post applies once (one
// fresh answer, the rest replays of it, one settlement), and the audit is
// clean.
func TestReservedKeysRacingTheSystemsPost(t *testing.T) {
	t.Parallel()
	const n = 24
	ctx := context.Background()
	pool := newPool(t, n+2)
	s := wallet.New(pool, wallet.Options{})
	p := newPlayer(t, pool)
	clawback(t, s, pool, p, 30, "cb")
	order := wallet.FulfilmentKey(77)
	credit := wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 100, Kind: wallet.KindPurchase,
		Reference: "order:77", IdempotencyKey: order, Account: wallet.AccountManaIssued}
	chosen := []func() error{
		func() error {
			_, err := s.Adjust(ctx, wallet.AdjustParams{PlayerID: p, Currency: wallet.Mana, Amount: 100, Reason: "r", Key: order.String()})
			return err
		},
		func() error { _, err := s.ForgiveDebt(ctx, p, order.String(), "r"); return err },
		func() error {
			_, err := s.Convert(ctx, wallet.ConvertParams{PlayerID: p, Mana: 1, IdempotencyKey: wallet.CallerKey(order.String())})
			return err
		},
		func() error {
			_, err := s.Credit(ctx, wallet.PostParams{PlayerID: p, Currency: wallet.Mana, Amount: 100, Kind: wallet.KindPurchase,
				IdempotencyKey: wallet.CallerKey(order.String())})
			return err
		},
	}
	txs, errs := make([]*wallet.Transaction, n), make([]error, n)
	race(n, func(i int) {
		if i%2 == 1 {
			errs[i] = chosen[(i/2)%len(chosen)]()
			return
		}
		tx, err := pool.Begin(ctx)
		if err == nil {
			if txs[i], _, err = s.CreditSettlingTx(ctx, tx, credit); err == nil {
				err = tx.Commit(ctx)
			}
			_ = tx.Rollback(ctx)
		}
		errs[i] = err
	})
	fresh := 0
	for i := range n {
		if i%2 == 1 {
			requireReserved(t, errs[i], order.String(), "order:")
			continue
		}
		require.NoError(t, errs[i], "system post %d", i)
		require.Equal(t, txs[0].ID, txs[i].ID)
		if !txs[i].Replayed {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "one system post applied, the others replayed it")
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = $1`, order.String()))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind = 'debt_settlement'`))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind IN ('adjustment', 'conversion', 'debt_write_off')`))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM debt_forgiveness`))
	require.Equal(t, int64(70), balance(t, pool, p, wallet.Mana))
	require.Zero(t, debtOf(t, pool, p))
	audittest.RequireClean(t, pool, audit.Options{LedgerOnly: true})
}
