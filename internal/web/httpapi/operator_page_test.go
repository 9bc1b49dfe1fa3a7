package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

// pageEnv is a real server with the River UI and the operator page, its
// webhook intake taking Stripe events, and the real workers.
type pageEnv struct {
	t     *testing.T
	srv   *httptest.Server
	order *fulfillment.Order
	// errors counts the server's ERROR log records.
	errors *errorCount
}

// errorCount is a log handler that counts ERROR records and drops the rest.
type errorCount struct {
	slog.Handler
	n atomic.Int64
}

func (c *errorCount) Enabled(context.Context, slog.Level) bool { return true }

func (c *errorCount) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		c.n.Add(1)
	}
	return nil
}

// newPageEnv pays one order twice through the server's intake: the
// second payment is unapplied (no refund API here).
func newPageEnv(t *testing.T) *pageEnv {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	client, err := jobs.NewClient(pool, jobs.Options{Logger: quiet})
	require.NoError(t, err)
	providers := drivers.New(map[string]provider.Options{provider.Stripe: {WebhookSecrets: []string{"whsec_page"}}})
	errs := &errorCount{Handler: slog.DiscardHandler}
	s, err := New(Options{Pool: pool, River: client, Wallet: wallet.New(pool, wallet.Options{}), Plans: enforcer.DefaultPlans(),
		RiverUIUser: "ops", RiverUIPassword: "s3cret", Logger: slog.New(errs), Providers: providers})
	require.NoError(t, err)
	uiCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	require.NoError(t, s.Start(uiCtx))
	e := &pageEnv{t: t, srv: httptest.NewServer(s), errors: errs}
	t.Cleanup(e.srv.Close)
	fulfillmenttest.StartRiver(t, pool, fulfillment.WorkerOptions{})
	p, _, err := players.Create(ctx, pool, "page")
	require.NoError(t, err)
	e.order, err = fulfillment.CreateCheckout(ctx, pool, fulfillment.DefaultSKUs(), fulfillment.CheckoutParams{PlayerID: p.ID, SKU: "mana_1000", Provider: "stripe"})
	require.NoError(t, err)
	finalized := func(n int) func() bool {
		return func() bool {
			var got int
			_ = pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE finalized_at IS NOT NULL`).Scan(&got)
			return got == n
		}
	}
	e.deliver(providerevents.CompletedEvent("stripe", "evt_page_1", e.order.ID, e.order.Amount, e.order.Currency))
	require.Eventually(t, finalized(1), waitDeadline, 20*time.Millisecond)
	e.deliver(providerevents.PaymentEvent("stripe", "evt_page_2", "pi_page_second", e.order.ID, e.order.Amount, e.order.Currency))
	require.Eventually(t, finalized(2), waitDeadline, 20*time.Millisecond)
	return e
}

func (e *pageEnv) deliver(body []byte) {
	e.t.Helper()
	h, v, err := providerevents.Sign("stripe", "whsec_page", body, time.Now())
	require.NoError(e.t, err)
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/webhooks/stripe", bytes.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set(h, v)
	res, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	res.Body.Close()
	require.Equal(e.t, http.StatusOK, res.StatusCode)
}

// get fetches path with the operator's credentials (user "" for none),
// without following redirects.
func (e *pageEnv) get(path, user string, headers ...string) (*http.Response, string) {
	e.t.Helper()
	return e.do(http.MethodGet, path, user, "", headers...)
}

func (e *pageEnv) do(method, path, user, body string, headers ...string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	require.NoError(e.t, err)
	if user != "" {
		req.SetBasicAuth(user, "s3cret")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	return res, string(b)
}

// The page answers only the River UI's operator: no credentials or wrong
// ones are 401 with the same realm, and nothing of the timeline leaks.
func TestOperatorPageNeedsCredentials(t *testing.T) {
	t.Parallel()
	e := newPageEnv(t)
	for _, path := range []string{"/timeline/", "/timeline", "/timeline/order/" + strconv.FormatInt(e.order.ID, 10),
		"/timeline/?q=pi_page_second"} {
		for _, user := range []string{"", "intruder"} {
			res, body := e.get(path, user)
			require.Equal(t, http.StatusUnauthorized, res.StatusCode, path)
			require.Contains(t, res.Header.Get("WWW-Authenticate"), `realm="River UI"`)
			require.NotContains(t, body, "pi_page_second", path)
		}
	}
}

// A search by the second PaymentIntent redirects to that payment's own
// page, which tells the double charge on top, flags the unapplied
// payment, links each job into River UI and lists the payment to refund;
// all of it as plain HTML without a script.
func TestOperatorPageShowsTheTimeline(t *testing.T) {
	t.Parallel()
	e := newPageEnv(t)
	res, _ := e.get("/timeline/?q=pi_page_second", "ops")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/timeline/payment/stripe/pi_page_second", res.Header.Get("Location"))

	res, body := e.get("/timeline/payment/stripe/pi_page_second", "ops")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	require.NotContains(t, strings.ToLower(body), "<script")
	csp := res.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.NotContains(t, csp, "script-src")
	style := regexp.MustCompile(`(?s)<style>(.*)</style>`).FindStringSubmatch(body)[1]
	sum := sha256.Sum256([]byte(style))
	require.Contains(t, csp, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'", "the policy allows exactly the page's style sheet")

	require.Contains(t, body, `<div class="headline">Paid twice<span class="todo">needs attention</span></div>`)
	require.Contains(t, body, "payment cs_test_pi_page_second (pi_page_second) (9.99 USD) for the same order minted nothing and is NOT refunded yet")
	require.Regexp(t, `<tr class="bad" data-type="payment_unapplied">`, body)
	require.Regexp(t, `<a href="/riverui/jobs/\d+">job \d+ in River UI</a>`, body)
	require.Contains(t, body, `<code>order:`+strconv.FormatInt(e.order.ID, 10)+`:fulfilment</code>`)
	require.Contains(t, body, `<td class="num">9.99 USD</td>`, "the unapplied list")
	require.Contains(t, body, `value="pi_page_second"`, "the form keeps what was asked")

	res, body = e.get("/timeline/", "ops")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `<a href="/timeline/payment/stripe/cs_test_pi_page_second">stripe cs_test_pi_page_second</a>`)
	require.Contains(t, body, "Open debts")
}

// Searches: a number is an order; "player N" a player; an unknown id is
// a 404 page that says what was not found; a bad id is refused.
func TestOperatorPageSearch(t *testing.T) {
	t.Parallel()
	e := newPageEnv(t)
	order := strconv.FormatInt(e.order.ID, 10)
	for q, want := range map[string]string{
		order:                            "/timeline/order/" + order,
		"#" + order:                      "/timeline/order/" + order,
		"cs_test_order_" + order:         "/timeline/payment/stripe/cs_test_order_" + order,
		"evt_page_2":                     "/timeline/payment/stripe/evt_page_2",
		"player " + strconv.Itoa(1):      "/timeline/player/1",
		"1&kind=player&since=2026-11-01": "/timeline/player/1?since=2026-11-01",
		"1&kind=player&since=2026-11-01%26q%3Dx%23y":               "/timeline/player/1?since=2026-11-01%26q%3Dx%23y",
		"cs_test_order_" + order + "&provider=stripe&kind=payment": "/timeline/payment/stripe/cs_test_order_" + order,
	} {
		res, _ := e.get("/timeline/?q="+strings.NewReplacer(" ", "+", "#", "%23").Replace(q), "ops")
		require.Equal(t, http.StatusSeeOther, res.StatusCode, q)
		require.Equal(t, want, res.Header.Get("Location"), q)
	}
	for path, want := range map[string]string{
		"/timeline/?q=pi_nobody":                          "No stripe, paddle, creem payment, refund, dispute, event or checkout is known as pi_nobody.",
		"/timeline/?q=424242":                             "No order or player has the id 424242.",
		"/timeline/order/424242":                          "No order 424242.",
		"/timeline/payment/paddle/cs_test_order_" + order: "No paddle payment, refund, dispute, event or checkout is known as",
		"/timeline/order/07":                              "An order id is a positive number.",
		"/timeline/?q=x&kind=order":                       "An order id is a positive number.",
	} {
		res, body := e.get(path, "ops")
		require.Equal(t, http.StatusNotFound, res.StatusCode, path)
		require.Contains(t, body, `<div class="message" role="alert">`+want, path)
	}
	res, body := e.get("/timeline/player/1?since=yesterday", "ops")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, body, "since is a date")
}

// The page only reads: any other method is refused, cross-site ones by
// the River UI's guard (403, as for the River UI) and the rest with 405.
func TestOperatorPageOnlyReads(t *testing.T) {
	t.Parallel()
	e := newPageEnv(t)
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		res, body := e.do(method, "/timeline/", "ops", "q=1", "Origin", "http://evil.example",
			"Content-Type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusForbidden, res.StatusCode, method)
		require.Contains(t, body, CodeCrossSiteRequest)
		res, _ = e.do(method, "/timeline/order/1", "ops", "{}", "Sec-Fetch-Site", "same-origin", "Content-Type", "application/json")
		require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, method)
		require.Contains(t, res.Header.Get("Allow"), http.MethodGet)
	}
	res, _ := e.get("/timeline", "ops")
	require.Equal(t, http.StatusMovedPermanently, res.StatusCode)
	require.Equal(t, "/timeline/", res.Header.Get("Location"))
}

// An id no provider can send (NUL, invalid UTF-8), in a search or a path,
// is the operator's bad input: 400 with a message that says so, nothing
// logged as an ERROR (it is not the database's failure).
func TestOperatorPageRefusesInvalidIDs(t *testing.T) {
	t.Parallel()
	e := newPageEnv(t)
	for _, path := range []string{"/timeline/?q=%00", "/timeline/?q=pi_%ff", "/timeline/?q=%ff&kind=payment&provider=stripe",
		"/timeline/payment/stripe/%ff", "/timeline/payment/stripe/pi_%00", "/timeline/payment/str%ffipe/pi_1"} {
		res, body := e.get(path, "ops")
		require.Equal(t, http.StatusBadRequest, res.StatusCode, path)
		require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"), path)
		require.Contains(t, body, `<div class="message" role="alert">`, path)
		require.Contains(t, body, "must be valid UTF-8 without NUL", path)
	}
	require.Zero(t, e.errors.n.Load(), "bad input is not logged as an ERROR")
}

// The index links the operator's two views where they are mounted, each
// to a page that answers the operator: the River UI's queues (its own
// home, the Running jobs, is mostly empty) and the payment timeline.
func TestIndexLinksTheOperatorViews(t *testing.T) {
	t.Parallel()
	e := newPageEnv(t)
	res, body := e.get("/v1", "")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var ix map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &ix))
	require.NoError(t, loadDoc(t, e.srv.URL).Components.Schemas["Index"].Value.VisitJSON(ix), "the index is the documented one")
	require.Equal(t, "/riverui/queues", ix["river_ui"])
	require.Equal(t, "/timeline/", ix["timeline"])
	for _, link := range []string{ix["river_ui"].(string), ix["timeline"].(string)} {
		res, body := e.get(link, "ops")
		require.Equal(t, http.StatusOK, res.StatusCode, link)
		require.Contains(t, res.Header.Get("Content-Type"), "text/html", link)
		require.NotEmpty(t, body)
	}
}
