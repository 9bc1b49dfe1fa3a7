// Package webhook is the intake of payment-provider webhooks: the
// provider's driver verifies its signature over the raw body and reads the
// event (package provider); the intake claims it exactly once.
//
// The claim is the INSERT of a webhook_events row keyed UNIQUE (provider,
// event_id) with ON CONFLICT DO NOTHING: the database, not a pre-check,
// decides which of several concurrent deliveries wins. A winning completed
// payment, refund or dispute inserts its job in the same transaction, so
// there is no moment at which the event is claimed but its work lost. Every
// duplicate is answered 200 like the first delivery, so the provider stops
// retrying; only a database failure answers 503, so it retries.
//
// Every claimed event ends in one recorded outcome (invariant 11, package
// outcome): an event we only acknowledge is claimed "ignored", and one whose
// envelope reads but whose object cannot be applied (a negative amount, no
// id) is claimed "refused" with its reason and answered 2xx: only what
// cannot be authenticated or read as an event envelope is refused at the
// door (4xx, nothing stored). The others' jobs record their outcome. A
// redelivery of a claimed event with no outcome and no live job (its job
// was cancelled or discarded before it decided) re-enqueues the work from
// the stored payload under the same claim, so the provider's own retry
// repairs it; `billing webhooks redrive` does the same on demand.
//
// Claims are group-committed (package groupcommit), because a claim is
// small and its cost is round trips and the WAL flush of its commit:
// deliveries that arrive while claims are running share one transaction
// (BEGIN pipelined with one claim INSERT over arrays and the orphan check,
// one River InsertManyTx of the jobs, COMMIT), so a batch costs three round
// trips and one WAL flush instead of that per delivery. A single delivery
// is a batch of one: one claim statement, one transaction flow. Several deliveries of one event in a batch are deduplicated
// before the INSERT: the first is the candidate, the others duplicates.
// There is no timer and no linger: a lone delivery runs at once, in a batch
// of its own. If a batch's transaction fails for any reason, each of its
// deliveries is retried alone on the single-delivery path (claimOne), so one
// poison delivery fails only itself, not its batch neighbours.
package webhook

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/internal/platform/groupcommit"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/web/problem"
)

// MaxBodyBytes is the largest body accepted; larger ones answer 413.
const MaxBodyBytes = 1 << 20

// claimTimeout bounds a delivery's wait for its claim and each claim
// transaction (a batch's, or a single delivery's), so a stuck database
// answers 503 (and the provider retries) before the provider gives up on us.
const claimTimeout = 10 * time.Second

// Delivery outcomes, the label values of billing_webhook_deliveries_total.
const (
	OutcomeClaimed       = "claimed"
	OutcomeDuplicate     = "duplicate"
	OutcomeBadSignature  = "bad_signature"
	OutcomeStale         = "stale"
	OutcomeMalformed     = "malformed"
	OutcomeTooLarge      = "too_large"
	OutcomeError         = "error"
	OutcomeNotConfigured = "not_configured"
)

var (
	deliveries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_webhook_deliveries_total",
		Help: "Webhook deliveries by provider and outcome (claimed, duplicate, bad_signature, stale, malformed, too_large, error, not_configured).",
	}, []string{"provider", "outcome"})
	deliverySeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "billing_webhook_delivery_duration_seconds",
		Help:    "Time to answer a webhook delivery, by provider.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"provider"})
)

// Options configure NewHandler.
type Options struct {
	Pool *pgxpool.Pool
	// River inserts the fulfil job; an insert-only client is enough.
	River *river.Client[pgx.Tx]
	// Providers verify and read each provider's deliveries, by name
	// (provider.Select of the program's registry): a provider missing here
	// answers 404, one that cannot verify (no signing secret) 503.
	Providers map[string]Intake
	Logger    *slog.Logger
	Now       func() time.Time
	// ClaimBatch caps the deliveries claimed in one transaction (default
	// DefaultClaimBatch, 64).
	ClaimBatch int
	// ClaimConcurrency is how many claim transactions may run at once, each
	// on its own connection (default DefaultClaimConcurrency, 2): one
	// commits while the next batch gathers.
	ClaimConcurrency int

	hooks hooks // tests only
}

// Event is a provider event as its driver read it.
type Event = provider.Event

// Parser reads a provider's event body (a provider driver does).
type Parser interface {
	Parse(body []byte) (*provider.Event, error)
}

// Intake is what the intake needs of a provider's driver.
type Intake interface {
	Parser
	Available(c provider.Capability) error
	Verify(h http.Header, body []byte, now time.Time) error
}

type handler struct {
	opts   Options
	claims *groupcommit.Batcher[claimReq, bool]
}

