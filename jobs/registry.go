package jobs

import (
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/playground"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/payments/reconcile"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/web/idempotency"
	"github.com/fibe-dev/billing/wallet"
)

// Deps are what the domain workers need. cmd/billing builds them from the
// configuration; tests build them by hand.
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

// Registry builds the worker bundle and the periodic jobs of the worker
// process. Every process that may win leader election must build the same
// periodic jobs, so this is the only place they are declared: one list,
// each package's Register adding its workers and returning its periodic
// jobs.
func Registry(deps Deps) (*river.Workers, []*river.PeriodicJob) {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	funding := deps.Enforcer
	funding.Now, funding.Logger = deps.Now, deps.Logger
	workers := river.NewWorkers()
	periodic := slices.Concat(
		RegisterNoop(workers),
		fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: deps.Pool, Wallet: deps.Wallet, Logger: deps.Logger,
			Now: deps.Now, Refunders: provider.Select[fulfillment.Refunder](deps.Providers)}),
		playground.Register(workers, playground.WorkerOptions{Pool: deps.Pool, Now: deps.Now}),
		idempotency.Register(workers, idempotency.WorkerOptions{Pool: deps.Pool, Now: deps.Now}),
		enforcer.Register(workers, enforcer.WorkerOptions{Service: enforcer.New(deps.Pool, deps.Wallet, funding),
			Schedule: deps.SweepSchedule}),
		reconcile.Register(workers, reconcile.WorkerOptions{Pool: deps.Pool,
			Listers: provider.Select[reconcile.Lister](deps.Providers), Schedule: deps.ReconcileSchedule,
			RunTimeout: deps.ReconcileTimeout, Now: deps.Now, Logger: deps.Logger}),
		events.Register(workers, withDeps(deps.Events, deps)),
	)
	return workers, periodic
}

// withDeps gives the delivery worker the program's pool, clock and logger.
func withDeps(o events.WorkerOptions, deps Deps) events.WorkerOptions {
	o.Pool, o.Now, o.Logger = deps.Pool, deps.Now, deps.Logger
	return o
}
