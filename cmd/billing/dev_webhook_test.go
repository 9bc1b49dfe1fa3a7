package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// noWebhookSecrets makes sure the environment of the test run configures no
// provider secret, so billing dev makes its own.
var noWebhookSecrets = []string{"BILLING_STRIPE_WEBHOOK_SECRET=", "BILLING_PADDLE_WEBHOOK_SECRET=", "BILLING_CREEM_WEBHOOK_SECRET="}

// TestDevSendWebhook pays new orders of a running `billing dev` with
// `billing dev send-webhook`, as the operations guide tells a newcomer to:
// the first delivery is claimed, the same --event again is a duplicate, the
// order is fulfilled and the Mana arrives exactly once; a payment of
// another amount is claimed and its order rejected; every provider's dev
// secret is accepted.
func TestDevSendWebhook(t *testing.T) {
	t.Parallel()
	d := startWebhookDev(t)
	api := d.api
	manaBefore := api.mana()
	order := api.checkout("mana_1000", "stripe")
	out, err := d.send("stripe", "--order", order.ID, "--event", "evt_x")
	require.NoError(t, err, out)
	require.Contains(t, out, "event evt_x, order "+order.ID+", 999 usd\n200 OK\n{\"status\":\"claimed\"}\n")
	out, err = d.send("stripe", "--order", order.ID, "--event", "evt_x")
	require.NoError(t, err, out)
	require.Contains(t, out, "200 OK\n{\"status\":\"duplicate\"}\n")
	require.Equal(t, "fulfilled", api.waitOrder(order.ID).Status)
	require.Equal(t, manaBefore+order.Mana, api.mana(), "the order's Mana, once")
	require.Equal(t, 1, api.purchases(order.ID), "one purchase transaction for the order")
	requireDevEvent(t, "http://"+d.addr, "order.fulfilled")

	// Another amount: claimed by intake, then rejected by the fulfillment.
	wrong := api.checkout("mana_1000", "paddle")
	out, err = d.send("paddle", "--order", wrong.ID, "--amount", "1")
	require.NoError(t, err, out)
	require.Contains(t, out, ", 1 usd\n200 OK\n{\"status\":\"claimed\"}\n")
	rejected := api.waitOrder(wrong.ID)
	require.Equal(t, "rejected", rejected.Status)
	require.Contains(t, rejected.Reason, "paid 1 usd")

	creem := d.payCreem()
	require.Equal(t, manaBefore+order.Mana+creem.Mana, api.mana())
	require.Equal(t, 1, api.purchases(creem.ID))

	// A partial refund of the Stripe order, sent twice under new event ids:
	// clawed back once, ceil(1000 x 500 / 999) Mana.
	for range 2 {
		out, err = d.send("stripe", "--order", order.ID, "--kind", "refund", "--amount", "500")
		require.NoError(t, err, out)
		require.Contains(t, out, "200 OK\n{\"status\":\"claimed\"}\n")
	}
	require.Eventually(t, func() bool { return api.waitOrder(order.ID).Status == "partially_refunded" }, devDeadline, 50*time.Millisecond)
	require.Equal(t, manaBefore+order.Mana+creem.Mana-501, api.mana())
	out, err = d.send("paddle", "--order", wrong.ID, "--kind", "dispute-open")
	require.Error(t, err)
	require.Contains(t, out, `paddle sends no "dispute-open" event`)

	// A refused delivery exits non-zero and says why.
	out, err = d.send("stripe", "--order", order.ID, "--amount", "999", "--currency", "usd", "--url", "http://"+d.addr+"/nowhere")
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "want a non-zero exit, got %v:\n%s", err, out)
	require.Contains(t, out, "\n404 Not Found\n")
	out, err = d.send("stripe", "--order", "999999999")
	require.Error(t, err)
	require.Contains(t, out, "answered 404")

	d.dev.stop(t, syscall.SIGINT, devDeadline)
}

// webhookDev is a running `billing dev` with secrets of its own, its demo
// seed and an API client as its demo player.
type webhookDev struct {
	t         *testing.T
	dev       *proc
	dir, addr string
	seed      demoSeed
	api       devAPI
}

