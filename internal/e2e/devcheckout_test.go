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
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/e2e"
	"github.com/fibe-dev/billing/internal/procs"
	"github.com/fibe-dev/billing/internal/testdb"
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
		APIKey string `json:"api_key"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "demo.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &seed))
	var order struct {
		ID          string `json:"id"`
		CheckoutURL string `json:"checkout_url"`
	}
	status, body := apiPost(t, base+"/v1/checkouts", seed.APIKey, `{"sku":"mana_1000","provider":"paddle"}`)
	require.Equal(t, http.StatusCreated, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &order))
	require.Equal(t, base+"/dev/checkout/"+order.ID, order.CheckoutURL)

	bctx := newBrowser(t, chromium)
	text := pageText(t, bctx, order.CheckoutURL, "SIMULATION")
	require.Contains(t, text, "pending")
	screenshot(t, bctx, "dev-checkout.png")
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(chromedp.CSS("#pay"))))
	var done string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !strings.Contains(done, "Paid:"); time.Sleep(200 * time.Millisecond) {
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
}

func startDev(t *testing.T, dbURL, dir string, port int) *e2e.Proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "dev.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	t.Cleanup(func() { logFile.Close() })
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
	}, 60*time.Second, 100*time.Millisecond, "billing dev up and seeded")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("dev log:\n%s", b)
		}
	})
	return dev
}

func apiPost(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", "dev-checkout-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
