// Package reconcile recovers payments, refunds and disputes whose webhook
// never arrived: it lists a provider's recent events of the kinds intake
// acts on through the provider's driver and
// feeds each one not yet in webhook_events through the same claim as a
// webhook delivery (webhook.Claimer), so claim-once holds whichever arrives
// first.
//
// A provider whose API lists no events (its driver answers
// provider.ErrNoListing) cannot have its lost webhooks recovered this way.
// Every recovered event means a webhook was lost:
// billing_reconcile_recovered_total{provider} counts them, and an alert
// fires on any increase.
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

	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
)

// Lister is what reconciliation needs of a provider's driver.
type Lister interface {
	// Available(provider.Listing) says whether it lists events.
	Available(c provider.Capability) error
	// ListEvents lists the payment events created since a time, newest or
	// oldest first, calling fn with each event's id and body (the shape
	// Parse reads). fn's error stops the listing.
	ListEvents(ctx context.Context, since time.Time, fn func(eventID string, body []byte) error) error
	Parse(body []byte) (*provider.Event, error)
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

// exportZeros exports zeros for every provider of listers that can be
// reconciled (whose API lists events), so increase() sees the first lost
// webhook.
func exportZeros(listers map[string]Lister) {
	for p, l := range listers {
		if errors.Is(l.Available(provider.Listing), provider.ErrUnsupported) {
			continue
		}
		recoveredTotal.WithLabelValues(p)
		runsTotal.WithLabelValues(p, "ok")
		runsTotal.WithLabelValues(p, "error")
	}
}

// Options configure a Reconciler.
type Options struct {
	Pool *pgxpool.Pool
	// Listers by provider (provider.Select of the program's registry).
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
	exportZeros(opts.Listers)
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
	err = lister.ListEvents(ctx, since, func(id string, body []byte) error {
		return r.one(ctx, claimer, lister, sum, id, body)
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

// ListerFor returns name's Lister, or why it has none: an error wrapping
// provider.ErrNoListing (its API lists no events) or
// provider.ErrNotConfigured (no API key, or no driver).
func ListerFor(listers map[string]Lister, name string) (Lister, error) {
	l := listers[name]
	if l == nil {
		return nil, fmt.Errorf("reconcile: %w: no driver for %s", provider.ErrNotConfigured, name)
	}
	if err := l.Available(provider.Listing); err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	return l, nil
}

// one reconciles one listed event.
func (r *Reconciler) one(ctx context.Context, claimer *webhook.Claimer, l Lister, sum *Summary, id string, body []byte) error {
	sum.Seen++
	defer r.progress(*sum)
	claimed, err := webhook.Claimed(ctx, r.opts.Pool, sum.Provider, id)
	switch {
	case err != nil:
		return err
	case claimed:
		sum.AlreadyClaimed++
		return nil
	}
	ev, err := l.Parse(body)
	if err != nil {
		if !sum.DryRun {
			r.opts.Logger.WarnContext(ctx, "reconcile: malformed event skipped", "provider", sum.Provider, "event_id", id, "error", err)
		}
		sum.Malformed++
		return nil
	}
	if sum.DryRun {
		sum.Recovered++
		return nil
	}
	won, err := claimer.Claim(ctx, ev, body)
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
