package providerfake

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"
)

func paddleError(w http.ResponseWriter, status int, code, detail string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"type": "request_error", "code": code, "detail": detail},
		"meta": map[string]any{"request_id": "fake"}})
}

// paddleTransaction is POST /transactions, decoded into paddle-go-sdk's own
// request type: one item (a catalogue price, or a non-catalogue price with
// its product) and custom_data.order_id.
func (s *Server) paddleTransaction(w http.ResponseWriter, r *http.Request) {
	var req paddle.CreateTransactionRequest
	var raw struct {
		Items []struct {
			PriceID string                                    `json:"price_id"`
			Price   *paddle.TransactionPriceCreateWithProduct `json:"price"`
		} `json:"items"`
	}
	body, c := readBody(r), Call{Provider: Paddle, Path: r.URL.Path}
	if json.Unmarshal(body, &req) != nil || json.Unmarshal(body, &raw) != nil {
		c.Problem = "malformed JSON"
	} else {
		c.OrderID, _ = req.CustomData["order_id"].(string)
		c.Problem = s.paddleItemProblem(r, raw.Items, &c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.injected(Paddle); st != 0 {
		c.Status = st
		s.record(c)
		paddleError(w, st, "injected", "injected failure")
		return
	}
	if c.Problem != "" {
		c.Status = http.StatusBadRequest
		s.record(c)
		paddleError(w, http.StatusBadRequest, "bad_request", c.Problem)
		return
	}
	s.created[Paddle]++
	id := "txn_fake" + strconv.Itoa(s.created[Paddle])
	c.Status = http.StatusCreated
	s.record(c)
	writeJSON(w, http.StatusCreated, map[string]any{"data": map[string]any{"id": id, "status": "draft",
		"custom_data": req.CustomData, "currency_code": strings.ToUpper(c.Currency),
		"checkout": map[string]any{"url": "https://pay.paddle.test/checkout?_ptxn=" + id}},
		"meta": map[string]any{"request_id": "fake"}})
}

func (s *Server) paddleItemProblem(r *http.Request, items []struct {
	PriceID string                                    `json:"price_id"`
	Price   *paddle.TransactionPriceCreateWithProduct `json:"price"`
}, c *Call) string {
	switch {
	case !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "):
		return "missing API key"
	case c.OrderID == "":
		return "custom_data.order_id is required"
	case len(items) != 1:
		return "exactly one item"
	case items[0].PriceID != "":
		s.mu.Lock()
		p, ok := s.products[items[0].PriceID]
		s.mu.Unlock()
		if !ok {
			return "no such price " + items[0].PriceID
		}
		c.Amount, c.Currency = p.Price, p.Currency
		return ""
	case items[0].Price == nil || items[0].Price.Product.Name == "":
		return "a non-catalogue item needs a price with a product"
	}
	c.Amount = parseInt(items[0].Price.UnitPrice.Amount)
	c.Currency = strings.ToLower(string(items[0].Price.UnitPrice.CurrencyCode))
	if c.Amount <= 0 || len(c.Currency) != 3 {
		return "unit_price needs an integer amount and a currency"
	}
	return ""
}

// paddlePrice is GET /prices/{id}.
func (s *Server) paddlePrice(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	p, ok := s.products[r.PathValue("id")]
	s.mu.Unlock()
	if !ok {
		paddleError(w, http.StatusNotFound, "not_found", "price not found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"id": r.PathValue("id"),
		"unit_price": map[string]any{"amount": strconv.FormatInt(p.Price, 10), "currency_code": strings.ToUpper(p.Currency)}},
		"meta": map[string]any{"request_id": "fake"}})
}

// paddleEvents is GET /events: the scripted events, oldest first unless
// order_by=id[DESC], paged by per_page (default 50) and after (an event
// id), with meta.pagination.next naming the next page, like Paddle's.
func (s *Server) paddleEvents(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	evs := append([]json.RawMessage{}, s.events[Paddle]...)
	s.mu.Unlock()
	q := r.URL.Query()
	evs = paddleOfTypes(evs, q["event_type"])
	if q.Get("order_by") == "id[DESC]" {
		slices.Reverse(evs)
	}
	perPage := int(parseInt(q.Get("per_page")))
	if perPage <= 0 {
		perPage = 50
	}
	page, more := paddlePage(evs, q.Get("after"), perPage)
	next := ""
	if more {
		q.Set("after", paddleEventID(page[len(page)-1]))
		next = "http://" + r.Host + r.URL.Path + "?" + q.Encode()
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": page, "meta": map[string]any{"request_id": "fake",
		"pagination": map[string]any{"per_page": perPage, "next": next, "has_more": more, "estimated_total": len(evs)}}})
}

// paddlePage is the page of events after the one with id after ("": from
// the first), of at most perPage, and whether more follow.
func paddlePage(evs []json.RawMessage, after string, perPage int) ([]json.RawMessage, bool) {
	if after != "" {
		for i, ev := range evs {
			if paddleEventID(ev) == after {
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

// paddleOfTypes keeps the events of the types asked for (each value may
// list several, comma-separated); none asked for keeps every event.
func paddleOfTypes(evs []json.RawMessage, asked []string) []json.RawMessage {
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

func paddleEventID(ev json.RawMessage) string {
	var e struct {
		EventID string `json:"event_id"`
	}
	_ = json.Unmarshal(ev, &e)
	return e.EventID
}
