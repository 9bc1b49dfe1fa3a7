// Package reconcile recovers payments whose webhook never arrived: it lists
// a provider's recent payment events through the provider's API and feeds
// each one not yet in webhook_events through the same claim as a webhook
// delivery (webhook.Claimer), so claim-once holds whichever arrives first.
//
// Stripe's Events API (filtered by the event types intake fulfils) and
// Paddle's events API are listed; Creem offers no event listing, so its
// lost webhooks cannot be recovered this way (ErrNoListing). Every recovered
// event means a webhook was lost: billing_reconcile_recovered_total{provider}
// counts them, and an alert fires on any increase.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/webhook"
)

// Errors. Compare with errors.Is.
var (
	// ErrNoListing: the provider has no API to list its events (Creem).
	ErrNoListing = errors.New("reconcile: provider offers no event listing")
	// ErrNotConfigured: the provider has no API key configured.
	ErrNotConfigured = errors.New("reconcile: provider has no API key configured")
)

// Lister lists a provider's payment events created since a time, newest
// or oldest first, calling fn with each event's id and JSON body (the shape
// webhook.ParseEvent reads). fn's error stops the listing.
type Lister interface {
	List(ctx context.Context, since time.Time, fn func(eventID string, body []byte) error) error
}

// Summary is one run's outcome; it is the JSON of `billing reconcile --json`.
type Summary struct {
	Provider string    `json:"provider"`
	Since    time.Time `json:"since"`
	DryRun   bool      `json:"dry_run"`
	// Seen events listed; AlreadyClaimed of them were in webhook_events;
	// Recovered were claimed by this run (with --dry-run: would be).
	Seen           int `json:"seen"`
	AlreadyClaimed int `json:"already_claimed"`
	Recovered      int `json:"recovered"`
	// Malformed events could not be read (logged, skipped).
	Malformed int `json:"malformed"`
}

var (
	recoveredTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_reconcile_recovered_total",
		Help: "Provider events claimed by reconciliation rather than by their webhook: each one is a lost webhook.",
	}, []string{"provider"})
	runsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_reconcile_runs_total",
		Help: "Reconciliation runs by provider and outcome (ok, error).",
	}, []string{"provider", "outcome"})
)

// init exports zeros for every provider that can be reconciled (Creem has
// no event listing), so increase() sees the first lost webhook.
func init() {
	for _, p := range fulfillment.Providers() {
		if p == fulfillment.ProviderCreem {
			continue
		}
		recoveredTotal.WithLabelValues(p)
		runsTotal.WithLabelValues(p, "ok")
		runsTotal.WithLabelValues(p, "error")
	}
}

// Options configure a Reconciler.
type Options struct {
	Pool    *pgxpool.Pool
	Listers map[string]Lister
	Logger  *slog.Logger
	// Progress, when set, is called after each event with the running summary.
	Progress func(Summary)
}

// Reconciler runs reconciliations.
type Reconciler struct{ opts Options }

// New returns a Reconciler.
func New(opts Options) *Reconciler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Reconciler{opts: opts}
}

// Run reconciles provider's events created since since. Claims insert their
// fulfilment jobs through client (an insert-only client is enough). With
// dryRun nothing is claimed: Recovered counts what would be.
func (r *Reconciler) Run(ctx context.Context, client *river.Client[pgx.Tx], provider string, since time.Time, dryRun bool) (*Summary, error) {
	lister, err := r.lister(provider)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Provider: provider, Since: since.UTC(), DryRun: dryRun}
	claimer := webhook.NewClaimer(webhook.Options{Pool: r.opts.Pool, River: client, Logger: r.opts.Logger})
	err = lister.List(ctx, since, func(id string, body []byte) error {
		return r.one(ctx, claimer, sum, id, body)
	})
	outcome := "ok"
	if err != nil {
		outcome = "error"
		err = fmt.Errorf("reconcile %s: %w", provider, err)
	}
	runsTotal.WithLabelValues(provider, outcome).Inc()
	r.opts.Logger.InfoContext(ctx, "reconcile: done", "provider", provider, "since", sum.Since, "seen", sum.Seen,
		"already_claimed", sum.AlreadyClaimed, "recovered", sum.Recovered, "malformed", sum.Malformed,
		"dry_run", dryRun, "error", err)
	return sum, err
}

func (r *Reconciler) lister(provider string) (Lister, error) {
	return ListerFor(r.opts.Listers, provider)
}

// ListerFor returns provider's Lister, or why it has none: ErrNoListing
// (Creem) or ErrNotConfigured (no API key).
func ListerFor(listers map[string]Lister, provider string) (Lister, error) {
	if provider == "creem" {
		return nil, fmt.Errorf("%w: %s (its API has no event listing)", ErrNoListing, provider)
	}
	l := listers[provider]
	if l == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotConfigured, provider)
	}
	return l, nil
}

// one reconciles one listed event.
func (r *Reconciler) one(ctx context.Context, claimer *webhook.Claimer, sum *Summary, id string, body []byte) error {
	sum.Seen++
	defer r.progress(*sum)
	claimed, err := webhook.Claimed(ctx, r.opts.Pool, sum.Provider, id)
	switch {
	case err != nil:
		return err
	case claimed:
		sum.AlreadyClaimed++
		return nil
	case sum.DryRun:
		if _, err := webhook.ParseEvent(sum.Provider, body); err != nil {
			sum.Malformed++
			return nil
		}
		sum.Recovered++
		return nil
	}
	won, ev, err := claimer.Claim(ctx, sum.Provider, body)
	if errors.Is(err, webhook.ErrMalformedPayload) {
		r.opts.Logger.WarnContext(ctx, "reconcile: malformed event skipped", "provider", sum.Provider, "event_id", id, "error", err)
		sum.Malformed++
		return nil
	}
	if err != nil {
		return err
	}
	if !won { // its webhook arrived between our check and our claim
		sum.AlreadyClaimed++
		return nil
	}
	sum.Recovered++
	recoveredTotal.WithLabelValues(sum.Provider).Inc()
	r.opts.Logger.WarnContext(ctx, "reconcile: recovered an event whose webhook never arrived", "provider", sum.Provider,
		"event_id", ev.ID, "type", ev.Type, "payment", ev.Payment != nil)
	return nil
}

func (r *Reconciler) progress(s Summary) {
	if r.opts.Progress != nil {
		r.opts.Progress(s)
	}
}
