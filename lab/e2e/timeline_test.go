package e2e_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/stripemock"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/lab/e2e"
	"github.com/fibe-dev/billing/wallet"
)

// Webhook secrets of the timeline test's processes.
var timelineSecrets = map[string]string{"stripe": "whsec_tl_stripe", "paddle": "pdl_ntfset_tl", "creem": "whsec_tl_creem"}

// TestOperatorPageInBrowser drives the operator page of a real `billing
// web` in headless Chromium with JavaScript switched off, over a history
// made by that web process's intake and a real `billing worker` (Stripe
// refunds through stripe-mock): a double charge refunded, a partial
// refund, a chargeback lost then won, a debt. Searching the second
// payment's PaymentIntent in the form shows the double charge on top and
// every layer below, highlighted where it must be; the player's page
// shows all four orders and the open debt.
func TestOperatorPageInBrowser(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	stripeAPI := stripemock.Start(t)
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	port, err := procs.FreePort()
	require.NoError(t, err)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	env := timelineEnv(dbURL, stripeAPI)
	web := startTimelineProc(t, "web", append(env, fmt.Sprintf("BILLING_HTTP_ADDR=127.0.0.1:%d", port)))
	ctxUp, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, procs.WaitHealthy(ctxUp, http.DefaultClient, base+"/healthz", web.Proc))
	startTimelineProc(t, "worker", env)
	h := seedTimelineHistories(t, ctx, pool, base)

	resp, err := http.Get(base + "/timeline/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no credentials, no page")

	bctx := newScriptlessBrowser(t, chromium)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:s3cret"))
	require.NoError(t, chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}})
		return err
	})))

	home := pageText(t, bctx, base+"/timeline/", "Unapplied payments")
	require.Contains(t, home, "Open debts")
	require.Contains(t, home, fmt.Sprintf("player %d", h.player), "the open debt is listed")

	// The form, submitted as a browser without scripts does.
	require.NoError(t, chromedp.Do(bctx, chromedp.SendKeys(chromedp.CSS(`input[name="q"]`), "pi_tl_second"),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(`#verdict`))))
	location, err := chromedp.Run(bctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, base+"/timeline/payment/stripe/pi_tl_second", location)
	verdict, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#verdict`)))
	require.NoError(t, err)
	require.Contains(t, verdict, "Paid twice")
	require.Regexp(t, `payment cs_test_pi_tl_second \(pi_tl_second\) \(9\.99 USD\) for the same order minted nothing and was refunded \(re_\w+\)`, verdict)
	unapplied, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`tr[data-type="payment_unapplied"]`)))
	require.NoError(t, err)
	require.Contains(t, unapplied, "recorded UNAPPLIED")
	refund, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`tr[data-type="payment_refunded"]`)))
	require.NoError(t, err)
	require.Contains(t, refund, "refunded automatically through stripe as re_")
	require.Contains(t, refund, "billing-payment-")
	opened, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`tr[data-type="order_opened"]`)))
	require.NoError(t, err)
	require.Contains(t, opened, "tl-checkout-1")
	require.Contains(t, opened, "answered 201, replayed 1 time")
	claims, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`tr[data-type="delivery_claimed"]`)))
	require.NoError(t, err)
	require.Contains(t, claims, "evt_tl_1 claimed: paid 9.99 USD for order")
	require.Contains(t, claims, "; 2 duplicate deliveries followed, the last at ")
	require.Contains(t, verdict, "The providers delivered 2 events 4 times; each was claimed once and the 2 duplicates answered without effect.")
	jobs, err := chromedp.Run(bctx, chromedp.AttributesAll(chromedp.CSSAll(`td.links a[href^="/riverui/jobs/"]`)))
	require.NoError(t, err)
	require.Len(t, jobs, 2, "each job links into River UI")
	bad, err := chromedp.Run(bctx, chromedp.Nodes(chromedp.CSSAll(`tr.bad`), chromedp.AtLeast(0)))
	require.NoError(t, err)
	require.Empty(t, bad, "the second payment is refunded: nothing to act on")
	scripts, err := chromedp.Run(bctx, chromedp.Nodes(chromedp.CSSAll(`script`), chromedp.AtLeast(0)))
	require.NoError(t, err)
	require.Empty(t, scripts, "the page has no script")
	screenshot(t, bctx, "timeline-double-charge.png")

	player := pageText(t, bctx, fmt.Sprintf("%s/timeline/player/%d", base, h.player), "owes")
	for _, want := range []string{"4 orders: 1 paid twice, 1 paid once and refunded in part, 1 paid once, 1 paid once and refunded.", "owes 400 Mana",
		"Refund charge:ch_tl_refunded of payment cs_test_order_", "stands at 5.00 USD, succeeded",
		"Dispute chargeback:txn_order_", "stands at 9.99 USD, won", "Operator adjustment -2899 Mana: spent on a Marquee",
		"Debt opened: 400 Mana lent from receivable"} {
		require.Contains(t, player, want)
	}
	owed, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#debts`)))
	require.NoError(t, err)
	require.Contains(t, owed, "400 Mana")
	screenshot(t, bctx, "timeline-player.png")
}

