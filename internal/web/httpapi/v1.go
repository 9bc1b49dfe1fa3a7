package httpapi

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/web/idempotency"
	"github.com/fibe-dev/billing/internal/web/strictjson"
	"github.com/fibe-dev/billing/wallet"
)

// maxBodyBytes bounds a /v1 request body; every body of this API is tiny.
const maxBodyBytes = 64 << 10

// api holds the /v1 handlers' dependencies.
type api struct {
	pool    *pgxpool.Pool
	river   *river.Client[pgx.Tx]
	wallets *wallet.Store
	plans   map[string]enforcer.Plan
	tz      *time.Location
	idem    *idempotency.Middleware
	limiter *limiter
	logger  *slog.Logger
	now     func() time.Time
	// checkouts opens provider checkouts (POST /v1/checkouts).
	checkouts *checkout.Service
}

func newAPI(opts Options) *api {
	a := &api{pool: opts.Pool, river: opts.River, wallets: opts.Wallet, plans: opts.Plans, tz: opts.TZ,
		logger: opts.Logger, now: opts.Now, checkouts: opts.Checkouts, limiter: newLimiter(opts.RateLimit, opts.limiterClock)}
	a.idem = idempotency.NewMiddleware(idempotency.Options{
		Pool: opts.Pool, PlayerID: playerID, WriteError: a.writeError, Now: opts.Now, Logger: opts.Logger,
		MaxBodyBytes: maxBodyBytes, HandlerTimeout: opts.HandlerTimeout,
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
		{"POST /v1/checkouts", a.writeOutsideTx(a.createCheckout)},
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

// mountV1 mounts every /v1 route behind request ids, metrics, auth and
// the per-player limits.
func (s *Server) mountV1() {
	a := newAPI(s.opts)
	for _, rt := range a.routes() {
		s.mux.Handle(rt.pattern, instrument(rt.pattern, a.authenticate(a.limit(rt.handler))))
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
// A body declared as anything but JSON is refused (415) before its key is
// claimed.
func (a *api) write(h func(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64) error) http.Handler {
	next := a.idem.Wrap(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		player, _ := playerID(r)
		if err := h(w, r, tx, player); err != nil {
			a.writeError(w, r, err)
		}
	})
	return a.jsonOnly(next)
}

// jsonOnly refuses a body declared as anything but JSON (415) before next
// claims its key: every mutating route goes through it.
func (a *api) jsonOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := requireJSON(r); err != nil {
			a.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireJSON refuses a Content-Type that is present and not JSON
// (application/json or any application/*+json). An absent one is allowed:
// every body of this API is JSON, so there is nothing to confuse it with.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Content-Type must be application/json")
}

// decode reads a JSON object into dst with the one strict reader
// (package strictjson: valid UTF-8, no duplicate member names, names
// matched exactly), refusing members the request type does not have,
// trailing data and numbers that do not fit. An empty body leaves dst as
// is. It is the one JSON decoder of the API: a body that a proxy in front
// of us could read differently from us is refused rather than guessed at.
func decode(r *http.Request, dst any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return badRequest(CodeInvalidRequest, "cannot read the request body")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := strictjson.Unmarshal(body, dst, strictjson.Options{RejectUnknown: true}); err != nil {
		return decodeError(body, dst, err)
	}
	return nil
}

// decodeError turns the strict reader's error into the API's answer. Its
// detail is built from the error's parts (what, where in the body), never
// from a decoder's own text, which names Go types and packages. Where the
// reader kept only the text, the body is read again for the position.
func decodeError(body []byte, dst any, err error) error {
	var semErr *jsonv2.SemanticError
	isSem := errors.As(err, &semErr)
	switch {
	case errors.Is(err, strictjson.ErrDuplicateName):
		return badRequest(CodeInvalidRequest, "invalid JSON body: duplicate member name"+at(pointerOf(body, dst)))
	case errors.Is(err, strictjson.ErrUnknownName):
		return badRequest(CodeInvalidRequest, "invalid JSON body: unknown member"+at(pointerOf(body, dst))+" (names are case-sensitive)")
	case errors.Is(err, strictjson.ErrInvalidUTF8):
		// JSON is UTF-8 (RFC 8259 8.1).
		return badRequest(CodeInvalidRequest, "invalid JSON body: not valid UTF-8")
	case errors.Is(err, strictjson.ErrSyntax):
		return badRequest(CodeInvalidRequest, "invalid JSON body: "+syntaxDetail(body))
	case isSem && semErr.GoType != nil && isInteger(semErr.GoType.Kind()):
		field := strings.TrimPrefix(string(semErr.JSONPointer), "/")
		return badRequest(CodeInvalidAmount, fmt.Sprintf("%s must be an integer that fits in 64 bits", field))
	case isSem && semErr.GoType != nil && semErr.JSONKind != 0:
		return badRequest(CodeInvalidRequest, fmt.Sprintf("invalid JSON body: want %s%s, got %s",
			wantName(semErr.GoType.Kind()), at(semErr.JSONPointer), kindName(semErr.JSONKind)))
	}
	return badRequest(CodeInvalidRequest, "invalid JSON body")
}

// pointerOf is where in body the decoder stops reading it into a fresh
// value of dst's type (a JSON Pointer), or "".
func pointerOf(body []byte, dst any) jsontext.Pointer {
	err := jsonv2.Unmarshal(body, reflect.New(reflect.TypeOf(dst).Elem()).Interface(), jsonv2.RejectUnknownMembers(true))
	if semErr, ok := errors.AsType[*jsonv2.SemanticError](err); ok {
		return semErr.JSONPointer
	}
	if synErr, ok := errors.AsType[*jsontext.SyntacticError](err); ok {
		return synErr.JSONPointer
	}
	return ""
}

// syntaxDetail says what is malformed in body and where.
func syntaxDetail(body []byte) string {
	_, err := jsontext.NewDecoder(bytes.NewReader(body)).ReadValue()
	if err == nil { // one value, then something else
		return "data after the JSON value"
	}
	if synErr, ok := errors.AsType[*jsontext.SyntacticError](err); ok && synErr.Err != nil {
		return fmt.Sprintf("%v%s after byte %d", synErr.Err, at(synErr.JSONPointer), synErr.ByteOffset)
	}
	return "malformed"
}

// at is " at <pointer>" for a pointer into the body, "" for none.
func at(p jsontext.Pointer) string {
	if p == "" {
		return ""
	}
	return " at " + string(p)
}

// kindName names a JSON kind as the API document does.
func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "another value"
}

// wantName names the JSON a Go kind of a request type reads.
func wantName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another value"
}

func isInteger(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Uint64 }

// pathID parses a positive id from the path. Only the canonical decimal
// form resolves ("1", not "01" or "+1"): one resource has one URL, so a
// cache or log keyed on the path sees one name for it. Anything else is a
// 404, like an id that does not exist.
func pathID(r *http.Request, name string) (int64, error) {
	s := r.PathValue(name)
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != s {
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

// derivedKey is the wallet key a handler gives its own effect (a wallet
// post): derived from the request's Idempotency-Key and the player
// (wallet.APIKey), so that it stays the same on every retry, even one that
// comes after the API key expired; random when the request carried no key.
func derivedKey(r *http.Request, player int64, purpose string) wallet.Key {
	key, ok := idempotency.KeyFromContext(r.Context())
	if !ok {
		var b [16]byte
		_, _ = rand.Read(b[:])
		key = hex.EncodeToString(b[:])
	}
	return wallet.APIKey(player, purpose, key)
}
