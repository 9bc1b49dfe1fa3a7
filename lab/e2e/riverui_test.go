package e2e_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/proctest"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/lab/e2e"
	"github.com/fibe-dev/billing/wallet"
)

// chromiumPath finds Debian's chromium (BILLING_CHROMIUM overrides it);
// .ci/run installs it, and under CI a missing one fails the test.
func chromiumPath(t *testing.T) string {
	return proctest.RequireTool(t, "apt-get install -y chromium",
		os.Getenv("BILLING_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser")
}

// TestRiverUIInBrowser drives the River UI served by a real `billing web`
// in headless Chromium as an operator would: the job list shows fund_day and
// fulfill_order jobs, a cancelled fulfillment (amount mismatch) shows its
// error, and a retryable job is retried from the UI.
func TestRiverUIInBrowser(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	cancelledID, retryableID := seedJobs(t, ctx, pool)

	port, err := procs.FreePort()
	require.NoError(t, err)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	web := startWeb(t, dbURL, port)
	defer web.Stop(10 * time.Second)

	// Without credentials the page is refused.
	resp, err := http.Get(base + "/riverui/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	bctx := newBrowser(t, chromium)
	// Headless Chromium has no one to ask for a password: it refuses the
	// basic-auth challenge outright.
	err = chromedp.Do(bctx, chromedp.Navigate(base+"/riverui/"))
	require.ErrorContains(t, err, "ERR_INVALID_AUTH_CREDENTIALS")

	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:s3cret"))
	require.NoError(t, chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": auth}})
		return err
	})))

	// The job lists name both kinds.
	listText := pageText(t, bctx, base+"/riverui/jobs?state=cancelled", "fulfill_order")
	require.Contains(t, listText, "fulfill_order")
	screenshot(t, bctx, "riverui-cancelled.png")
	listText = pageText(t, bctx, base+"/riverui/jobs?state=available", "fund_day")
	require.Contains(t, listText, "fund_day")
	screenshot(t, bctx, "riverui-jobs.png")

	// The cancelled fulfillment shows why.
	detail := pageText(t, bctx, fmt.Sprintf("%s/riverui/jobs/%d", base, cancelledID), "does not match the order")
	require.Contains(t, detail, "fulfill_order")
	screenshot(t, bctx, "riverui-cancelled-job.png")

	// Retry the retryable job from its page.
	pageText(t, bctx, fmt.Sprintf("%s/riverui/jobs/%d", base, retryableID), "Retry")
	require.NoError(t, chromedp.Do(bctx, chromedp.Click(`//button[normalize-space(.)="Retry"]`)))
	require.Eventually(t, func() bool {
		var state string
		_ = pool.QueryRow(ctx, "SELECT state::text FROM river_job WHERE id = $1", retryableID).Scan(&state)
		return state == "available"
	}, browserDeadline, 100*time.Millisecond, "the UI's Retry made the job available again")
}

