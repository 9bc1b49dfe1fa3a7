// Package providerfake is a recording stand-in for the payment providers'
// APIs, for tests: Stripe's Checkout Sessions and Events, Paddle's
// transactions, prices and events, Creem's products and checkouts, all on
// one httptest server (their paths do not overlap). It checks each request's
// shape against the provider's documented API (Paddle's through
// paddle-go-sdk's own request types), answers like the provider, serves
// event lists a test scripts, and can fail or go down on demand.
//
// Unlike stripe-mock it keeps state: a Stripe Idempotency-Key seen before
// returns the session it created, as Stripe does, so a test can count the
// sessions really opened.
//
// Part of the test kit (one package per kind of part; docs/testing.md).
package providerfake

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"

	"github.com/fibe-dev/billing/internal/provider"
)

// Provider names.
const (
	Stripe = provider.Stripe
	Paddle = provider.Paddle
	Creem  = provider.Creem
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

// Server is the fake. Its zero value is not usable: call Start.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	calls    []Call
	sessions map[string]map[string]any // Stripe Idempotency-Key -> session
	refunds  map[string]map[string]any // Stripe Idempotency-Key -> refund
	created  map[string]int            // provider -> checkouts really created
	fail     map[string][]int          // provider -> statuses of the next create calls
	failAll  []int                     // statuses of the next requests, whatever they are
	requests int                       // requests received
	down     bool
	refused  int // requests answered 503 while down
	events   map[string][]json.RawMessage
	products map[string]Product // Creem products and Paddle prices by id
}

// Product is a Creem product or a Paddle catalogue price.
type Product struct {
	Price    int64
	Currency string // lower case
}

// Start starts a fake; Close it when done.
func Start() *Server {
	s := &Server{sessions: map[string]map[string]any{}, refunds: map[string]map[string]any{}, created: map[string]int{}, fail: map[string][]int{},
		events: map[string][]json.RawMessage{}, products: map[string]Product{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/checkout/sessions", s.stripeSession)
	mux.HandleFunc("GET /v1/events", s.stripeEvents)
	mux.HandleFunc("POST /v1/refunds", s.stripeRefund)
	mux.HandleFunc("POST /transactions", s.paddleTransaction)
	mux.HandleFunc("GET /prices/{id}", s.paddlePrice)
	mux.HandleFunc("GET /events", s.paddleEvents)
	mux.HandleFunc("GET /v1/products", s.creemProduct)
	mux.HandleFunc("POST /v1/checkouts", s.creemCheckout)
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
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{"message": "down"}})
		case fail != 0:
			// An error body each provider's client reads: Stripe's and
			// Paddle's error object, Creem's message.
			writeJSON(w, fail, map[string]any{"message": "injected failure", "error": map[string]any{
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

// AddEvent appends an event (the provider's JSON) to provider's event list.
func (s *Server) AddEvent(provider string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events[provider] = append(s.events[provider], json.RawMessage(body))
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

// injected pops the next scripted failure of provider, if any. s.mu held.
func (s *Server) injected(provider string) int {
	f := s.fail[provider]
	if len(f) == 0 {
		return 0
	}
	s.fail[provider] = f[1:]
	return f[0]
}

func (s *Server) record(c Call) {
	s.calls = append(s.calls, c)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func parseInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}
