package e2e

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
)

// dropProxy fronts the web processes for SDK traffic. It forwards each
// request to a random web process and, for a fraction of POSTs, reads the
// whole response (so the server has committed) and then cuts the client's
// connection without answering: the SDK sees a network error and must retry
// with the same Idempotency-Key.
type dropProxy struct {
	upstreams func() []string // live web addresses
	dropRate  float64
	transport *http.Transport

	mu  sync.Mutex
	rng *rand.Rand

	forwarded, dropped, unavailable atomic.Int64
}

func newDropProxy(seed int64, dropRate float64, upstreams func() []string) *dropProxy {
	return &dropProxy{
		upstreams: upstreams,
		dropRate:  dropRate,
		transport: &http.Transport{MaxIdleConnsPerHost: 64},
		rng:       rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)),
	}
}

func (p *dropProxy) pick() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ups := p.upstreams()
	if len(ups) == 0 {
		return "", false
	}
	return ups[p.rng.IntN(len(ups))], p.rng.Float64() < p.dropRate
}

func (p *dropProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	addr, drop := p.pick()
	if addr == "" {
		p.unavailable.Add(1)
		http.Error(w, "no upstream", http.StatusBadGateway)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+addr+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.unavailable.Add(1)
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, "upstream body", http.StatusBadGateway)
		return
	}
	p.forwarded.Add(1)
	if drop && r.Method == http.MethodPost {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				p.dropped.Add(1)
				conn.Close()
				return
			}
		}
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}