// seedJobs inserts what an operator would find: fund_day jobs waiting, a
// fulfill_order job that a real worker cancelled for an amount mismatch, and
// a retryable fulfill_order job. It returns the last two ids.
func seedJobs(t *testing.T, ctx context.Context, pool *pgxpool.Pool) (cancelled, retryable int64) {
	t.Helper()
	p, _, err := players.Create(ctx, pool, "operator-view")
	require.NoError(t, err)
	mq, err := enforcer.CreateMarquee(ctx, pool, enforcer.DefaultPlans(), enforcer.CreateParams{PlayerID: p.ID, Name: "ui", Plan: "standard"})
	require.NoError(t, err)
	order, err := fulfillment.CreateCheckout(ctx, pool, fulfillment.DefaultSKUs(), fulfillment.CheckoutParams{PlayerID: p.ID, SKU: "mana_1000", Provider: "stripe"})
	require.NoError(t, err)

	insertOnly, err := jobs.NewClient(pool, jobs.Options{})
	require.NoError(t, err)
	fund, err := insertOnly.Insert(ctx, enforcer.FundDayArgs{MarqueeID: mq.ID, Day: "2026-01-01"}, nil)
	require.NoError(t, err)
	require.Equal(t, "available", string(fund.Job.State))

	// Work the mismatched payment with the real registry, as a worker would.
	mismatch, err := insertOnly.Insert(ctx, fulfillment.FulfillOrderArgs{OrderID: order.ID, EventID: "evt_ui_1", Provider: "stripe",
		PaidAmount: order.Amount + 1, PaidCurrency: order.Currency}, nil)
	require.NoError(t, err)
	workers := river.NewWorkers()
	fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: pool, Wallet: wallet.New(pool, wallet.Options{})})
	worker, err := jobs.NewClient(pool, jobs.Options{Workers: workers,
		Queues: map[string]river.QueueConfig{jobs.QueueFulfillment: {MaxWorkers: 1}}})
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	require.Eventually(t, func() bool {
		var state string
		_ = pool.QueryRow(ctx, "SELECT state::text FROM river_job WHERE id = $1", mismatch.Job.ID).Scan(&state)
		return state == "cancelled"
	}, workDeadline, 50*time.Millisecond)
	require.NoError(t, jobs.Stop(ctx, worker, 5*time.Second))

	// A job that failed once and waits for its next attempt.
	retry, err := insertOnly.Insert(ctx, fulfillment.FulfillOrderArgs{OrderID: order.ID, EventID: "evt_ui_2", Provider: "stripe",
		PaidAmount: order.Amount, PaidCurrency: order.Currency}, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'retryable', attempt = 1, attempted_at = now(),
		scheduled_at = now() + interval '1 hour',
		errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'database connection reset', 'trace', '')]
		WHERE id = $1`, retry.Job.ID)
	require.NoError(t, err)
	return mismatch.Job.ID, retry.Job.ID
}

func startWeb(t *testing.T, dbURL string, port int) *e2e.Proc {
	t.Helper()
	bin := billingBinary(t)
	logPath, logFile := processLog(t, "web.log")
	web := e2e.NewProc("web", bin, []string{"BILLING_DATABASE_URL=" + dbURL, fmt.Sprintf("BILLING_HTTP_ADDR=127.0.0.1:%d", port),
		"BILLING_RIVERUI_USER=ops", "BILLING_RIVERUI_PASSWORD=s3cret"}, logFile, "web")
	require.NoError(t, web.Start())
	t.Cleanup(func() {
		web.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("web log:\n%s", b)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, procs.WaitHealthy(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", port), web.Proc))
	return web
}

func newBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	// The whole browser session: several pages, each waited for up to
	// browserDeadline, so a bound of its own well above one page.
	tctx, cancelTimeout := context.WithTimeout(bctx, browserBudget)
	t.Cleanup(func() { cancelTimeout(); cancelBrowser(); cancelAlloc() })
	return tctx
}

// browserDeadline bounds each wait for a page to show what it must: a
// second on an idle machine, many more with Chromium at load 30; at load
// 78 (two suites at once) a page stayed blank for two minutes, and a whole
// browser test outlasted four of them. A browser test's context gets
// browserBudget waits in all.
const (
	browserDeadline = 4 * time.Minute
	browserBudget   = 5 * browserDeadline
)

// workDeadline bounds a wait for work done outside the test's goroutine:
// a River job finished, a `billing dev` up and seeded (a cold start, initdb
// and every migration, took more than 3 minutes at load 78). Waits end as
// soon as the work is done; this only decides when a stuck one fails.
const workDeadline = 6 * time.Minute

// pageText opens url and waits until the page's text contains want (the UI
// renders client-side), then returns that text.
func pageText(t *testing.T, ctx context.Context, url, want string) string {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url)))
	var body string
	for deadline := time.Now().Add(browserDeadline); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		if err == nil && strings.Contains(text, want) {
			return text
		}
		body = text
	}
	t.Fatalf("%s never showed %q; page text:\n%s", url, want, body)
	return ""
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	saveArtifact(t, name, shot)
}

// saveArtifact writes a screenshot under $BILLING_ARTIFACTS_DIR (default
// ./artifacts next to the test), where CI and people can look at it.
func saveArtifact(t *testing.T, name string, b []byte) {
	t.Helper()
	dir := os.Getenv("BILLING_ARTIFACTS_DIR")
	if dir == "" {
		dir = "artifacts"
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	abs, _ := filepath.Abs(path)
	t.Logf("screenshot saved: %s", abs)
}
