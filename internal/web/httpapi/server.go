// Package httpapi is the HTTP face of billing: the /v1 API, webhook intake,
// the River UI and /healthz on the public listener, /metrics and /healthz
// on the operator listener, with one place that maps domain errors to
// statuses.
package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverqueue/river"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"riverqueue.com/riverui"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/web/problem"
	"github.com/fibe-dev/billing/wallet"
)

// Options are the web process's dependencies. cmd/billing builds them
// from the configuration; tests build them by hand.
type Options struct {
	Pool *pgxpool.Pool
	// River inserts the API's jobs: an insert-only client (package jobs
	// builds it) is enough. The API names River's own type, so that
	// building the web process links no worker registry.
	River *river.Client[pgx.Tx]
	// Wallet is the program's one wallet store (required): the /v1 routes
	// read and post through it.
	Wallet *wallet.Store
	Logger *slog.Logger
	// Gatherer is what OpsHandler's /metrics serves; nil means
	// prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Providers are the program's provider drivers: the webhook intake
	// verifies and reads deliveries with them. nil: none (every webhook is
	// 404).
	Providers *provider.Registry
	// Checkouts opens provider checkouts (POST /v1/checkouts); nil: every
	// provider is unavailable (422 provider_unavailable).
	Checkouts *checkout.Service
	// Plans are the Marquee plans POST /v1/marquees may name; nil: none.
	Plans map[string]enforcer.Plan
	// TZ is the service-day time zone of POST /v1/marquees/{id}/fund; nil
	// is UTC.
	TZ *time.Location
	// RateLimit bounds each player's requests; the zero value limits
	// nothing.
	RateLimit RateLimit
	// RiverUIUser and RiverUIPassword guard the River UI at /riverui/;
	// without a user it is not mounted at all.
	RiverUIUser, RiverUIPassword string
	// Pages are more handlers on the public listener, by ServeMux pattern
	// (`billing dev`'s simulated checkout page); nil: none.
	Pages map[string]http.Handler
	// HandlerTimeout bounds a mutating request's handler (0:
	// idempotency.DefaultHandlerTimeout); past it the answer is 503
	// timeout and the Idempotency-Key is free for the retry.
	HandlerTimeout time.Duration

	// limiterClock is the rate limiter's clock, for this package's tests:
	// a bucket refilled by a busy machine's slowness would decide a test.
	// nil is real time.
	limiterClock func() time.Time
}

// Server is the HTTP handler plus what it must start and stop.
type Server struct {
	opts    Options
	mux     *http.ServeMux
	riverUI *riverui.Handler
}

// New builds the handler. Call Start before serving so the River UI's
// background work runs.
func New(opts Options) (*Server, error) {
	if opts.Wallet == nil {
		return nil, errors.New("httpapi: Options.Wallet is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.TZ == nil {
		opts.TZ = time.UTC
	}
	if opts.Checkouts == nil {
		opts.Checkouts = checkout.NewService(checkout.Options{Logger: opts.Logger})
	}
	s := &Server{opts: opts, mux: http.NewServeMux()}
	// /healthz stays on the public listener for load balancers (it says
	// only "ok"); /metrics shows business volumes and is served by
	// OpsHandler on the operator listener instead, so here it is a 404.
	s.mux.HandleFunc("GET /healthz", s.healthz)
	if err := s.mountRiverUI(); err != nil {
		return nil, err
	}
	if err := s.mountRoutes(); err != nil {
		return nil, err
	}
	return s, nil
}

// ServeHTTP implements http.Handler. A request no route matches gets its
// 404 or 405 as problem+json.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !preflight(w, r) {
		return
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		w = &unmatched{ResponseWriter: w}
	}
	s.mux.ServeHTTP(w, r)
}

// Start starts the River UI's background services.
func (s *Server) Start(ctx context.Context) error {
	if s.riverUI == nil {
		return nil
	}
	if err := s.riverUI.Start(ctx); err != nil {
		return fmt.Errorf("httpapi: start river ui: %w", err)
	}
	return nil
}

// OpsHandler serves /metrics and /healthz for the operator listener
// (BILLING_METRICS_ADDR), which is kept off the public network.
func (s *Server) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	return mux
}

// NewOpsHandler is OpsHandler for a process that serves no API (the
// worker, and `billing dev`, whose one listener covers web and worker).
func NewOpsHandler(pool *pgxpool.Pool, gatherer prometheus.Gatherer, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	if gatherer == nil {
		gatherer = prometheus.DefaultGatherer
	}
	s := &Server{opts: Options{Pool: pool, Gatherer: gatherer, Logger: logger}}
	return s.OpsHandler()
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.opts.Pool.Ping(ctx); err != nil {
		s.opts.Logger.WarnContext(ctx, "healthz: database unreachable", "error", err)
		problem.Write(w, http.StatusServiceUnavailable, "database_unreachable", "the database is unreachable")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// mountRiverUI serves the River UI at /riverui/ behind basic auth and the
// cross-site request guard; without credentials configured it is not
// mounted at all (no open admin console).
func (s *Server) mountRiverUI() error {
	if s.opts.RiverUIUser == "" || s.opts.River == nil {
		return nil
	}
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(s.opts.River, nil),
		Logger:    s.opts.Logger,
		Prefix:    "/riverui",
	})
	if err != nil {
		return fmt.Errorf("httpapi: river ui: %w", err)
	}
	s.riverUI = h
	guarded := BasicAuth(s.opts.RiverUIUser, s.opts.RiverUIPassword, "River UI", riverUIGuard(h))
	s.mux.Handle("/riverui/", guarded)
	s.mux.Handle("/riverui", guarded)
	s.mountOperatorPage()
	return nil
}

// BasicAuth guards next with one user and password, compared in constant time.
func BasicAuth(user, password, realm string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		userOK := subtle.ConstantTimeCompare([]byte(u), []byte(user)) == 1
		passOK := subtle.ConstantTimeCompare([]byte(p), []byte(password)) == 1
		if !ok || !userOK || !passOK {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf("Basic realm=%q, charset=\"UTF-8\"", realm))
			problem.Write(w, http.StatusUnauthorized, CodeUnauthorized, "valid credentials are required (HTTP Basic)")
			return
		}
		next.ServeHTTP(w, r)
	})
}
