package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/web/problem"
)

// HeaderKey is the request header carrying the key; HeaderReplayed marks a
// replayed response.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "X-Idempotent-Replayed"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes   = 1 << 20
	DefaultHandlerTimeout = 30 * time.Second
)

var requestsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "billing_idempotency_requests_total",
	Help: "Requests carrying an Idempotency-Key, by outcome (miss, replay, in_use, reused).",
}, []string{"outcome"})

// HandlerFunc is a mutating handler. It does all its database work in tx,
// which the middleware commits together with the stored response, or rolls
// back when the handler answers 5xx or 429.
type HandlerFunc func(w http.ResponseWriter, r *http.Request, tx pgx.Tx)

// Options configure a Middleware.
type Options struct {
	Pool *pgxpool.Pool
	// PlayerID scopes keys: it returns the authenticated player of r.
	PlayerID func(r *http.Request) (int64, bool)
	// WriteError renders the middleware's own refusals (ErrInvalidKey,
	// ErrInUse, ErrReused, ErrBodyTooLarge, ErrBodyIncomplete,
	// ErrBodyTimeout) and internal errors.
	WriteError func(w http.ResponseWriter, r *http.Request, err error)
	Now        func() time.Time
	Logger     *slog.Logger
	// LockTimeout: see DefaultLockTimeout. MaxBodyBytes bounds the request
	// body (413 beyond). HandlerTimeout bounds the handler, which runs on a
	// context detached from the client's: once started, a mutation finishes
	// and is cached even if the client hangs up, so its retry replays.
	LockTimeout    time.Duration
	MaxBodyBytes   int64
	HandlerTimeout time.Duration
}

type keyCtx struct{}

// KeyFromContext returns the Idempotency-Key of the request a HandlerFunc is
// running, if it carried one. Handlers derive their own idempotency keys
// from it (a wallet post's, for example), so that even a request replayed
// after the key expired cannot repeat the effect.
func KeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtx{}).(string)
	return k, ok
}

// Middleware runs HandlerFuncs in a transaction and, for requests with an
// Idempotency-Key, at most once per (player, key).
type Middleware struct {
	opts  Options
	store *Store
}

// NewMiddleware returns a Middleware.
func NewMiddleware(opts Options) *Middleware {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.HandlerTimeout <= 0 {
		opts.HandlerTimeout = DefaultHandlerTimeout
	}
	if opts.WriteError == nil {
		opts.WriteError = defaultWriteError
	}
	return &Middleware{opts: opts, store: NewStore(opts.Pool, opts.LockTimeout)}
}

// Store is the middleware's store.
func (m *Middleware) Store() *Store { return m.store }

// Wrap returns the http.Handler running h.
func (m *Middleware) Wrap(h HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, h) })
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, h HandlerFunc) {
	m.serveWith(w, r, func(w http.ResponseWriter, r *http.Request, claim *Claim) { m.run(w, r, h, claim) })
}

// serveWith checks the request's key and calls run, with the claim (nil
// without a key), unless the key answers by itself (replay, in use, reused).
func (m *Middleware) serveWith(w http.ResponseWriter, r *http.Request, run func(http.ResponseWriter, *http.Request, *Claim)) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.opts.MaxBodyBytes))
	if err != nil {
		m.opts.WriteError(w, r, bodyError(err))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	raw, hasKey := r.Header[http.CanonicalHeaderKey(HeaderKey)]
	if !hasKey {
		run(w, r, nil)
		return
	}
	key, err := ParseKey(raw[0])
	if err != nil || len(raw) > 1 {
		m.opts.WriteError(w, r, ErrInvalidKey)
		return
	}
	playerID, ok := m.opts.PlayerID(r)
	if !ok {
		m.opts.WriteError(w, r, ErrNoPlayer)
		return
	}
	look, err := m.store.Begin(r.Context(), playerID, key, NewFingerprint(r.Method, r.URL.Path, body), m.opts.Now())
	switch {
	case errors.Is(err, ErrInUse):
		requestsTotal.WithLabelValues("in_use").Inc()
		m.opts.WriteError(w, r, err)
	case errors.Is(err, ErrReused):
		requestsTotal.WithLabelValues("reused").Inc()
		m.opts.WriteError(w, r, err)
	case err != nil:
		m.opts.WriteError(w, r, err)
	case look.Replay != nil:
		requestsTotal.WithLabelValues("replay").Inc()
		writeResponse(w, look.Replay, true)
	default:
		requestsTotal.WithLabelValues("miss").Inc()
		run(w, r, look.Claim)
	}
}