// NewHandler returns the handler of POST /webhooks/{provider} for every
// provider of opts.Providers.
func NewHandler(opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ClaimBatch <= 0 {
		opts.ClaimBatch = DefaultClaimBatch
	}
	if opts.ClaimConcurrency <= 0 {
		opts.ClaimConcurrency = DefaultClaimConcurrency
	}
	h := &handler{opts: opts}
	h.claims = groupcommit.New(h.claimBatch,
		groupcommit.Options{MaxBatch: opts.ClaimBatch, Concurrency: opts.ClaimConcurrency, OnQueued: opts.hooks.onQueued()})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/{provider}", h.serve)
	return mux
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("provider")
	in, ok := h.opts.Providers[name]
	if !ok {
		problem.Write(w, http.StatusNotFound, "unknown_provider", fmt.Sprintf("no webhook intake for provider %q", name))
		return
	}
	start := time.Now()
	outcome := h.deliver(w, r, name, in)
	deliveries.WithLabelValues(name, outcome).Inc()
	deliverySeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
}

// deliver answers one delivery and returns its outcome.
func (h *handler) deliver(w http.ResponseWriter, r *http.Request, name string, in Intake) string {
	ctx := r.Context()
	if in.Available(provider.Webhooks) != nil {
		h.opts.Logger.ErrorContext(ctx, "webhook: provider has no signing secret configured", "provider", name)
		problem.Write(w, http.StatusServiceUnavailable, "provider_not_configured",
			"no signing secret is configured for "+name)
		return OutcomeNotConfigured
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			problem.Write(w, http.StatusRequestEntityTooLarge, "payload_too_large",
				fmt.Sprintf("body exceeds %d bytes", MaxBodyBytes))
			return OutcomeTooLarge
		}
		problem.Write(w, http.StatusBadRequest, "malformed_payload", "cannot read body")
		return OutcomeMalformed
	}
	if err := in.Verify(r.Header, body, h.opts.Now()); err != nil {
		return h.rejectSignature(w, r, name, err)
	}
	if !utf8.Valid(body) {
		// JSON is UTF-8 (RFC 8259 8.1). Decoding would turn each invalid
		// byte into U+FFFD, so two distinct event ids could merge into one
		// claim and the second event would never be fulfilled.
		h.opts.Logger.WarnContext(ctx, "webhook: body is not valid UTF-8", "provider", name)
		problem.Write(w, http.StatusBadRequest, "malformed_payload", "body is not valid UTF-8")
		return OutcomeMalformed
	}
	ev, err := in.Parse(body)
	if err != nil {
		h.opts.Logger.WarnContext(ctx, "webhook: malformed payload", "provider", name, "error", err)
		problem.Write(w, http.StatusBadRequest, "malformed_payload", err.Error())
		return OutcomeMalformed
	}
	if ev.Refused != "" {
		h.opts.Logger.WarnContext(ctx, "webhook: event cannot be applied; claimed and recorded refused", "provider", name,
			"event_id", ev.ID, "type", ev.Type, "reason", ev.Refused)
	}
	won, err := h.claim(ctx, ev, body)
	if err != nil {
		h.opts.Logger.ErrorContext(ctx, "webhook: claim failed, provider will retry", "provider", name,
			"event_id", ev.ID, "error", err)
		problem.Write(w, http.StatusServiceUnavailable, "unavailable", "cannot record the event now; retry later")
		return OutcomeError
	}
	if !won {
		writeStatus(w, OutcomeDuplicate)
		return OutcomeDuplicate
	}
	if h.opts.Logger.Enabled(ctx, slog.LevelDebug) { // spare building the attrs on the hot path
		h.opts.Logger.DebugContext(ctx, "webhook: claimed", "provider", name, "event_id", ev.ID,
			"type", ev.Type, "payment", ev.Payment != nil)
	}
	writeStatus(w, OutcomeClaimed)
	return OutcomeClaimed
}

func (h *handler) rejectSignature(w http.ResponseWriter, r *http.Request, name string, err error) string {
	h.opts.Logger.WarnContext(r.Context(), "webhook: signature rejected", "provider", name,
		"remote", r.RemoteAddr, "error", err)
	switch {
	case errors.Is(err, provider.ErrStaleSignature):
		problem.Write(w, http.StatusBadRequest, "stale_signature", err.Error())
		return OutcomeStale
	case errors.Is(err, provider.ErrMissingSignature):
		problem.Write(w, http.StatusBadRequest, "missing_signature", err.Error())
	case errors.Is(err, provider.ErrMalformedSignature):
		problem.Write(w, http.StatusBadRequest, "malformed_signature", err.Error())
	default:
		problem.Write(w, http.StatusBadRequest, "bad_signature", "signature does not match")
	}
	return OutcomeBadSignature
}

// statusBodies are the 200 answers, encoded once: {"status":"<outcome>"}
// and a newline, as json.Encoder writes them.
var statusBodies = map[string][]byte{
	OutcomeClaimed:   []byte(`{"status":"claimed"}` + "\n"),
	OutcomeDuplicate: []byte(`{"status":"duplicate"}` + "\n"),
}

func writeStatus(w http.ResponseWriter, status string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(statusBodies[status])
}

// Problem is the application/problem+json body of every error answer.
type Problem = problem.Problem
