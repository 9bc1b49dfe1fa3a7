// Package stripefake is a recording stand-in for Stripe's API, for tests
// and the lab: Checkout Sessions, Events and Refunds on a fakeapi server.
// It checks each request's shape against what billing must send, answers
// like Stripe, and serves the event lists a test scripts.
//
// Unlike stripe-mock it keeps state: an Idempotency-Key seen before
// returns the session (or refund) it created, as Stripe does, so a test
// can count the sessions really opened.
package stripefake

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
)

const name = provider.Stripe

// Start starts a server faking Stripe alone; Close it when done.
func Start() *fakeapi.Server { return fakeapi.Start(Routes) }

// Routes adds Stripe's API to mux, over s.
func Routes(s *fakeapi.Server, mux *http.ServeMux) {
	f := &fake{s: s, sessions: map[string]map[string]any{}, refunds: map[string]map[string]any{}}
	mux.HandleFunc("POST /v1/checkout/sessions", f.session)
	mux.HandleFunc("GET /v1/events", f.events)
	mux.HandleFunc("POST /v1/refunds", f.refund)
}

type fake struct {
	s        *fakeapi.Server
	mu       sync.Mutex
	sessions map[string]map[string]any // Idempotency-Key -> session
	refunds  map[string]map[string]any // Idempotency-Key -> refund
}

func stripeError(w http.ResponseWriter, status int, msg string) {
	fakeapi.WriteJSON(w, status, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": msg}})
}

// refuse records c refused with status and answers Stripe's error.
func (f *fake) refuse(w http.ResponseWriter, c fakeapi.Call, status int, msg string) {
	c.Status = status
	f.s.Record(c)
	stripeError(w, status, msg)
}

// session is POST /v1/checkout/sessions: it checks the parameters billing
// sends (mode=payment, one price_data line item, the order in
// client_reference_id and metadata, an Idempotency-Key) and replays the
// session of a key seen before.
func (f *fake) session(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		stripeError(w, http.StatusBadRequest, "cannot parse form")
		return
	}
	form := r.PostForm
	c := fakeapi.Call{Provider: name, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		OrderID: form.Get("metadata[order_id]"), Currency: form.Get("line_items[0][price_data][currency]"),
		Amount: fakeapi.ParseInt(form.Get("line_items[0][price_data][unit_amount]"))}
	c.Problem = problem(r, form.Get, c)
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.s.Injected(name); st != 0 {
		f.refuse(w, c, st, "injected failure")
		return
	}
	if c.Problem != "" {
		f.refuse(w, c, http.StatusBadRequest, c.Problem)
		return
	}
	sess, ok := f.sessions[c.IdempotencyKey]
	if !ok {
		id := "cs_test_fake" + strconv.Itoa(f.s.Create(name))
		sess = map[string]any{"id": id, "object": "checkout.session", "mode": "payment", "status": "open",
			"payment_status": "unpaid", "amount_total": c.Amount, "currency": c.Currency,
			"client_reference_id": form.Get("client_reference_id"), "metadata": map[string]string{"order_id": c.OrderID},
			"url": "https://checkout.stripe.com/c/pay/" + id}
		f.sessions[c.IdempotencyKey] = sess
	}
	c.Status = http.StatusOK
	f.s.Record(c)
	fakeapi.WriteJSON(w, http.StatusOK, sess)
}

func problem(r *http.Request, get func(string) string, c fakeapi.Call) string {
	switch {
	case !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer sk_"):
		return "missing secret key"
	case c.IdempotencyKey == "":
		return "missing Idempotency-Key"
	case get("mode") != "payment":
		return "mode must be payment"
	case c.OrderID == "" || get("client_reference_id") != c.OrderID:
		return "client_reference_id and metadata[order_id] must name the order"
	case c.Amount <= 0 || len(c.Currency) != 3:
		return "line_items[0][price_data] needs unit_amount and currency"
	case get("line_items[0][price_data][product_data][name]") == "" || get("line_items[0][quantity]") != "1":
		return "line_items[0] needs a product name and quantity 1"
	case get("line_items[1][quantity]") != "":
		return "exactly one line item"
	}
	return ""
}

// events is GET /v1/events: the scripted events, newest first, filtered
// by types[] and created[gte], paged by limit (default 10) and
// starting_after, like Stripe's.
func (f *fake) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var types []string // stripe-go sends types[0], types[1], ...
	for k, v := range q {
		if strings.HasPrefix(k, "types[") {
			types = append(types, v...)
		}
	}
	gte := fakeapi.ParseInt(q.Get("created[gte]"))
	evs := f.s.Events(name)
	data := []json.RawMessage{}
	for i := len(evs) - 1; i >= 0; i-- {
		var e struct {
			Type    string `json:"type"`
			Created int64  `json:"created"`
		}
		if json.Unmarshal(evs[i], &e) != nil {
			continue
		}
		if (len(types) > 0 && !slices.Contains(types, e.Type)) || (gte > 0 && e.Created < gte) {
			continue
		}
		data = append(data, evs[i])
	}
	data, more := page(data, q.Get("starting_after"), int(fakeapi.ParseInt(q.Get("limit"))))
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "url": "/v1/events", "has_more": more, "data": data})
}

// page is the page of events after the one with id after ("": from the
// first), of at most limit (10 when not positive), and whether more
// follow.
func page(evs []json.RawMessage, after string, limit int) ([]json.RawMessage, bool) {
	if limit <= 0 {
		limit = 10
	}
	if after != "" {
		for i, ev := range evs {
			var e struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(ev, &e) == nil && e.ID == after {
				evs = evs[i+1:]
				break
			}
		}
	}
	if len(evs) > limit {
		return evs[:limit], true
	}
	return evs, false
}

// refund is POST /v1/refunds: a refund of a PaymentIntent under an
// Idempotency-Key (the double-charge path), replayed for a key seen
// before as Stripe does, so a retried job never refunds twice.
func (f *fake) refund(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		stripeError(w, http.StatusBadRequest, "cannot parse form")
		return
	}
	form := r.PostForm
	c := fakeapi.Call{Provider: name, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Amount: fakeapi.ParseInt(form.Get("amount"))}
	switch {
	case !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer sk_"):
		c.Problem = "missing secret key"
	case c.IdempotencyKey == "":
		c.Problem = "missing Idempotency-Key"
	case !strings.HasPrefix(form.Get("payment_intent"), "pi_"):
		c.Problem = "payment_intent must name a PaymentIntent"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.Problem != "" {
		f.refuse(w, c, http.StatusBadRequest, c.Problem)
		return
	}
	ref, ok := f.refunds[c.IdempotencyKey]
	if !ok {
		ref = map[string]any{"id": "re_fake" + strconv.Itoa(f.s.Create("stripe_refund")), "object": "refund",
			"amount": c.Amount, "payment_intent": form.Get("payment_intent"), "status": "succeeded"}
		f.refunds[c.IdempotencyKey] = ref
	}
	c.Status = http.StatusOK
	f.s.Record(c)
	fakeapi.WriteJSON(w, http.StatusOK, ref)
}
