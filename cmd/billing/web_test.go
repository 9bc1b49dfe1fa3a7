package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// TestWebServesNoDevCheckout runs `billing dev` and `billing web` on one
// database: dev answers a checkout without provider keys with its
// simulated page and serves it; web, given the same order, neither opens
// nor serves nor links that page.
func TestWebServesNoDevCheckout(t *testing.T) {
	t.Parallel()
	env := []string{"BILLING_DATABASE_URL=" + testdb.NewURL(t), "BILLING_LOG_FORMAT=json"}
	devBase, webBase := "http://"+freeAddr(t), "http://"+freeAddr(t)
	dev := startProc(t, append(env, "BILLING_HTTP_ADDR="+strings.TrimPrefix(devBase, "http://")), "dev", "--dir", t.TempDir())
	web := startProc(t, append(env, "BILLING_HTTP_ADDR="+strings.TrimPrefix(webBase, "http://")), "web")
	waitHealthy(t, devBase, dev, waitDeadline)
	waitHealthy(t, webBase, web, waitDeadline)
	require.Eventually(t, func() bool { return strings.Contains(dev.out.String(), "Ctrl-C stops everything") },
		waitDeadline, 20*time.Millisecond, "dev's banner")
	key := between(dev.out.String(), "API key:\n  ", "\n")
	require.NotEmpty(t, key)

	status, body := postCheckout(t, devBase, key, "dev-page-1")
	require.Equal(t, http.StatusCreated, status, body)
	var order struct {
		ID          string `json:"id"`
		CheckoutURL string `json:"checkout_url"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &order))
	require.Equal(t, devBase+"/dev/checkout/"+order.ID, order.CheckoutURL)
	status, body = get(t, order.CheckoutURL, "", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "SIMULATION")

	status, body = get(t, webBase+"/dev/checkout/"+order.ID, "", "")
	require.Equal(t, http.StatusNotFound, status, body)
	require.Contains(t, body, `"status":404`, "web's own problem+json 404, not the page's")
	status, body = postCheckout(t, webBase, key, "web-page-1")
	require.Equal(t, http.StatusUnprocessableEntity, status, body)
	require.Contains(t, body, "provider_unavailable")
	require.NotContains(t, body, "/dev/")
	status, body = get(t, webBase+"/", "", "")
	require.Equal(t, http.StatusOK, status, body)
	require.NotContains(t, body, "/dev/", "web's index links no dev page")

	web.stop(t, syscall.SIGTERM, waitDeadline)
	dev.stop(t, syscall.SIGINT, waitDeadline)
}

// postCheckout asks base for a Paddle checkout of mana_1000 as key's
// player, under the Idempotency-Key idem.
func postCheckout(t *testing.T, base, key, idem string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), apiRequestDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/checkouts",
		bytes.NewBufferString(`{"sku":"mana_1000","provider":"paddle"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", idem)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
