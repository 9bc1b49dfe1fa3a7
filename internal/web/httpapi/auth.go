package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/fibe-dev/billing/internal/domain/players"
)

const headerRequestID = "X-Request-Id"

var httpRequests = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "billing_http_requests_total",
	Help: "API requests answered, by route pattern and status code.",
}, []string{"route", "code"})

type ctxKey int

const (
	playerKey ctxKey = iota
	requestIDKey
)

// playerID is the authenticated player of r.
func playerID(r *http.Request) (int64, bool) {
	id, ok := r.Context().Value(playerKey).(int64)
	return id, ok
}

// requestID is the id this server gave the request (X-Request-Id).
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// instrument gives every answer an X-Request-Id and counts it by route.
func instrument(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := newRequestID()
		w.Header().Set(headerRequestID, id)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		httpRequests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// authenticate resolves "Authorization: Bearer <key>" to a player, or
// answers 401. Only a hash of the key is looked up (package players), on
// every request and with no cache in any process: a key revoked or past
// its rotation's end answers 401 from its next request on. The lookup is
// one read of a unique index; a cache would make revocation late.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			a.writeError(w, r, players.ErrUnauthorized)
			return
		}
		id, err := players.Authenticate(r.Context(), a.pool, strings.TrimSpace(key))
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), playerKey, id)))
	})
}