// newScriptlessBrowser is newBrowser with JavaScript off in its pages.
func newScriptlessBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("blink-settings", "scriptEnabled=false"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	// The whole browser session: several pages, each waited for up to
	// browserDeadline, so a bound of its own well above one page.
	tctx, cancelTimeout := context.WithTimeout(bctx, browserBudget)
	t.Cleanup(func() { cancelTimeout(); cancelBrowser(); cancelAlloc() })
	return tctx
}

func timelineEnv(dbURL, stripeAPI string) []string {
	return []string{"BILLING_DATABASE_URL=" + dbURL, "BILLING_RIVERUI_USER=ops", "BILLING_RIVERUI_PASSWORD=s3cret",
		"BILLING_STRIPE_WEBHOOK_SECRET=" + timelineSecrets["stripe"], "BILLING_PADDLE_WEBHOOK_SECRET=" + timelineSecrets["paddle"],
		"BILLING_CREEM_WEBHOOK_SECRET=" + timelineSecrets["creem"], "BILLING_STRIPE_SECRET_KEY=sk_test_timeline",
		"BILLING_STRIPE_API_URL=" + stripeAPI, "BILLING_SPARKS_PER_MANA=100"}
}

func startTimelineProc(t *testing.T, name string, env []string) *e2e.Proc {
	t.Helper()
	logPath, logFile := processLog(t, name+".log")
	p := e2e.NewProc(name, billingBinary(t), env, logFile, name)
	require.NoError(t, p.Start())
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return p
}

// timelineHistories is what seedTimelineHistories made.
type timelineHistories struct{ player int64 }

// seedTimelineHistories opens four orders of one player through the API
// and sends the providers' signed events to the web process, each waited
// for: a Stripe order paid twice, a Stripe order refunded 3.00 then 5.00,
// a Paddle order charged back then reversed, a Creem order refunded after
// an operator took 2899 of the player's Mana (a debt of 400).
func seedTimelineHistories(t *testing.T, ctx context.Context, pool *pgxpool.Pool, base string) timelineHistories {
	t.Helper()
	p, key, err := players.Create(ctx, pool, "timeline-buyer")
	require.NoError(t, err)
	s := &seeder{t: t, ctx: ctx, pool: pool, base: base, key: key}
	twice := s.checkout("stripe")
	status, replayed := s.postCheckout("stripe", 1) // the client retried its call
	require.Equal(t, http.StatusCreated, status, replayed)
	require.Equal(t, strconv.FormatInt(twice, 10), replayed, "a replay answers the same order")
	paid := providerevents.CompletedEvent("stripe", "evt_tl_1", twice, 999, "usd")
	s.send("stripe", "evt_tl_1", paid)
	s.post("stripe", "evt_tl_1", paid) // Stripe retried it twice
	s.post("stripe", "evt_tl_1", paid)
	s.send("stripe", "evt_tl_2", providerevents.PaymentEvent("stripe", "evt_tl_2", "pi_tl_second", twice, 999, "usd"))
	refunded := s.checkout("stripe")
	s.send("stripe", "evt_tl_3", providerevents.CompletedEvent("stripe", "evt_tl_3", refunded, 999, "usd"))
	for i, amount := range []int64{300, 500} {
		evt := fmt.Sprintf("evt_tl_refund_%d", i)
		s.send("stripe", evt, s.reversal("stripe", evt, refunded, "ch_tl_refunded", fulfillment.ReversalRefund, fulfillment.StateSucceeded, amount))
	}
	disputed := s.checkout("paddle")
	s.send("paddle", "evt_tl_4", providerevents.CompletedEvent("paddle", "evt_tl_4", disputed, 999, "usd"))
	s.send("paddle", "evt_tl_cb", s.reversal("paddle", "evt_tl_cb", disputed, "adj_tl_cb", fulfillment.ReversalDispute, fulfillment.StateLost, 999))
	s.send("paddle", "evt_tl_cbr", s.reversal("paddle", "evt_tl_cbr", disputed, "adj_tl_cbr", fulfillment.ReversalDispute, fulfillment.StateWon, 999))
	debt := s.checkout("creem")
	s.send("creem", "evt_tl_5", providerevents.CompletedEvent("creem", "evt_tl_5", debt, 999, "usd"))
	_, err = wallet.New(pool, wallet.Options{}).Adjust(ctx, wallet.AdjustParams{PlayerID: p.ID, Currency: wallet.Mana, Amount: -2899,
		Reason: "spent on a Marquee", Key: "tl-spend"})
	require.NoError(t, err)
	s.send("creem", "evt_tl_6", s.reversal("creem", "evt_tl_6", debt, "rf_tl", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999))
	return timelineHistories{player: p.ID}
}

