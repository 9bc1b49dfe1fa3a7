package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/migrations"
	"github.com/fibe-dev/billing/wallet"
)

// derivedForms is every key form the system derives, spelled out (not
// read from the wallet's list) and as its constructors build them, each
// with the reserved namespace the refusal must name.
func derivedForms(player, order int64) map[string]string {
	long := strings.Repeat("k", 190)
	sum := sha256.Sum256([]byte(long))
	return map[string]string{
		"order:" + strconv.FormatInt(order, 10) + ":fulfilment":             "order:",
		wallet.FulfilmentKey(order + 1).String():                            "order:",
		"order:7:fulfilment:settle":                                         "order:",
		"payment:3:1:re_123":                                                "payment:",
		wallet.ReversalKey(3, 2, "dp_9").String():                           "payment:",
		wallet.ReversalKey(3, 2, "dp_9").GivenBack().String():               "payment:",
		"payment:3:1:re_123:mana":                                           "payment:",
		"marquee:5:2026-03-01:funding":                                      "marquee:",
		wallet.FundingKey(6, "2026-03-02").String():                         "marquee:",
		"api:" + strconv.FormatInt(player, 10) + ":conversion:abc":          "api:",
		wallet.APIKey(player, "conversion", "abc").String():                 "api:",
		"api:1:conversion/sha256:" + hex.EncodeToString(sum[:]):             "api:",
		wallet.APIKey(player, "conversion", "abc").String() + ":mana_debit": "api:",
		"operator:adjust:ops-1":                                             "operator:",
		wallet.OperatorKey(wallet.OperatorForgive, "fg-1").String():         "operator:",
		"c1" + wallet.ManaDebitSuffix:                                       wallet.ManaDebitSuffix,
		"c1" + wallet.SparksCreditSuffix:                                    wallet.SparksCreditSuffix,
		"cb:debt":                                                           ":debt",
		"cb:mana":                                                           ":mana",
		"cb:sparks":                                                         ":sparks",
		"ops-1:settle":                                                      ":settle",
		"fg-1:write_off":                                                    ":write_off",
		"fg-1:receivable":                                                   ":receivable",
		"step:back":                                                         ":back",
	}
}

