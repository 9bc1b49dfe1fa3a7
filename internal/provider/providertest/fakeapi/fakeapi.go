// Package fakeapi is the recording httptest server the providers' fake
// APIs share, for tests and the lab: each provider's fake (stripefake,
// paddlefake, creemfake, in its provider's folder) adds its routes to it,
// and providertest.StartFake runs all three on one server (their paths do
// not overlap). The server records the calls that create something, keeps
// the catalogue and the scripted event lists, and can fail or go down on
// demand; what a request must look like and how the provider answers is
// each fake's.
//
// Test support (docs/testing.md says which kind of part lives where).
package fakeapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
)

// Call is one recorded request that created something, or was refused.
type Call struct {
	Provider       string
	Path           string
	IdempotencyKey string // Stripe's header
	OrderID        string // as the request named it
	Amount         int64
	Currency       string
	Status         int // what the fake answered
	Problem        string
}

// Product is a Creem product or a Paddle catalogue price.
type Product struct {
	Price    int64
	Currency string // lower case
}

// Routes adds one provider's fake API to mux, over s's shared state.
type Routes func(s *Server, mux *http.ServeMux)

// Server is the fake. Its zero value is not usable: call Start.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	calls    []Call
	created  map[string]int   // provider (or what) -> things really created
	fail     map[string][]int // provider -> statuses of the next create calls
	failAll  []int            // statuses of the next requests, whatever they are
	requests int              // requests received
	down     bool
	refused  int // requests answered 503 while down
	events   map[string][]json.RawMessage
	products map[string]Product // Creem products and Paddle prices by id
}

// Start starts a server serving every routes; Close it when done.
func Start(routes ...Routes) *Server {
	s := &Server{created: map[string]int{}, fail: map[string][]int{}, events: map[string][]json.RawMessage{},
		products: map[string]Product{}}
	mux := http.NewServeMux()
	for _, r := range routes {
		r(s, mux)
	}
	s.Server = httptest.NewServer(s.gate(mux))
	return s
}

// gate answers 503 to everything while the fake is down, and the scripted
// failures of FailRequests.
func (s *Server) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		down, fail := s.down, 0
		if down {
			s.refused++
		} else if len(s.failAll) > 0 {
			fail, s.failAll = s.failAll[0], s.failAll[1:]
		}
		s.mu.Unlock()
		switch {
		case down:
			w.Header().Set("Retry-After", "1")
			WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{"message": "down"}})
		case fail != 0:
			// An error body each provider's client reads: Stripe's and
			// Paddle's error object, Creem's message.
			WriteJSON(w, fail, map[string]any{"message": "injected failure", "error": map[string]any{
				"type": "request_error", "code": "injected", "detail": "injected failure", "message": "injected failure"}})
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// FailRequests makes the next requests, whatever their path, answer the
// given statuses, in order; the ones after are served.
func (s *Server) FailRequests(statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failAll = append(s.failAll, statuses...)
}

// Requests is how many requests the fake has received.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// SetDown makes every request answer 503 (true) or be served again (false).
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// Refused is how many requests were answered 503 while the fake was down.
func (s *Server) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// FailNext makes the next create calls (session, transaction, checkout) of
// provider answer the given statuses, in order.
func (s *Server) FailNext(provider string, statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[provider] = append(s.fail[provider], statuses...)
}

// SetProduct defines a Creem product or a Paddle catalogue price.
func (s *Server) SetProduct(id string, p Product) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.products[id] = p
}

// Product returns the product or price id.
func (s *Server) Product(id string) (Product, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.products[id]
	return p, ok
}

// AddEvent appends an event (the provider's JSON) to provider's event list.
func (s *Server) AddEvent(provider string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events[provider] = append(s.events[provider], json.RawMessage(body))
}

// Events returns provider's event list, oldest first.
func (s *Server) Events(provider string) []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events[provider])
}

// Calls returns the recorded create calls.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Created is how many checkouts were really created at provider (a Stripe
// request replayed by its Idempotency-Key creates nothing).
func (s *Server) Created(provider string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created[provider]
}

// Create counts one more thing really created under what (a provider's
// checkouts, or another count a fake keeps) and returns the count.
func (s *Server) Create(what string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created[what]++
	return s.created[what]
}

// Injected pops the next scripted failure of provider's create calls, if
// any (0: none).
func (s *Server) Injected(provider string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fail[provider]
	if len(f) == 0 {
		return 0
	}
	s.fail[provider] = f[1:]
	return f[0]
}

// Record records c.
func (s *Server) Record(c Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ReadBody is r's body, up to 1 MiB.
func ReadBody(r *http.Request) []byte {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	return b
}

// ParseInt is s as an int64, or -1.
func ParseInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}
