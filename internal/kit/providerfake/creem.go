package providerfake

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

func readBody(r *http.Request) []byte {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	return b
}

// creemProduct is GET /v1/products?product_id=.
func (s *Server) creemProduct(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("product_id")
	s.mu.Lock()
	p, ok := s.products[id]
	s.mu.Unlock()
	if r.Header.Get("x-api-key") == "" {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "missing x-api-key"})
		return
	}
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "product not found"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "price": p.Price, "currency": p.Currency})
}

// creemCheckout is POST /v1/checkouts: product_id, request_id and
// metadata.order_id are required.
func (s *Server) creemCheckout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ProductID string            `json:"product_id"`
		RequestID string            `json:"request_id"`
		Metadata  map[string]string `json:"metadata"`
	}
	c := Call{Provider: Creem, Path: r.URL.Path}
	if err := json.Unmarshal(readBody(r), &req); err != nil || r.Header.Get("x-api-key") == "" {
		c.Problem = "malformed JSON or missing x-api-key"
	} else {
		c.OrderID = req.Metadata["order_id"]
		s.mu.Lock()
		p, ok := s.products[req.ProductID]
		s.mu.Unlock()
		c.Amount, c.Currency = p.Price, p.Currency
		if !ok || req.RequestID == "" || c.OrderID == "" {
			c.Problem = "product_id, request_id and metadata.order_id are required"
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.injected(Creem); st != 0 {
		c.Status = st
		s.record(c)
		writeJSON(w, st, map[string]any{"message": "injected failure"})
		return
	}
	if c.Problem != "" {
		c.Status = http.StatusBadRequest
		s.record(c)
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": []string{c.Problem}})
		return
	}
	s.created[Creem]++
	id := "ch_fake" + strconv.Itoa(s.created[Creem])
	c.Status = http.StatusOK
	s.record(c)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "checkout", "status": "pending",
		"request_id": req.RequestID, "metadata": req.Metadata, "checkout_url": "https://checkout.creem.test/" + id})
}