// bodyError classifies a failed body read. Every such failure is the
// client's (too large, cut short, too slow): none may count as a 5xx, or any
// client could trip the server-error alert.
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge):
		return ErrBodyTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Errorf("%w: %w", ErrBodyTimeout, err)
	default:
		return fmt.Errorf("%w: %w", ErrBodyIncomplete, err)
	}
}

// releaseTimeout bounds the release of a claim. The release runs on a
// context of its own: the request's may already be past its deadline (that
// is often why the claim is being released), and a release that fails
// leaves the key answering 409 until the claim goes stale.
const releaseTimeout = 5 * time.Second

func (m *Middleware) release(ctx context.Context, claim *Claim) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := m.store.Release(ctx, claim); err != nil {
		// The claim stays running; it is taken over once stale.
		m.opts.Logger.WarnContext(ctx, "idempotency: release failed", "key_id", claim.ID, "error", err)
	}
}

// run executes h in one transaction with the claim (nil without a key).
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, h HandlerFunc, claim *Claim) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.opts.HandlerTimeout)
	defer cancel()
	if claim != nil {
		ctx = context.WithValue(ctx, keyCtx{}, claim.Key)
	}
	resp, err := m.runTx(ctx, r.WithContext(ctx), h, claim)
	if err != nil || resp.Status >= 500 || resp.Status == http.StatusTooManyRequests {
		if claim != nil && !errors.Is(err, ErrInUse) {
			m.release(ctx, claim)
		}
	}
	if err != nil {
		m.opts.WriteError(w, r, err)
		return
	}
	writeResponse(w, resp, false)
}

// runTx runs h in a transaction and commits it, with the stored response,
// unless h answered 5xx or 429. A panic in h rolls back and propagates.
func (m *Middleware) runTx(ctx context.Context, r *http.Request, h HandlerFunc, claim *Claim) (*Response, error) {
	tx, err := m.opts.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("idempotency: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if claim != nil {
		if err := m.store.Lock(ctx, tx, claim); err != nil {
			return nil, err
		}
	}
	rec := &recorder{header: http.Header{}}
	func() {
		defer func() {
			if p := recover(); p != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
				if claim != nil {
					m.release(ctx, claim)
				}
				panic(p)
			}
		}()
		h(rec, r, tx)
	}()
	resp := rec.response()
	if resp.Status >= 500 || resp.Status == http.StatusTooManyRequests {
		return resp, nil // deferred rollback
	}
	if claim != nil {
		if err := m.store.Complete(ctx, tx, claim, resp, m.opts.Now()); err != nil {
			return nil, err
		}
	}
	if err := durable.Commit(ctx, tx); err != nil {
		return nil, fmt.Errorf("idempotency: commit: %w", err)
	}
	return resp, nil
}

func writeResponse(w http.ResponseWriter, resp *Response, replayed bool) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	if replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// recorder buffers a handler's response: nothing reaches the client before
// the transaction has committed.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

func (r *recorder) response() *Response {
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	return &Response{Status: status, Header: r.header.Clone(), Body: bytes.Clone(r.body.Bytes())}
}

// defaultWriteError answers err with the answer it declares (store.go's
// errors declare theirs); httpapi supplies its own writer, which adds
// what depends on the request.
func defaultWriteError(w http.ResponseWriter, _ *http.Request, err error) {
	problem.WriteAnswer(w, problem.AnswerOf(err))
}
