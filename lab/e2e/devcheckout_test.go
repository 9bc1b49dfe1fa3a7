package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/lab/e2e"
)

// TestDevCheckoutInBrowser is a newcomer's first purchase in `billing dev`
// without provider keys: POST /v1/checkouts answers the local simulated
// checkout page; in headless Chromium the page says it is a simulation,
// Pay sends the provider's signed webhook to billing dev's own intake, and
// the page then shows the order fulfilled, the Mana in the wallet.
func TestDevCheckoutInBrowser(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	port, err := procs.FreePort()
	require.NoError(t, err)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	dir := t.TempDir()
	dev := startDev(t, dbURL, dir, port)
	defer dev.Stop(15 * time.Second)

	var seed struct {
		APIKey         string            `json:"api_key"`
		WebhookSecrets map[string]string `json:"webhook_secrets"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "demo.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &seed))
	var order struct {
		ID          string `json:"id"`
		CheckoutURL string `json:"checkout_url"`
	}
	status, body := apiPost(t, base+"/v1/checkouts", seed.APIKey, "dev-checkout-1", `{"sku":"mana_1000","provider":"paddle"}`)
	require.Equal(t, http.StatusCreated, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &order))
	require.Equal(t, base+"/dev/checkout/"+order.ID, order.CheckoutURL)

	bctx := newBrowser(t, chromium)
	text := pageText(t, bctx, order.CheckoutURL, "SIMULATION")
	require.Contains(t, text, "pending")
	screenshot(t, bctx, "dev-checkout.png")
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#pay"))))
	var done string
	for deadline := time.Now().Add(browserDeadline); time.Now().Before(deadline) && !strings.Contains(done, "Paid:"); time.Sleep(200 * time.Millisecond) {
		done, _ = chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
	}
	require.Contains(t, done, "Paid: 1000 Mana are in the wallet", "the page shows the order fulfilled")
	screenshot(t, bctx, "dev-checkout-paid.png")

	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var state string
	var events int
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, (SELECT count(*) FROM webhook_events WHERE order_id = o.id)
		FROM orders o WHERE id = $1`, order.ID).Scan(&state, &events))
	require.Equal(t, "fulfilled", state)
	require.Equal(t, 1, events, "one signed webhook, claimed once")

	rejectedPage(t, bctx, base, seed.APIKey, seed.WebhookSecrets["creem"])
}

// rejectedPage pays an order with the wrong amount (a signed Creem webhook
// for 1 cent, as send-webhook --amount 1 does): the order is rejected, and
// its checkout page says so and why.
func rejectedPage(t *testing.T, bctx context.Context, base, apiKey, secret string) {
	t.Helper()
	var order struct {
		ID          string `json:"id"`
		CheckoutURL string `json:"checkout_url"`
	}
	status, body := apiPost(t, base+"/v1/checkouts", apiKey, "dev-checkout-2", `{"sku":"mana_1000","provider":"creem"}`)
	require.Equal(t, http.StatusCreated, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &order))
	id, err := strconv.ParseInt(order.ID, 10, 64)
	require.NoError(t, err)
	event := providerevents.CompletedEvent("creem", "evt_dev_wrong_"+order.ID, id, 1, "usd")
	header, value, err := providerevents.Sign("creem", secret, event, time.Now())
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, base+"/webhooks/creem", bytes.NewReader(event))
	require.NoError(t, err)
	req.Header.Set(header, value)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool { return orderStatus(t, base, apiKey, order.ID) == "rejected" },
		30*time.Second, 100*time.Millisecond, "the fulfillment rejects the order")
	text := pageText(t, bctx, order.CheckoutURL, "Rejected")
	require.Contains(t, text, "Status: rejected")
	require.Contains(t, text, "Rejected, no Mana credited: creem event evt_dev_wrong_"+order.ID+" paid 1 usd, order snapshot is 999 usd",
		"the page shows the order's reason")
	screenshot(t, bctx, "dev-checkout-rejected.png")
}

func startDev(t *testing.T, dbURL, dir string, port int) *e2e.Proc {
	t.Helper()
	logPath, logFile := processLog(t, "dev.log")
	dev := e2e.NewProc("dev", billingBinary(t), []string{"BILLING_DATABASE_URL=" + dbURL,
		fmt.Sprintf("BILLING_HTTP_ADDR=127.0.0.1:%d", port), "BILLING_LOG_FORMAT=json"}, logFile, "dev", "--dir", dir)
	require.NoError(t, dev.Start())
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "demo.json"))
		resp, herr := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if herr != nil {
			return false
		}
		resp.Body.Close()
		return err == nil && resp.StatusCode == http.StatusOK
	}, workDeadline, 100*time.Millisecond, "billing dev up and seeded")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("dev log:\n%s", b)
		}
	})
	return dev
}

func orderStatus(t *testing.T, base, key, id string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/v1/orders/"+id, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var o struct {
		Status string `json:"status"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&o))
	return o.Status
}

func apiPost(t *testing.T, url, key, idempotencyKey, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", idempotencyKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
