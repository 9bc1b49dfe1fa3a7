package operatorpage

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/provider"
)

// Search kinds of the form.
const (
	kindAuto    = "auto"    // a number is an order (else a player), anything else a provider id
	kindOrder   = "order"   // an order id
	kindPlayer  = "player"  // a player id
	kindPayment = "payment" // a provider id
)

// search is the page's home: the form and the lists; with a query, it
// finds what the query names and redirects to its timeline's own URL (a
// link an operator can paste into a ticket).
func (h *handler) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	term := strings.TrimSpace(q.Get("q"))
	if term == "" {
		h.render(w, r, http.StatusOK, &view{})
		return
	}
	target, msg, err := h.find(r, term, q.Get("kind"), q.Get("provider"))
	switch {
	case err != nil:
		h.fail(w, r, err)
	case target == "":
		h.render(w, r, http.StatusNotFound, &view{Message: msg})
	default:
		if since := q.Get("since"); since != "" && strings.HasPrefix(target, Path+"player/") {
			target += "?" + url.Values{"since": {since}}.Encode()
		}
		http.Redirect(w, r, target, http.StatusSeeOther)
	}
}

// find returns the URL of the timeline term names, or why there is none.
func (h *handler) find(r *http.Request, term, kind, only string) (target, msg string, err error) {
	lower := strings.ToLower(term)
	for _, k := range []string{kindOrder, kindPlayer} {
		if rest, ok := strings.CutPrefix(lower, k+" "); ok && (kind == "" || kind == kindAuto) {
			kind, term = k, strings.TrimSpace(rest)
		}
	}
	id, numeric := positive(strings.TrimPrefix(term, "#"))
	switch {
	case kind == kindOrder || kind == kindPlayer:
		if !numeric {
			return "", "An " + kind + " id is a positive number.", nil
		}
		if kind == kindOrder {
			return orderURL(id), "", nil
		}
		return playerURL(id), "", nil
	case kind != kindPayment && numeric:
		return h.findNumber(r, id)
	}
	return h.findProviderID(r, term, only)
}

// findNumber takes a bare number for an order id, else a player id
// (whose timeline since now is only the lookup).
func (h *handler) findNumber(r *http.Request, id int64) (string, string, error) {
	_, err := timeline.Order(r.Context(), h.opts.DB, h.opts.Providers, id)
	if err == nil {
		return orderURL(id), "", nil
	}
	if !errors.Is(err, timeline.ErrNotFound) {
		return "", "", err
	}
	if _, err := timeline.Player(r.Context(), h.opts.DB, h.opts.Providers, id, time.Now()); err == nil {
		return playerURL(id), "", nil
	} else if !errors.Is(err, timeline.ErrNotFound) {
		return "", "", err
	}
	return "", "No order or player has the id " + r.URL.Query().Get("q") + ".", nil
}

// findProviderID tries only, or every provider (the one the id's prefix
// suggests first).
func (h *handler) findProviderID(r *http.Request, id, only string) (string, string, error) {
	tries := providers(h.opts.Providers, id)
	if provider.Known(only) {
		tries = []string{only}
	}
	for _, p := range tries {
		_, err := timeline.Payment(r.Context(), h.opts.DB, h.opts.Providers, p, id)
		if err == nil {
			return paymentURL(p, id), "", nil
		}
		if !errors.Is(err, timeline.ErrNotFound) {
			return "", "", err
		}
	}
	return "", "No " + strings.Join(tries, ", ") + " payment, refund, dispute, event or checkout is known as " + id + ".", nil
}
