package httpapi

import (
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// A client's Idempotency-Key is the caller's key of the wallet post a
// conversion makes: one that spells a key the system derives (every form,
// spelled out and as the wallet builds it) is refused with 400
// invalid_idempotency_key naming the namespace, and nothing moves.
func TestConversionRefusesDerivedKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice, bob := e.newPlayer("alice"), e.newPlayer("bob")
	e.credit(alice, wallet.Mana, 100)
	b := strconv.FormatInt(bob.id, 10)
	for key, ns := range map[string]string{
		"order:12:fulfilment":                                    "order:",
		wallet.FulfilmentKey(13).String():                        "order:",
		"payment:3:1:re_123":                                     "payment:",
		wallet.ReversalKey(3, 2, "dp_9").GivenBack().String():    "payment:",
		"marquee:5:2026-03-01:funding":                           "marquee:",
		wallet.FundingKey(6, "2026-03-02").String():              "marquee:",
		"api:" + b + ":conversion:abc":                           "api:",
		wallet.APIKey(alice.id, "conversion", "abc").String():    "api:",
		"operator:adjust:ops-1":                                  "operator:",
		wallet.OperatorKey(wallet.OperatorForgive, "x").String(): "operator:",
		"c1" + wallet.ManaDebitSuffix:                            wallet.ManaDebitSuffix,
		"c1" + wallet.SparksCreditSuffix:                         wallet.SparksCreditSuffix,
		"cb:debt":                                                ":debt",
		"cb:mana":                                                ":mana",
		"cb:sparks":                                              ":sparks",
		"k:settle":                                               ":settle",
		"k:write_off":                                            ":write_off",
		"k:receivable":                                           ":receivable",
		"k:back":                                                 ":back",
	} {
		r := e.do(alice, http.MethodPost, "/v1/conversions", key, `{"mana":10}`)
		requireProblem(t, r, http.StatusBadRequest, CodeIdempotencyKeyInvalid)
		require.Contains(t, r.str("detail"), strconv.Quote(ns), key)
		require.Contains(t, r.str("detail"), "reserves", key)
	}
	require.Zero(t, e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`))
	require.Equal(t, 100, e.count(`SELECT balance FROM wallets WHERE player_id = $1 AND currency = 'mana'`, alice.id))
	require.Equal(t, http.StatusCreated, e.do(alice, http.MethodPost, "/v1/conversions", "fine-key", `{"mana":10}`).status)
	e.requireAuditClean()
}

// A client races its own conversion with the key that conversion derives:
// twenty requests with Idempotency-Key "abc", and twenty spelling the key
// and legs the wallet stores for it (api:<player>:conversion:abc...). The
// conversion applies once (one fresh answer, the others replays or
// in_use), every spelled one is refused 400 invalid_idempotency_key (or
// 409 in_use while another request with its key runs; the 400 is what the
// key replays, like any 4xx), and the full audit is clean.
func TestDerivedKeyRacingItsOwnConversion(t *testing.T) {
	t.Parallel()
	const n = 20
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 100)
	derived := wallet.APIKey(alice.id, "conversion", "abc").String()
	spelled := []string{derived, derived + wallet.ManaDebitSuffix, derived + wallet.SparksCreditSuffix}
	keys := make([]string, 2*n)
	for i := range n {
		keys[2*i], keys[2*i+1] = "abc", spelled[i%len(spelled)]
	}
	replies := make([]reply, len(keys))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, key := range keys {
		wg.Go(func() {
			<-start
			replies[i] = e.do(alice, http.MethodPost, "/v1/conversions", key, `{"mana":10}`)
		})
	}
	close(start)
	wg.Wait()
	var own []reply
	refused := 0
	for i, r := range replies {
		if keys[i] == "abc" {
			own = append(own, r)
			continue
		}
		if r.status == http.StatusConflict {
			requireProblem(t, r, http.StatusConflict, CodeIdempotencyKeyInUse)
			continue
		}
		requireProblem(t, r, http.StatusBadRequest, CodeIdempotencyKeyInvalid)
		require.Contains(t, r.str("detail"), strconv.Quote("api:"), keys[i])
		refused++
	}
	require.NotZero(t, refused, "a spelled key was refused as reserved")
	requireOneEffect(t, own, http.StatusCreated)
	require.Equal(t, 2, e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM wallet_transactions WHERE idempotency_key = $1`, derived+wallet.ManaDebitSuffix))
	require.Equal(t, 90, e.count(`SELECT balance FROM wallets WHERE player_id = $1 AND currency = 'mana'`, alice.id))
	for _, key := range spelled {
		require.Equal(t, 1, e.count(`SELECT count(*) FROM idempotency_keys WHERE key = $1 AND response_status = 400`, key), key)
	}
	e.requireAuditClean()
}