type seeder struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	base string
	key  string
	n    int
}

// checkout opens a mana_1000 order through the API and returns its id.
func (s *seeder) checkout(provider string) int64 {
	s.t.Helper()
	s.n++
	status, id := s.postCheckout(provider, s.n)
	if provider != "stripe" && status == http.StatusUnprocessableEntity {
		// No API key for this provider: the order is opened without one.
		return s.orderWithoutCheckout(provider)
	}
	require.Equal(s.t, http.StatusCreated, status, id)
	order, err := strconv.ParseInt(id, 10, 64)
	require.NoError(s.t, err)
	return order
}

// postCheckout posts a mana_1000 checkout under Idempotency-Key
// tl-checkout-<n> and returns the status and the order id (or the
// problem's code and detail).
func (s *seeder) postCheckout(provider string, n int) (int, string) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+"/v1/checkouts", strings.NewReader(`{"sku":"mana_1000","provider":"`+provider+`"}`))
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("tl-checkout-%d", n))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	var o struct {
		ID     string `json:"id"`
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	require.NoError(s.t, json.NewDecoder(resp.Body).Decode(&o))
	if resp.StatusCode != http.StatusCreated {
		return resp.StatusCode, o.Code + ": " + o.Detail
	}
	return resp.StatusCode, o.ID
}

// orderWithoutCheckout opens an order the way the API does before it
// calls a provider that has no API key here.
func (s *seeder) orderWithoutCheckout(provider string) int64 {
	s.t.Helper()
	var player int64
	require.NoError(s.t, s.pool.QueryRow(s.ctx, `SELECT id FROM players WHERE name = 'timeline-buyer'`).Scan(&player))
	o, err := fulfillment.CreateCheckout(s.ctx, s.pool, fulfillment.DefaultSKUs(), fulfillment.CheckoutParams{PlayerID: player,
		SKU: "mana_1000", Provider: provider})
	require.NoError(s.t, err)
	return o.ID
}

func (s *seeder) reversal(provider, evt string, order int64, id, kind, state string, amount int64) []byte {
	payment := providerevents.OrderPaymentID(provider, strconv.FormatInt(order, 10))
	return providerevents.ReversalEvent(provider, evt, payment, id, kind, state, amount, "usd")
}

// send posts an event and waits until the worker finished its job.
func (s *seeder) send(provider, evt string, body []byte) {
	s.t.Helper()
	s.post(provider, evt, body)
	require.Eventually(s.t, func() bool {
		var done bool
		err := s.pool.QueryRow(s.ctx, `SELECT finalized_at IS NOT NULL FROM river_job WHERE args->>'event_id' = $1`, evt).Scan(&done)
		return err == nil && done
	}, workDeadline, 50*time.Millisecond, "the job of %s", evt)
}

// post signs body as provider does and posts it to the web process.
func (s *seeder) post(provider, evt string, body []byte) {
	s.t.Helper()
	require.NotNil(s.t, body)
	h, v, err := providerevents.Sign(provider, timelineSecrets[provider], body, time.Now())
	require.NoError(s.t, err)
	req, err := http.NewRequest(http.MethodPost, s.base+"/webhooks/"+provider, bytes.NewReader(body))
	require.NoError(s.t, err)
	req.Header.Set(h, v)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode, evt)
}
