// Package devcheckout is `billing dev`'s simulated hosted checkout: the
// opener that hands out its page for a provider without an API key
// (Simulated) and the page itself, whose Pay button sends the provider's
// correctly signed completed-payment webhook to our own intake. It is for
// development only: only `billing dev` wires it, and the production
// intake, checkout and API packages never import it.
package devcheckout

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// Options configure Handler.
type Options struct {
	Pool *pgxpool.Pool
	// BaseURL is where billing dev serves its webhook intake.
	BaseURL string
	// Secrets are the webhook signing secrets billing dev uses, by provider.
	Secrets map[string][]string
	Logger  *slog.Logger
}

// Handler is `billing dev`'s simulated hosted checkout: GET
// /dev/checkout/{order} shows the order, clearly marked as a simulation;
// its Pay button (POST /dev/checkout/{order}/pay) sends the order's provider
// a correctly signed completed-payment webhook for the snapshot, to our own
// intake, exactly as the provider would. The event id is fixed per order,
// so paying twice is a duplicate delivery, never a second payment. A paid
// order's page offers Pay again (POST /dev/checkout/{order}/pay-again): a
// second, distinct payment (another provider payment id, a new event), as
// a customer charged twice, which the fulfilment records unapplied.
func Handler(opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &devPage{opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path+"{order}", p.show)
	mux.HandleFunc("POST "+Path+"{order}/pay", p.pay)
	mux.HandleFunc("POST "+Path+"{order}/pay-again", p.payAgain)
	return mux
}

type devPage struct{ opts Options }

func (p *devPage) order(w http.ResponseWriter, r *http.Request) (*fulfillment.Order, bool) {
	id, err := strconv.ParseInt(r.PathValue("order"), 10, 64)
	if err == nil && id > 0 {
		var o *fulfillment.Order
		if o, err = fulfillment.OrderByID(r.Context(), p.opts.Pool, id); err == nil {
			return o, true
		}
	}
	http.Error(w, "no such order", http.StatusNotFound)
	return nil, false
}

func (p *devPage) show(w http.ResponseWriter, r *http.Request) {
	o, ok := p.order(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = devTemplate.Execute(w, map[string]any{"O": o, "Price": fmt.Sprintf("%d.%02d %s", o.Amount/100, o.Amount%100,
		strings.ToUpper(o.Currency)), "Paid": r.URL.Query().Get("paid") != "", "Again": r.URL.Query().Get("paid") == "again"})
}

func (p *devPage) pay(w http.ResponseWriter, r *http.Request) {
	o, ok := p.order(w, r)
	if !ok {
		return
	}
	p.send(w, r, o, "evt_devpay_"+strconv.FormatInt(o.ID, 10), "", "1")
}

// payAgain sends a second, distinct payment of a paid order.
func (p *devPage) payAgain(w http.ResponseWriter, r *http.Request) {
	o, ok := p.order(w, r)
	if !ok {
		return
	}
	if o.Status == fulfillment.StatusPending {
		http.Error(w, "order "+strconv.FormatInt(o.ID, 10)+" is not paid yet: Pay first", http.StatusConflict)
		return
	}
	suffix := "_again_" + randomHex(4)
	payment := providerevents.OrderPaymentID(o.Provider, strconv.FormatInt(o.ID, 10)) + suffix
	p.send(w, r, o, "evt_devpay_"+strconv.FormatInt(o.ID, 10)+suffix, payment, "again")
}

// send delivers the order's payment event (payment "" for its first
// payment) and shows the page again.
func (p *devPage) send(w http.ResponseWriter, r *http.Request, o *fulfillment.Order, eventID, payment, paid string) {
	secrets := p.opts.Secrets[o.Provider]
	if len(secrets) == 0 {
		http.Error(w, "no webhook secret for "+o.Provider, http.StatusServiceUnavailable)
		return
	}
	status, err := p.deliver(r.Context(), o, eventID, payment, secrets[0])
	if err != nil || status/100 != 2 {
		p.opts.Logger.ErrorContext(r.Context(), "dev checkout: webhook delivery failed", "order_id", o.ID,
			"status", status, "error", err)
		http.Error(w, fmt.Sprintf("webhook delivery failed: %d %v", status, err), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, Path+strconv.FormatInt(o.ID, 10)+"?paid="+paid, http.StatusSeeOther)
}

// deliver POSTs the signed completed-payment event to our webhook intake.
func (p *devPage) deliver(ctx context.Context, o *fulfillment.Order, eventID, payment, secret string) (int, error) {
	body, header, value, err := signedCompletedEvent(o.Provider, secret, eventID, payment, o.ID, o.Amount, o.Currency)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		strings.TrimRight(p.opts.BaseURL, "/")+"/webhooks/"+o.Provider, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set(header, value)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return hex.EncodeToString(b)
}

// signedCompletedEvent is the one call into the dev event builders (shared
// with `billing dev send-webhook`): the provider's completed-payment body
// for the order (of provider payment payment; "" for the order's first),
// and its signature header.
func signedCompletedEvent(provider, secret, eventID, payment string, order, amount int64, currency string) ([]byte, string, string, error) {
	body := providerevents.CompletedEvent(provider, eventID, order, amount, currency)
	if payment != "" {
		body = providerevents.PaymentEvent(provider, eventID, payment, order, amount, currency)
	}
	header, value, err := providerevents.Sign(provider, secret, body, time.Now())
	return body, header, value, err
}

var devTemplate = template.Must(template.New("dev").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>SIMULATED checkout · order {{.O.ID}}</title>
{{if and .Paid (eq .O.Status "pending")}}<meta http-equiv="refresh" content="1">{{end}}
<style>body{font-family:sans-serif;max-width:32em;margin:2em auto}
.sim{background:#b00020;color:#fff;padding:1em;font-weight:bold}button{font-size:1.3em;padding:.4em 2em}</style></head>
<body>
<p class="sim" id="simulation">SIMULATION: billing dev's stand-in for {{.O.Provider}}'s hosted checkout. No money moves;
Pay sends {{.O.Provider}}'s signed completed-payment webhook to this server.</p>
<h1>{{.O.SKU}}</h1>
<p>Order <b id="order">{{.O.ID}}</b> · <span id="price">{{.Price}}</span> · {{.O.Mana}} Mana · via {{.O.Provider}}</p>
<p>Status: <b id="status">{{.O.Status}}</b></p>
{{if eq .O.Status "pending"}}{{if .Paid}}<p>Payment sent; waiting for the fulfilment…</p>{{else}}
<form method="post" action="/dev/checkout/{{.O.ID}}/pay"><button id="pay" type="submit">Pay {{.Price}}</button></form>{{end}}
{{else if eq .O.Status "fulfilled"}}<p id="done">Paid: {{.O.Mana}} Mana are in the wallet.</p>
{{if .Again}}<p id="again-sent">A second, distinct payment was sent: it mints nothing and is recorded unapplied, to be refunded
(billing payments list --unapplied; the Timeline page shows the order paid twice).</p>{{end}}
<form method="post" action="/dev/checkout/{{.O.ID}}/pay-again"><button id="pay-again" type="submit">Pay again</button>
(a second, distinct payment of {{.Price}}: the customer charged twice)</form>
{{else if eq .O.Status "rejected"}}<p id="rejected">Rejected, no Mana credited: {{.O.Reason}}</p>{{end}}
</body></html>`))