// ledgerState is what a refused command must leave as it was.
func ledgerState(t *testing.T, pool *pgxpool.Pool) [4]int64 {
	t.Helper()
	var s [4]int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM wallet_transactions), (SELECT count(*) FROM debt_forgiveness),
		(SELECT coalesce(sum(balance), 0) FROM wallets), (SELECT coalesce(sum(outstanding), 0) FROM debts)`).
		Scan(&s[0], &s[1], &s[2], &s[3]))
	return s
}

// An operator cannot take a key the system derives: every derived form,
// given to `wallet adjust` (credit and debit) and `debts forgive`, is
// refused with the namespace named, and nothing changes, not even for a
// player who owes (a forgiveness would clear it) or an order still
// waiting for its payment.
func TestOperatorCommandsRefuseDerivedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}
	var player int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('o') RETURNING id`).Scan(&player))
	o, err := fulfillment.CreateCheckout(ctx, pool, fulfillment.DefaultSKUs(), fulfillment.CheckoutParams{PlayerID: player,
		SKU: "mana_1000", Provider: provider.Paddle})
	require.NoError(t, err)
	p := strconv.FormatInt(player, 10)
	runBilling(t, env, "wallet", "adjust", "--player", p, "--currency", "sparks", "--amount", "50", "--reason", "r", "--key", "seed")
	tx := testdb.Begin(t, pool)
	_, err = wallet.New(pool, wallet.Options{}).ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: player, Mana: 80,
		Key: wallet.CallerKey("cb"), Reference: "t"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	before := ledgerState(t, pool)
	require.Equal(t, int64(30), before[3], "the player owes 30 Mana")

	for key, ns := range derivedForms(player, o.ID) {
		for _, args := range [][]string{
			{"wallet", "adjust", "--player", p, "--currency", "mana", "--amount", "1", "--reason", "goodwill", "--key", key},
			{"wallet", "adjust", "--player", p, "--currency", "sparks", "--amount", "-1", "--reason", "fix", "--key", key},
			{"debts", "forgive", "--player", p, "--reason", "support", "--key", key},
		} {
			out := runBillingFail(t, env, args...)
			require.Contains(t, out, "reserved", "%s %s", args[0], key)
			require.Contains(t, out, strconv.Quote(ns), "%s %s", args[0], key)
		}
	}
	require.Equal(t, before, ledgerState(t, pool))
	require.Zero(t, countRows(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key = $1`,
		wallet.FulfilmentKey(o.ID).String()), "the order's key is still free for its payment")
	audittest.RequireClean(t, pool, audit.Options{})
}

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// oldOperatorRows writes what `wallet adjust` and `debts forgive` stored
// before operator keys had a namespace: the raw key on the operator's own
// transaction, on the settlement its Mana credit made, on a forgiveness's
// two legs and in debt_forgiveness. The current wallet writes the same
// rows under operator:<purpose>:<key>; renamed back, they are the old rows.
func oldOperatorRows(t *testing.T, pool *pgxpool.Pool, player int64, long string) {
	t.Helper()
	ctx := context.Background()
	s := wallet.New(pool, wallet.Options{})
	for _, a := range []wallet.AdjustParams{
		{PlayerID: player, Currency: wallet.Sparks, Amount: 40, Reason: "goodwill", Key: "ops-1"},
		{PlayerID: player, Currency: wallet.Sparks, Amount: -5, Reason: "fix", Key: "ops-2"},
		{PlayerID: player, Currency: wallet.Mana, Amount: 100, Reason: "settles", Key: "ops-3"},
		{PlayerID: player, Currency: wallet.Sparks, Amount: 1, Reason: "long", Key: long},
	} {
		if a.Key == "ops-3" { // a debt for its credit to settle
			tx := testdb.Begin(t, pool)
			_, err := s.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: player, Mana: 60,
				Key: wallet.CallerKey("cb"), Reference: "t"})
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
		}
		_, err := s.Adjust(ctx, a)
		require.NoError(t, err)
	}
	tx := testdb.Begin(t, pool)
	_, err := s.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: player, Mana: 500, Key: wallet.CallerKey("cb2"), Reference: "t"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	_, err = s.ForgiveDebt(ctx, player, "fg-1", "support")
	require.NoError(t, err)
	sum := sha256.Sum256([]byte(long))
	for _, q := range [][]any{
		{`UPDATE wallet_transactions SET idempotency_key = $2 WHERE idempotency_key = $1`,
			"operator:adjust/sha256:" + hex.EncodeToString(sum[:]), long},
		{`UPDATE wallet_transactions SET idempotency_key = substr(idempotency_key, length($1) + 1) WHERE idempotency_key LIKE $1 || '%'`,
			"operator:adjust:"},
		{`UPDATE wallet_transactions SET idempotency_key = substr(idempotency_key, length($1) + 1) WHERE idempotency_key LIKE $1 || '%'`,
			"operator:forgive:"},
		{`UPDATE debt_forgiveness SET key = substr(key, length($1) + 1)`, "operator:forgive:"},
	} {
		_, err := pool.Exec(ctx, q[0].(string), q[1:]...)
		require.NoError(t, err)
	}
	require.Zero(t, countRows(t, pool, `SELECT count(*) FROM wallet_transactions WHERE idempotency_key LIKE 'operator%'`))
}

// The upgrade (migration 00011, run by `billing migrate`) moves the keys
// operators stored before into their namespace, legs included, and leaves
// every other key alone: replaying each old command afterwards answers its
// first result and moves nothing (the Mana credit settles no debt again,
// the forgiveness forgives no new debt), and the audit is clean.
func TestOperatorKeysSurviveTheUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testdb.EmptyURL(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = migrations.MigrateTo(ctx, pool, nil, 10)
	require.NoError(t, err)
	var player int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('u') RETURNING id`).Scan(&player))
	long := strings.Repeat("L", 190)
	oldOperatorRows(t, pool, player, long)
	_, err = wallet.New(pool, wallet.Options{}).Credit(ctx, wallet.PostParams{PlayerID: player, Currency: wallet.Sparks,
		Amount: 3, Kind: wallet.KindAdjustment, Reference: "seed", IdempotencyKey: wallet.CallerKey("not-an-operator")})
	require.NoError(t, err)
	old := keysByName(t, pool)
	before := ledgerState(t, pool)

	runBilling(t, env, "migrate")
	renamed := keysByName(t, pool)
	sum := sha256.Sum256([]byte(long))
	for oldKey, newKey := range map[string]string{
		"ops-1": "operator:adjust:ops-1", "ops-2": "operator:adjust:ops-2", "ops-3": "operator:adjust:ops-3",
		"ops-3:settle": "operator:adjust:ops-3:settle", long: "operator:adjust/sha256:" + hex.EncodeToString(sum[:]),
		"fg-1:write_off": "operator:forgive:fg-1:write_off", "fg-1:receivable": "operator:forgive:fg-1:receivable",
		"cb:mana": "cb:mana", "cb2:debt": "cb2:debt", "not-an-operator": "not-an-operator",
	} {
		require.NotZero(t, old[oldKey], oldKey)
		require.Equal(t, old[oldKey], renamed[newKey], "%s -> %s", oldKey, newKey)
	}
	require.Len(t, renamed, len(old))
	require.Equal(t, int64(1), countRows(t, pool, `SELECT count(*) FROM debt_forgiveness WHERE key = 'operator:forgive:fg-1'`))

	p := strconv.FormatInt(player, 10)
	replayOldAdjustments(t, env, p, long, renamed)
	require.Equal(t, before, ledgerState(t, pool), "the replays moved nothing")
	// A new debt: the replayed forgiveness must not forgive it.
	tx := testdb.Begin(t, pool)
	c, err := wallet.New(pool, wallet.Options{}).ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: player, Mana: 7,
		Key: wallet.CallerKey("cb3"), Reference: "t"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	owing := ledgerState(t, pool)
	require.Positive(t, c.Debt)
	require.Equal(t, before[3]+c.Debt, owing[3])
	var f forgivenessJSON
	out := runBilling(t, env, "debts", "forgive", "--player", p, "--key", "fg-1", "--reason", "support", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &f), out)
	require.Equal(t, forgivenessJSON{PlayerID: player, Mana: 424, Replayed: true}, f)
	require.Equal(t, owing, ledgerState(t, pool), "the replayed forgiveness forgave nothing new")
	audittest.RequireClean(t, pool, audit.Options{LedgerOnly: true})
}

