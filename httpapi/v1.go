package httpapi

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/idempotency"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

// maxBodyBytes bounds a /v1 request body; every body of this API is tiny.
const maxBodyBytes = 64 << 10

// api holds the /v1 handlers' dependencies.
type api struct {
	pool    *pgxpool.Pool
	river   *jobs.Client
	cfg     *config.Config
	wallets *wallet.Store
	idem    *idempotency.Middleware
	logger  *slog.Logger
	now     func() time.Time
}

func newAPI(opts Options) *api {
	cfg := opts.Config
	if cfg == nil {
		cfg = config.Default()
	}
	a := &api{pool: opts.Pool, river: opts.River, cfg: cfg, logger: opts.Logger, now: opts.Now,
		wallets: wallet.New(opts.Pool, wallet.Options{SparksPerMana: cfg.SparksPerMana})}
	a.idem = idempotency.NewMiddleware(idempotency.Options{
		Pool: opts.Pool, PlayerID: playerID, WriteError: a.writeError, Now: opts.Now, Logger: opts.Logger,
		MaxBodyBytes: maxBodyBytes,
	})
	return a
}

// route is one /v1 endpoint.
type route struct {
	pattern string
	handler http.Handler
}

// routes is the /v1 table of docs/contract.md (plus GET /v1/playgrounds/{id}).
func (a *api) routes() []route {
	return []route{
		{"GET /v1/wallets", a.read(a.getWallets)},
		{"GET /v1/wallets/{currency}/transactions", a.read(a.listTransactions)},
		{"POST /v1/conversions", a.write(a.createConversion)},
		{"POST /v1/checkouts", a.write(a.createCheckout)},
		{"GET /v1/orders/{id}", a.read(a.getOrder)},
		{"POST /v1/marquees", a.write(a.createMarquee)},
		{"GET /v1/marquees", a.read(a.listMarquees)},
		{"GET /v1/marquees/{id}", a.read(a.getMarquee)},
		{"POST /v1/marquees/{id}/fund", a.write(a.fundMarquee)},
		{"POST /v1/marquees/{id}/playgrounds", a.write(a.createPlayground)},
		{"GET /v1/playgrounds/{id}", a.read(a.getPlayground)},
		{"POST /v1/playgrounds/{id}/restart", a.write(a.restartPlayground)},
		{"POST /v1/playgrounds/{id}/sync", a.write(a.syncPlayground)},
		{"GET /v1/requests/{id}", a.read(a.getRequest)},
	}
}

// mountV1 mounts every /v1 route behind request ids, metrics and auth.
func (s *Server) mountV1() {
	a := newAPI(s.opts)
	for _, rt := range a.routes() {
		s.mux.Handle(rt.pattern, instrument(rt.pattern, a.authenticate(rt.handler)))
	}
}

// read adapts a GET handler.
func (a *api) read(h func(w http.ResponseWriter, r *http.Request, player int64) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		player, _ := playerID(r)
		if err := h(w, r, player); err != nil {
			a.writeError(w, r, err)
		}
	})
}

// write adapts a mutating handler: it runs in the idempotency middleware's
// transaction, which commits the effect with its stored answer.
func (a *api) write(h func(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64) error) http.Handler {
	return a.idem.Wrap(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		player, _ := playerID(r)
		if err := h(w, r, tx, player); err != nil {
			a.writeError(w, r, err)
		}
	})
}

// decode reads a JSON object into dst, refusing unknown fields, trailing
// data, and numbers that do not fit. An empty body leaves dst as is.
func decode(r *http.Request, dst any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return badRequest(CodeInvalidRequest, "cannot read the request body")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	// encoding/json would turn invalid UTF-8 into U+FFFD and so store text
	// the client never sent (a Marquee name); JSON is UTF-8 (RFC 8259 8.1).
	if !utf8.Valid(body) {
		return badRequest(CodeInvalidRequest, "invalid JSON body: not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Type.Kind() >= reflect.Int && typeErr.Type.Kind() <= reflect.Uint64 {
			return badRequest(CodeInvalidAmount, fmt.Sprintf("%s must be an integer that fits in 64 bits", typeErr.Field))
		}
		return badRequest(CodeInvalidRequest, "invalid JSON body: "+err.Error())
	}
	if dec.More() {
		return badRequest(CodeInvalidRequest, "invalid JSON body: trailing data")
	}
	return nil
}

// pathID parses a positive id from the path; anything else is a 404, like
// an id that does not exist.
func pathID(r *http.Request, name string) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, errNotFound
	}
	return id, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("httpapi: encode: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// derivedKey is the idempotency key a handler gives its own effect (a
// wallet post): derived from the request's Idempotency-Key and the player,
// so that it stays the same on every retry, even one that comes after the
// API key expired; random when the request carried no key.
func derivedKey(r *http.Request, player int64, purpose string) string {
	key, ok := idempotency.KeyFromContext(r.Context())
	if !ok {
		var b [16]byte
		_, _ = rand.Read(b[:])
		return fmt.Sprintf("api:%d:%s:%x", player, purpose, b)
	}
	k := fmt.Sprintf("api:%d:%s:%s", player, purpose, key)
	if len(k) > 200 { // leave room for the wallet's leg suffixes
		k = fmt.Sprintf("api:%d:%s:sha256:%x", player, purpose, sha256.Sum256([]byte(key)))
	}
	return k
}
