package jobs

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/wallet"
)

// Deps are what the domain workers of a worker process need: plain values
// the composition root builds from the configuration (cmd/billing's
// wire.go) and hands to its worker registry (cmd/billing's workers.go),
// which registers every package's workers. This package declares no worker
// of a domain and registers none.
type Deps struct {
	Pool *pgxpool.Pool
	// Wallet is the program's one wallet store (required): fulfilment,
	// reversals and funding post through it.
	Wallet *wallet.Store
	Logger *slog.Logger // nil is slog.Default()
	// Now is the clock every worker and periodic job uses; nil is time.Now.
	Now func() time.Time
	// Providers are the program's provider drivers: they refund unapplied
	// payments and list events for reconciliation. nil: none.
	Providers *provider.Registry
	// Enforcer configures the funding service (time zone, fund-ahead,
	// batch completion); its Now and Logger are these Deps'.
	Enforcer enforcer.Options
	// SweepSchedule is when the elected leader sweeps for Marquees to
	// fund; nil declares no periodic sweep (a process that only works jobs).
	SweepSchedule river.PeriodicSchedule
	// ReconcileSchedule is when the leader reconciles each provider that
	// lists events; nil declares no periodic reconciliation.
	// ReconcileTimeout bounds one run (0: reconcile.DefaultTimeout).
	ReconcileSchedule river.PeriodicSchedule
	ReconcileTimeout  time.Duration
	// Events configures the outgoing events' delivery worker (timeout,
	// schedule); its Pool, Now and Logger are these Deps'.
	Events events.WorkerOptions
}