// keysByName is every wallet transaction's id by its key.
func keysByName(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT idempotency_key, id FROM wallet_transactions`)
	require.NoError(t, err)
	out := map[string]int64{}
	var k string
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&k, &id}, func() error { out[k] = id; return nil })
	require.NoError(t, err)
	return out
}

// replayOldAdjustments runs oldOperatorRows' adjustments again through
// wallet adjust: each answers the transaction stored under its key's new
// name, as a replay.
func replayOldAdjustments(t *testing.T, env []string, player, long string, stored map[string]int64) {
	t.Helper()
	for _, args := range [][]string{
		{"--currency", "sparks", "--amount", "40", "--reason", "goodwill", "--key", "ops-1"},
		{"--currency", "sparks", "--amount", "-5", "--reason", "fix", "--key", "ops-2"},
		{"--currency", "mana", "--amount", "100", "--reason", "settles", "--key", "ops-3"},
		{"--currency", "sparks", "--amount", "1", "--reason", "long", "--key", long},
	} {
		var adj struct {
			ID       string `json:"id"`
			Replayed bool   `json:"replayed"`
		}
		out := runBilling(t, env, append([]string{"wallet", "adjust", "--player", player, "--json"}, args...)...)
		require.NoError(t, json.Unmarshal([]byte(out), &adj), out)
		require.True(t, adj.Replayed, out)
		key := wallet.OperatorKey(wallet.OperatorAdjust, args[len(args)-1]).String()
		require.Equal(t, strconv.FormatInt(stored[key], 10), adj.ID)
	}
}

// Operators race an order's own fulfilment with its key: eight `wallet
// adjust` and `debts forgive` processes given --key order:<id>:fulfilment
// run while eight callers post that fulfilment's Mana credit. Every command
// fails naming the reserved namespace, the fulfilment applies once (one
// fresh post, the others replays of it, the debt settled once), and the
// audit is clean.
func TestOperatorsRacingAnOrdersFulfilment(t *testing.T) {
	t.Parallel()
	bin := billingBin(t)
	const n = 8
	ctx := context.Background()
	dbURL, pool := newDB(t)
	var player int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO players (name) VALUES ('o') RETURNING id`).Scan(&player))
	s := wallet.New(pool, wallet.Options{})
	tx := testdb.Begin(t, pool)
	_, err := s.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: player, Mana: 30, Key: wallet.CallerKey("cb"), Reference: "t"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	key := wallet.FulfilmentKey(41)
	p := strconv.FormatInt(player, 10)
	commands := [][]string{
		{"wallet", "adjust", "--player", p, "--currency", "mana", "--amount", "100", "--reason", "goodwill", "--key", key.String()},
		{"wallet", "adjust", "--player", p, "--currency", "mana", "--amount", "-1", "--reason", "fix", "--key", key.String()},
		{"debts", "forgive", "--player", p, "--reason", "support", "--key", key.String()},
	}
	outs, cmdErrs := make([][]byte, n), make([]error, n)
	txs, errs := make([]*wallet.Transaction, n), make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			cmd := exec.Command(bin, commands[i%len(commands)]...)
			cmd.Env = append(os.Environ(), "BILLING_DATABASE_URL="+dbURL)
			<-start
			outs[i], cmdErrs[i] = cmd.CombinedOutput()
		})
		wg.Go(func() {
			<-start
			txs[i], errs[i] = fulfil(ctx, s, pool, player, key)
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i := range n {
		require.Error(t, cmdErrs[i], "%s", outs[i])
		require.Contains(t, string(outs[i]), "reserved", "%s", outs[i])
		require.Contains(t, string(outs[i]), `"order:"`, "%s", outs[i])
		require.NoError(t, errs[i])
		require.Equal(t, txs[0].ID, txs[i].ID)
		if !txs[i].Replayed {
			fresh++
		}
	}
	require.Equal(t, 1, fresh)
	require.Equal(t, [4]int64{4, 0, 70, 0}, ledgerState(t, pool), "the clawback (debt, Mana), the fulfilment, its settlement; no debt left")
	require.Zero(t, countRows(t, pool, `SELECT count(*) FROM wallet_transactions WHERE kind IN ('adjustment', 'debt_write_off')`))
	audittest.RequireClean(t, pool, audit.Options{LedgerOnly: true})
}

// fulfil posts the Mana an order mints under its key, as the fulfilment
// worker does: a credit that settles the player's debt first.
func fulfil(ctx context.Context, s *wallet.Store, pool *pgxpool.Pool, player int64, key wallet.Key) (*wallet.Transaction, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	t, _, err := s.CreditSettlingTx(ctx, tx, wallet.PostParams{PlayerID: player, Currency: wallet.Mana, Amount: 100,
		Kind: wallet.KindPurchase, Reference: "order", IdempotencyKey: key, Account: wallet.AccountManaIssued})
	if err != nil {
		return nil, err
	}
	return t, tx.Commit(ctx)
}
