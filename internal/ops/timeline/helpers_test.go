package timeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/dev/devcheckout"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/stripe"
)

// registry is the drivers' registry the timelines ask for their facts.
var registry = drivers.New(nil)

func TestMain(m *testing.M) { testdb.Main(m) }

var catalogue = testkit.Catalogue()

var secrets = testkit.WebhookSecrets()

var discard = testkit.Quiet

// env is one test's database, the real fulfilment and reversal workers,
// the real webhook intake over HTTP and the checkout service.
type env struct {
	t         *testing.T
	pool      *pgxpool.Pool
	river     *river.Client[pgx.Tx]
	intake    *httptest.Server
	checkouts *checkout.Service
	player    int64
}

// newEnv starts everything; stripeAPI, when set, is a stripe-mock that
// opens Stripe checkouts and refunds unapplied Stripe payments (else a
// simulated checkout page and no automatic refund).
func newEnv(t *testing.T, stripeAPI string) *env {
	t.Helper()
	pool := testdb.New(t)
	opts := fulfillment.WorkerOptions{}
	openers := map[string]checkout.Opener{}
	for _, p := range provider.Names() {
		openers[p] = devcheckout.Simulated{BaseURL: "http://billing.test"}
	}
	if stripeAPI != "" {
		d := stripe.New(provider.Options{APIKey: "sk_test_123", APIURL: stripeAPI})
		opts.Refunders = map[string]fulfillment.Refunder{provider.Stripe: d}
		openers[provider.Stripe] = d
	}
	e := &env{t: t, pool: pool, river: fulfillmenttest.StartRiver(t, pool, opts)}
	e.intake = httptest.NewServer(webhook.NewHandler(webhook.Options{Pool: pool, River: e.river, Providers: intakes(), Logger: discard}))
	t.Cleanup(e.intake.Close)
	e.checkouts = checkout.NewService(checkout.Options{Openers: openers, SKUs: catalogue,
		SuccessURL: "http://billing.test/ok", CancelURL: "http://billing.test/cancel", Logger: discard})
	p, _, err := players.Create(context.Background(), pool, "buyer")
	require.NoError(t, err)
	e.player = p.ID
	return e
}

// intakes are every provider's driver, verifying with the test secrets.
func intakes() map[string]webhook.Intake {
	opts := map[string]provider.Options{}
	for name, s := range secrets {
		opts[name] = provider.Options{WebhookSecrets: s}
	}
	return provider.Select[webhook.Intake](drivers.New(opts))
}

// open opens a mana_1000 checkout through provider under an API key.
func (e *env) open(provider, key string) *fulfillment.Order {
	e.t.Helper()
	o, err := e.checkouts.Open(context.Background(), e.pool, fulfillment.CheckoutParams{PlayerID: e.player, SKU: "mana_1000",
		Provider: provider, Key: key})
	require.NoError(e.t, err)
	return o
}

