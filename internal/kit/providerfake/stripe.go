package providerfake

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

func stripeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": msg}})
}

// stripeSession is POST /v1/checkout/sessions: it checks the parameters
// billing sends (mode=payment, one price_data line item, the order in
// client_reference_id and metadata, an Idempotency-Key) and replays the
// session of a key seen before.
func (s *Server) stripeSession(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		stripeError(w, http.StatusBadRequest, "cannot parse form")
		return
	}
	f := r.PostForm
	c := Call{Provider: Stripe, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		OrderID: f.Get("metadata[order_id]"), Currency: f.Get("line_items[0][price_data][currency]"),
		Amount: parseInt(f.Get("line_items[0][price_data][unit_amount]"))}
	c.Problem = stripeProblem(r, f.Get, c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.injected(Stripe); st != 0 {
		c.Status = st
		s.record(c)
		stripeError(w, st, "injected failure")
		return
	}
	if c.Problem != "" {
		c.Status = http.StatusBadRequest
		s.record(c)
		stripeError(w, http.StatusBadRequest, c.Problem)
		return
	}
	sess, ok := s.sessions[c.IdempotencyKey]
	if !ok {
		s.created[Stripe]++
		id := "cs_test_fake" + strconv.Itoa(s.created[Stripe])
		sess = map[string]any{"id": id, "object": "checkout.session", "mode": "payment", "status": "open",
			"payment_status": "unpaid", "amount_total": c.Amount, "currency": c.Currency,
			"client_reference_id": f.Get("client_reference_id"), "metadata": map[string]string{"order_id": c.OrderID},
			"url": "https://checkout.stripe.com/c/pay/" + id}
		s.sessions[c.IdempotencyKey] = sess
	}
	c.Status = http.StatusOK
	s.record(c)
	writeJSON(w, http.StatusOK, sess)
}

func stripeProblem(r *http.Request, get func(string) string, c Call) string {
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

// stripeEvents is GET /v1/events: the scripted events, newest first,
// filtered by types[] and created[gte], paged by limit (default 10) and
// starting_after, like Stripe's.
func (s *Server) stripeEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var types []string // stripe-go sends types[0], types[1], ...
	for k, v := range q {
		if strings.HasPrefix(k, "types[") {
			types = append(types, v...)
		}
	}
	gte := parseInt(q.Get("created[gte]"))
	s.mu.Lock()
	evs := s.events[Stripe]
	s.mu.Unlock()
	data := []json.RawMessage{}
	for i := len(evs) - 1; i >= 0; i-- {
		var e struct {
			Type    string `json:"type"`
			Created int64  `json:"created"`
		}
		if json.Unmarshal(evs[i], &e) != nil {
			continue
		}
		if (len(types) > 0 && !contains(types, e.Type)) || (gte > 0 && e.Created < gte) {
			continue
		}
		data = append(data, evs[i])
	}
	data, more := stripePage(data, q.Get("starting_after"), int(parseInt(q.Get("limit"))))
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "url": "/v1/events", "has_more": more, "data": data})
}

// stripePage is the page of events after the one with id after ("": from
// the first), of at most limit (10 when not positive), and whether more
// follow.
func stripePage(evs []json.RawMessage, after string, limit int) ([]json.RawMessage, bool) {
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

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// stripeRefund is POST /v1/refunds: a refund of a PaymentIntent under an
// Idempotency-Key (the double-charge path), replayed for a key seen before
// as Stripe does, so a retried job never refunds twice.
func (s *Server) stripeRefund(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		stripeError(w, http.StatusBadRequest, "cannot parse form")
		return
	}
	f := r.PostForm
	c := Call{Provider: Stripe, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Amount: parseInt(f.Get("amount"))}
	switch {
	case !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer sk_"):
		c.Problem = "missing secret key"
	case c.IdempotencyKey == "":
		c.Problem = "missing Idempotency-Key"
	case !strings.HasPrefix(f.Get("payment_intent"), "pi_"):
		c.Problem = "payment_intent must name a PaymentIntent"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Problem != "" {
		c.Status = http.StatusBadRequest
		s.record(c)
		stripeError(w, http.StatusBadRequest, c.Problem)
		return
	}
	ref, ok := s.refunds[c.IdempotencyKey]
	if !ok {
		s.created["stripe_refund"]++
		ref = map[string]any{"id": "re_fake" + strconv.Itoa(s.created["stripe_refund"]), "object": "refund",
			"amount": c.Amount, "payment_intent": f.Get("payment_intent"), "status": "succeeded"}
		s.refunds[c.IdempotencyKey] = ref
	}
	c.Status = http.StatusOK
	s.record(c)
	writeJSON(w, http.StatusOK, ref)
}
