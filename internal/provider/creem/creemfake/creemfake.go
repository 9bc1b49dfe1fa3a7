// Package creemfake is a recording stand-in for Creem's API, for tests and
// the lab: products and checkouts on a fakeapi server. It checks what
// billing must send and answers like Creem.
package creemfake

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
)

const name = provider.Creem

// Start starts a server faking Creem alone; Close it when done.
func Start() *fakeapi.Server { return fakeapi.Start(Routes) }

// Routes adds Creem's API to mux, over s.
func Routes(s *fakeapi.Server, mux *http.ServeMux) {
	f := &fake{s: s}
	mux.HandleFunc("GET /v1/products", f.product)
	mux.HandleFunc("POST /v1/checkouts", f.checkout)
}

type fake struct{ s *fakeapi.Server }

// product is GET /v1/products?product_id=.
func (f *fake) product(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("product_id")
	p, ok := f.s.Product(id)
	if r.Header.Get("x-api-key") == "" {
		fakeapi.WriteJSON(w, http.StatusUnauthorized, map[string]any{"message": "missing x-api-key"})
		return
	}
	if !ok {
		fakeapi.WriteJSON(w, http.StatusNotFound, map[string]any{"message": "product not found"})
		return
	}
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "price": p.Price, "currency": p.Currency})
}

// checkout is POST /v1/checkouts: product_id, request_id and
// metadata.order_id are required.
func (f *fake) checkout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ProductID string            `json:"product_id"`
		RequestID string            `json:"request_id"`
		Metadata  map[string]string `json:"metadata"`
	}
	c := fakeapi.Call{Provider: name, Path: r.URL.Path}
	if err := json.Unmarshal(fakeapi.ReadBody(r), &req); err != nil || r.Header.Get("x-api-key") == "" {
		c.Problem = "malformed JSON or missing x-api-key"
	} else {
		c.OrderID = req.Metadata["order_id"]
		p, ok := f.s.Product(req.ProductID)
		c.Amount, c.Currency = p.Price, p.Currency
		if !ok || req.RequestID == "" || c.OrderID == "" {
			c.Problem = "product_id, request_id and metadata.order_id are required"
		}
	}
	if st := f.s.Injected(name); st != 0 {
		c.Status = st
		f.s.Record(c)
		fakeapi.WriteJSON(w, st, map[string]any{"message": "injected failure"})
		return
	}
	if c.Problem != "" {
		c.Status = http.StatusBadRequest
		f.s.Record(c)
		fakeapi.WriteJSON(w, http.StatusBadRequest, map[string]any{"message": []string{c.Problem}})
		return
	}
	id := "ch_fake" + strconv.Itoa(f.s.Create(name))
	c.Status = http.StatusOK
	f.s.Record(c)
	fakeapi.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "checkout", "status": "pending",
		"request_id": req.RequestID, "metadata": req.Metadata, "checkout_url": "https://checkout.creem.test/" + id})
}