// deliver signs body as provider does and posts it to the intake; it
// returns the intake's status ("claimed", "duplicate").
func (e *env) deliver(provider string, body []byte) string {
	e.t.Helper()
	require.NotNil(e.t, body)
	h, v, err := providerevents.Sign(provider, secrets[provider][0], body, time.Now())
	require.NoError(e.t, err)
	req, err := http.NewRequest(http.MethodPost, e.intake.URL+"/webhooks/"+provider, bytes.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(h, v)
	res, err := e.intake.Client().Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	var a struct{ Status string }
	require.NoError(e.t, json.NewDecoder(res.Body).Decode(&a))
	require.Equal(e.t, http.StatusOK, res.StatusCode, a.Status)
	return a.Status
}

// deliverAndWait delivers the event eventID (body) and waits for its job.
func (e *env) deliverAndWait(provider, eventID string, body []byte) string {
	e.t.Helper()
	require.Equal(e.t, "claimed", e.deliver(provider, body))
	return e.waitJob(eventID)
}

// waitJob waits until the job of eventID is finalized and returns its state.
func (e *env) waitJob(eventID string) string {
	e.t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for {
		var state string
		err := e.pool.QueryRow(context.Background(), `SELECT state::text FROM river_job WHERE args->>'event_id' = $1`, eventID).
			Scan(&state)
		if err == nil && (state == "completed" || state == "cancelled" || state == "discarded") {
			return state
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job of %s not finalized in time (state %q, err %v)", eventID, state, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pay delivers the order's one completed payment and waits for it.
func (e *env) pay(o *fulfillment.Order, eventID string) string {
	e.t.Helper()
	return e.deliverAndWait(o.Provider, eventID, providerevents.CompletedEvent(o.Provider, eventID, o.ID, o.Amount, o.Currency))
}

// reverse delivers a refund or dispute of the order's payment.
func (e *env) reverse(o *fulfillment.Order, eventID, id, kind, state string, amount int64, currency string) string {
	e.t.Helper()
	payment := providerevents.OrderPaymentID(o.Provider, strconv.FormatInt(o.ID, 10))
	return e.deliverAndWait(o.Provider, eventID, providerevents.ReversalEvent(o.Provider, eventID, payment, id, kind, state, amount, currency))
}

func (e *env) order(id int64) *timeline.Timeline {
	e.t.Helper()
	tl, err := timeline.Order(context.Background(), e.pool, registry, id)
	require.NoError(e.t, err)
	return tl
}

func (e *env) requireClean() {
	e.t.Helper()
	audittest.RequireClean(e.t, e.pool, audit.Options{})
}

// ofType returns the lines of typ, oldest first.
func ofType(tl *timeline.Timeline, typ string) []timeline.Line {
	var out []timeline.Line
	for _, l := range tl.Lines {
		if l.Type == typ {
			out = append(out, l)
		}
	}
	return out
}

// keyed returns the one line with a key of value (failing otherwise).
func keyed(t *testing.T, tl *timeline.Timeline, value string) timeline.Line {
	t.Helper()
	var found []timeline.Line
	for _, l := range tl.Lines {
		for _, k := range l.Keys {
			if k.Value == value {
				found = append(found, l)
			}
		}
	}
	require.Len(t, found, 1, "lines keyed %q in\n%s", value, text(t, tl))
	return found[0]
}

// text is the timeline as `billing explain` prints it, for failure messages.
func text(t *testing.T, tl *timeline.Timeline) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, tl.WriteText(&b))
	return b.String()
}

// requireOrdered fails unless the lines are oldest first.
func requireOrdered(t *testing.T, tl *timeline.Timeline) {
	t.Helper()
	for i := 1; i < len(tl.Lines); i++ {
		require.False(t, tl.Lines[i].At.Before(tl.Lines[i-1].At), "line %d is older than line %d:\n%s", i, i-1, text(t, tl))
	}
}

// walletLine asserts a wallet transaction's line: its amount, key and the
// wallet entry's balance_after.
func walletLine(t *testing.T, tl *timeline.Timeline, key string, amount, balanceAfter int64) timeline.Line {
	t.Helper()
	l := keyed(t, tl, key)
	require.Len(t, l.Entries, 2, "a transaction's two ledger entries")
	require.Zero(t, l.Entries[0].Amount+l.Entries[1].Amount)
	var wallet *timeline.Entry
	for i := range l.Entries {
		if l.Entries[i].Account == "wallet" {
			wallet = &l.Entries[i]
		}
	}
	require.NotNil(t, wallet, l)
	require.Equal(t, amount, wallet.Amount, l.Text)
	require.NotNil(t, wallet.BalanceAfter)
	require.Equal(t, balanceAfter, *wallet.BalanceAfter, l.Text)
	require.Contains(t, l.Text, fmt.Sprintf("wallet balance after: %d", balanceAfter))
	return l
}

// waitDeadline bounds each wait on a condition (a server listening, a job
// finished): a second on an idle machine, far more at load 20 on two
// cores, so generous; a failing wait still ends with its message.
const waitDeadline = 2 * time.Minute
