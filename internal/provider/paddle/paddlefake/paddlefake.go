// Package paddlefake is a recording stand-in for Paddle Billing's API, for
// tests and the lab: transactions, prices and events on a fakeapi server.
// It decodes each request into paddle-go-sdk's own request types, checks
// what billing must send, answers like Paddle and serves the event lists
// a test scripts.
package paddlefake

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
)

const name = provider.Paddle

// Start starts a server faking Paddle alone; Close it when done.
func Start() *fakeapi.Server { return fakeapi.Start(Routes) }

// Routes adds Paddle's API to mux, over s.
func Routes(s *fakeapi.Server, mux *http.ServeMux) {
	f := &fake{s: s}
	mux.HandleFunc("POST /transactions", f.transaction)
	mux.HandleFunc("GET /prices/{id}", f.price)
	mux.HandleFunc("GET /events", f.events)
}

type fake struct{ s *fakeapi.Server }

// item is one item of a transaction as billing sends it.
type item struct {
	PriceID string                                    `json:"price_id"`
	Price   *paddle.TransactionPriceCreateWithProduct `json:"price"`
}

func paddleError(w http.ResponseWriter, status int, code, detail string) {
	fakeapi.WriteJSON(w, status, map[string]any{"error": map[string]any{"type": "request_error", "code": code, "detail": detail},
		"meta": map[string]any{"request_id": "fake"}})
}

// transaction is POST /transactions, decoded into paddle-go-sdk's own
// request type: one item (a catalogue price, or a non-catalogue price
// with its product) and custom_data.order_id.
func (f *fake) transaction(w http.ResponseWriter, r *http.Request) {
	var req paddle.CreateTransactionRequest
	var raw struct {
		Items []item `json:"items"`
	}
	body, c := fakeapi.ReadBody(r), fakeapi.Call{Provider: name, Path: r.URL.Path}
	if json.Unmarshal(body, &req) != nil || json.Unmarshal(body, &raw) != nil {
		c.Problem = "malformed JSON"
	} else {
		c.OrderID, _ = req.CustomData["order_id"].(string)
		c.Problem = f.itemProblem(r, raw.Items, &c)
	}
	if st := f.s.Injected(name); st != 0 {
		c.Status = st
		f.s.Record(c)
		paddleError(w, st, "injected", "injected failure")
		return
	}
	if c.Problem != "" {
		c.Status = http.StatusBadRequest
		f.s.Record(c)
		paddleError(w, http.StatusBadRequest, "bad_request", c.Problem)
		return
	}
	id := "txn_fake" + strconv.Itoa(f.s.Create(name))
	c.Status = http.StatusCreated
	f.s.Record(c)
	fakeapi.WriteJSON(w, http.StatusCreated, map[string]any{"data": map[string]any{"id": id, "status": "draft",
		"custom_data": req.CustomData, "currency_code": strings.ToUpper(c.Currency),
		"checkout": map[string]any{"url": "https://pay.paddle.test/checkout?_ptxn=" + id}},
		"meta": map[string]any{"request_id": "fake"}})
}

func (f *fake) itemProblem(r *http.Request, items []item, c *fakeapi.Call) string {
	switch {
	case !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "):
		return "missing API key"
	case c.OrderID == "":
		return "custom_data.order_id is required"
	case len(items) != 1:
		return "exactly one item"
	case items[0].PriceID != "":
		p, ok := f.s.Product(items[0].PriceID)
		if !ok {
			return "no such price " + items[0].PriceID
		}
		c.Amount, c.Currency = p.Price, p.Currency
		return ""
	case items[0].Price == nil || items[0].Price.Product.Name == "":
		return "a non-catalogue item needs a price with a product"
	}
	c.Amount = fakeapi.ParseInt(items[0].Price.UnitPrice.Amount)
	c.Currency = strings.ToLower(string(items[0].Price.UnitPrice.CurrencyCode))
	if c.Amount <= 0 || len(c.Currency) != 3 {
		return "unit_price needs an integer amount and a currency"
	}
	return ""
}

// price is GET /prices/{id}.
func (f *fake) price(w http.ResponseWriter, r *http.Request) {
	p, ok := f.s.Product(r.PathValue("id"))
	if !ok {
		paddleError(w, http.StatusNotFound, "not_found", "price not found")
		return
	}
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"id": r.PathValue("id"),
		"unit_price": map[string]any{"amount": strconv.FormatInt(p.Price, 10), "currency_code": strings.ToUpper(p.Currency)}},
		"meta": map[string]any{"request_id": "fake"}})
}

// events is GET /events: the scripted events, oldest first unless
// order_by=id[DESC], paged by per_page (default 50) and after (an event
// id), with meta.pagination.next naming the next page, like Paddle's.
func (f *fake) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	evs := ofTypes(f.s.Events(name), q["event_type"])
	if q.Get("order_by") == "id[DESC]" {
		slices.Reverse(evs)
	}
	perPage := int(fakeapi.ParseInt(q.Get("per_page")))
	if perPage <= 0 {
		perPage = 50
	}
	page, more := pageOf(evs, q.Get("after"), perPage)
	next := ""
	if more {
		q.Set("after", eventID(page[len(page)-1]))
		next = "http://" + r.Host + r.URL.Path + "?" + q.Encode()
	}
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"data": page, "meta": map[string]any{"request_id": "fake",
		"pagination": map[string]any{"per_page": perPage, "next": next, "has_more": more, "estimated_total": len(evs)}}})
}

// pageOf is the page of events after the one with id after ("": from the
// first), of at most perPage, and whether more follow.
func pageOf(evs []json.RawMessage, after string, perPage int) ([]json.RawMessage, bool) {
	if after != "" {
		for i, ev := range evs {
			if eventID(ev) == after {
				evs = evs[i+1:]
				break
			}
		}
	}
	if len(evs) > perPage {
		return evs[:perPage], true
	}
	return evs, false
}

// ofTypes keeps the events of the types asked for (each value may list
// several, comma-separated); none asked for keeps every event.
func ofTypes(evs []json.RawMessage, asked []string) []json.RawMessage {
	var types []string
	for _, a := range asked {
		types = append(types, strings.Split(a, ",")...)
	}
	if len(types) == 0 {
		return evs
	}
	return slices.DeleteFunc(evs, func(ev json.RawMessage) bool {
		var e struct {
			EventType string `json:"event_type"`
		}
		_ = json.Unmarshal(ev, &e)
		return !slices.Contains(types, e.EventType)
	})
}

func eventID(ev json.RawMessage) string {
	var e struct {
		EventID string `json:"event_id"`
	}
	_ = json.Unmarshal(ev, &e)
	return e.EventID
}
