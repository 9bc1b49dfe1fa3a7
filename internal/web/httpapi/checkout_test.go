package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fibe"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
)

// postCheckout is safe to call from any goroutine (no require).
func (e *env) postCheckout(p player, key, body string) (int, http.Header, map[string]any, error) {
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/checkouts", bytes.NewBufferString(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+p.key)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return 0, nil, nil, fmt.Errorf("%d %s: %w", resp.StatusCode, raw, err)
	}
	return resp.StatusCode, resp.Header, out, nil
}

// checkoutUntilDone retries like a client: on 409 (in flight) and 503
// (provider down), with the same key, until another answer or the deadline.
func (e *env) checkoutUntilDone(p player, key, body string) (int, map[string]any, error) {
	deadline := time.Now().Add(waitDeadline)
	for {
		status, _, out, err := e.postCheckout(p, key, body)
		if err != nil || (status != http.StatusConflict && status != http.StatusServiceUnavailable) || time.Now().After(deadline) {
			return status, out, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCheckoutOpensEachProvidersHostedCheckout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	for _, tc := range []struct{ provider, urlPrefix string }{
		{"stripe", "https://checkout.stripe.com/c/pay/cs_test_fake"},
		{"paddle", "https://pay.paddle.test/checkout?_ptxn=txn_fake"},
		{"creem", "https://checkout.creem.test/ch_fake"},
	} {
		r := e.do(alice, http.MethodPost, "/v1/checkouts", "k-"+tc.provider, `{"sku":"mana_1000","provider":"`+tc.provider+`"}`)
		require.Equal(t, http.StatusCreated, r.status, string(r.raw))
		require.True(t, strings.HasPrefix(r.str("checkout_url"), tc.urlPrefix), r.str("checkout_url"))
		require.Equal(t, "pending", r.str("status"))
		got := e.do(alice, http.MethodGet, "/v1/orders/"+r.str("id"), "", "")
		require.Equal(t, r.str("checkout_url"), got.str("checkout_url"))
		require.Equal(t, 1, e.fake.Created(tc.provider))
	}
	for _, c := range e.fake.Calls() {
		require.Empty(t, c.Problem, "%+v", c)
		require.Equal(t, int64(999), c.Amount)
		require.Equal(t, "usd", c.Currency)
	}
}

func TestCheckoutProviderWithoutKeyIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(s *setup) { s.providers[provider.Paddle].APIKey = "" })
	alice := e.newPlayer("alice")
	r := e.do(alice, http.MethodPost, "/v1/checkouts", "k1", `{"sku":"mana_1000","provider":"paddle"}`)
	requireProblem(t, r, http.StatusUnprocessableEntity, CodeProviderUnavailable)
	require.Zero(t, e.count(`SELECT count(*) FROM orders`), "a refused checkout creates nothing")
	require.Empty(t, e.fake.Calls())
}

// TestCheckoutConcurrentSameKey: 20 clients racing one Idempotency-Key get
// one order and one provider checkout, also when the provider fails the
// first attempt.
func TestCheckoutConcurrentSameKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		provider string
		fail     []int
	}{
		{"stripe", nil}, {"stripe", []int{500}}, {"paddle", nil}, {"paddle", []int{503}}, {"creem", []int{429}},
	} {
		t.Run(fmt.Sprintf("%s fail %v", tc.provider, tc.fail), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			alice := e.newPlayer("alice")
			e.fake.FailNext(tc.provider, tc.fail...)
			const n = 20
			var wg sync.WaitGroup
			status, ids, urls, errs := make([]int, n), make([]string, n), make([]string, n), make([]error, n)
			body := `{"sku":"mana_5000","provider":"` + tc.provider + `"}`
			for i := range n {
				wg.Go(func() {
					var out map[string]any
					status[i], out, errs[i] = e.checkoutUntilDone(alice, "race-key", body)
					ids[i], _ = out["id"].(string)
					urls[i], _ = out["checkout_url"].(string)
				})
			}
			wg.Wait()
			for i := range n {
				require.NoError(t, errs[i])
				require.Equal(t, http.StatusCreated, status[i])
				require.Equal(t, ids[0], ids[i])
				require.Equal(t, urls[0], urls[i])
			}
			require.NotEmpty(t, urls[0])
			require.Equal(t, 1, e.count(`SELECT count(*) FROM orders`))
			require.Equal(t, 1, e.fake.Created(tc.provider), "one provider checkout")
			require.Equal(t, len(tc.fail)+1, len(e.fake.Calls()), "the failed attempt was retried once")
			e.requireAuditClean()
		})
	}
}

// TestCheckoutProviderDown: a provider down past the retry budget answers
// 503 with Retry-After; the order stays pending and the client's retry with
// the same key resumes it.
func TestCheckoutProviderDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.fake.SetDown(true)
	status, header, out, err := e.postCheckout(alice, "down-key", `{"sku":"mana_1000","provider":"stripe"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, status, out)
	require.Equal(t, CodeProviderDown, out["code"])
	require.Equal(t, "2", header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", header.Get("Content-Type"))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM orders WHERE status = 'pending' AND checkout_url IS NULL`))

	e.fake.SetDown(false)
	r := e.do(alice, http.MethodPost, "/v1/checkouts", "down-key", `{"sku":"mana_1000","provider":"stripe"}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.raw))
	require.NotEmpty(t, r.str("checkout_url"))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM orders`), "the retry resumed the same order")
	require.Equal(t, 1, e.fake.Created("stripe"))
	again := e.do(alice, http.MethodPost, "/v1/checkouts", "down-key", `{"sku":"mana_1000","provider":"stripe"}`)
	require.True(t, again.replayed())
	require.JSONEq(t, string(r.raw), string(again.raw))
	e.requireAuditClean()
}

func TestCheckoutProviderRejects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.fake.FailNext(provider.Creem, http.StatusBadRequest)
	r := e.do(alice, http.MethodPost, "/v1/checkouts", "rej", `{"sku":"mana_1000","provider":"creem"}`)
	requireProblem(t, r, http.StatusBadGateway, CodeProviderRejected)
	require.Equal(t, "creem rejected the checkout: injected failure", r.str("detail"))
	require.Zero(t, e.fake.Created(provider.Creem))

	e.fake.SetProduct("prod_mana_1000", fakeapi.Product{Price: 1, Currency: "usd"})
	r = e.do(alice, http.MethodPost, "/v1/checkouts", "mismatch", `{"sku":"mana_1000","provider":"creem"}`)
	requireProblem(t, r, http.StatusInternalServerError, CodeCheckoutMisconfigured)
	require.Zero(t, e.fake.Created(provider.Creem), "a price that differs from the snapshot opens nothing")
}

// TestSDKCheckoutRidesOutProviderOutage: the SDK's Checkouts.Create meets a
// provider that is down (503 + Retry-After), retries with the same key,
// and gets the one order with its checkout URL once the provider is back.
func TestSDKCheckoutRidesOutProviderOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.fake.SetDown(true)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		e.fake.SetDown(false)
	}()
	client := fibe.NewClient(e.srv.URL, alice.key, fibe.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	order, err := client.Checkouts.Create(context.Background(), fibe.CheckoutParams{SKU: "mana_1000", Provider: "paddle"})
	require.NoError(t, err)
	require.Greater(t, order.LastResponse.Attempts, 1, "the first attempt met the outage")
	require.True(t, strings.HasPrefix(order.CheckoutURL, "https://pay.paddle.test/"), order.CheckoutURL)
	require.Equal(t, 1, e.count(`SELECT count(*) FROM orders`))
	require.Equal(t, 1, e.fake.Created(provider.Paddle))
}