func startWebhookDev(t *testing.T) *webhookDev {
	t.Helper()
	d := &webhookDev{t: t, dir: filepath.Join(t.TempDir(), "dev"), addr: freeAddr(t)}
	env := append([]string{"BILLING_HTTP_ADDR=" + d.addr, "BILLING_DATABASE_URL="}, noWebhookSecrets...)
	d.dev = startProc(t, env, "dev", "--dir", d.dir)
	waitHealthy(t, "http://"+d.addr, d.dev, devDeadline)
	require.Eventually(t, func() bool { return strings.Contains(d.dev.out.String(), "Ctrl-C stops everything") }, devDeadline, 20*time.Millisecond)

	raw, err := os.ReadFile(filepath.Join(d.dir, "demo.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &d.seed))
	require.Equal(t, "http://"+d.addr, d.seed.URL)
	for _, p := range []string{"stripe", "paddle", "creem"} {
		require.NotEmpty(t, d.seed.WebhookSecrets[p], "a dev secret for %s", p)
	}
	d.api = devAPI{t: t, base: d.seed.URL, key: d.seed.APIKey}
	return d
}

// send runs `billing dev send-webhook args... --dir <dev's>`.
func (d *webhookDev) send(args ...string) (string, error) {
	cmd := exec.Command(billingBin(d.t), append([]string{"dev", "send-webhook"}, append(args, "--dir", d.dir)...)...)
	cmd.Env = append(os.Environ(), noWebhookSecrets...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// payCreem pays a new Creem order with a random event id each run: two
// runs, two claims, then a third with --json; the order is fulfilled.
func (d *webhookDev) payCreem() apiOrder {
	t := d.t
	t.Helper()
	creem := d.api.checkout("mana_5000", "creem")
	for range 2 {
		out, err := d.send("creem", "--order", creem.ID)
		require.NoError(t, err, out)
		require.Contains(t, out, "200 OK\n{\"status\":\"claimed\"}\n")
	}
	out, err := d.send("creem", "--order", creem.ID, "--json")
	require.NoError(t, err, out)
	var sent struct {
		URL    string `json:"url"`
		Order  string `json:"order"`
		Status int    `json:"status"`
		Answer struct {
			Status string `json:"status"`
		} `json:"answer"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &sent), out)
	require.Equal(t, d.seed.URL+"/webhooks/creem", sent.URL)
	require.Equal(t, creem.ID, sent.Order)
	require.Equal(t, 200, sent.Status)
	require.Equal(t, "claimed", sent.Answer.Status)
	require.Equal(t, "fulfilled", d.api.waitOrder(creem.ID).Status)
	return creem
}

// devAPI calls the /v1 API of a test server as one player.
type devAPI struct {
	t         *testing.T
	base, key string
}

type apiOrder struct {
	ID     string `json:"id"`
	Mana   int64  `json:"mana"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// do sends a JSON request and returns the status, body and response
// headers; headers are name, value pairs.
func (a devAPI) do(method, path string, body any, headers ...string) (int, []byte, http.Header) {
	a.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(a.t, err)
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiRequestDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+a.key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	return resp.StatusCode, b, resp.Header
}

func (a devAPI) decode(method, path string, body any, want int, dst any, headers ...string) {
	a.t.Helper()
	status, b, _ := a.do(method, path, body, headers...)
	require.Equal(a.t, want, status, "%s %s: %s", method, path, b)
	require.NoError(a.t, json.Unmarshal(b, dst), string(b))
}

func (a devAPI) checkout(sku, provider string) apiOrder {
	a.t.Helper()
	var o apiOrder
	a.decode(http.MethodPost, "/v1/checkouts", map[string]string{"sku": sku, "provider": provider}, http.StatusCreated, &o)
	require.Equal(a.t, "pending", o.Status)
	return o
}

func (a devAPI) waitOrder(id string) apiOrder {
	a.t.Helper()
	var o apiOrder
	require.Eventually(a.t, func() bool {
		a.decode(http.MethodGet, "/v1/orders/"+id, nil, http.StatusOK, &o)
		return o.Status != "pending"
	}, devDeadline, 50*time.Millisecond, "order %s stays pending", id)
	return o
}

func (a devAPI) balances() (mana, sparks int64) {
	a.t.Helper()
	var w map[string]struct {
		Balance int64 `json:"balance"`
	}
	a.decode(http.MethodGet, "/v1/wallets", nil, http.StatusOK, &w)
	return w["mana"].Balance, w["sparks"].Balance
}

func (a devAPI) mana() int64 {
	m, _ := a.balances()
	return m
}

// purchases counts the Mana transactions that credit order id.
func (a devAPI) purchases(id string) int {
	a.t.Helper()
	var page struct {
		Data []struct {
			Kind      string `json:"kind"`
			Reference string `json:"reference"`
		} `json:"data"`
	}
	a.decode(http.MethodGet, "/v1/wallets/mana/transactions?limit=100", nil, http.StatusOK, &page)
	n := 0
	for _, tx := range page.Data {
		if tx.Kind == "purchase" && tx.Reference == "order:"+id {
			n++
		}
	}
	return n
}

// requireDevEvent waits until dev's own events endpoint lists a verified
// delivery of an event of type typ: billing sent it, signed, to the
// endpoint dev registered, and the SDK verified it.
func requireDevEvent(t *testing.T, base, typ string) {
	t.Helper()
	var seen struct {
		Deliveries []map[string]any `json:"deliveries"`
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/dev/events/?format=json")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		seen.Deliveries = nil
		if json.NewDecoder(resp.Body).Decode(&seen) != nil {
			return false
		}
		for _, d := range seen.Deliveries {
			if d["type"] == typ && d["verified"] == true {
				return true
			}
		}
		return false
	}, devDeadline, 100*time.Millisecond, "dev's events endpoint never listed a verified %s; it lists %v", typ, seen.Deliveries)
}
