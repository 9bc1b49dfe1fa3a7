package jobs

import (
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/idempotency"
	"github.com/fibe-dev/billing/internal/playground"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/reconcile"
	"github.com/fibe-dev/billing/wallet"
)

// Deps are what the domain workers need.
type Deps struct {
	Pool   *pgxpool.Pool
	Config *config.Config
	Logger *slog.Logger
	// Now is the clock every worker and periodic job uses; nil is time.Now.
	Now func() time.Time
	// Providers are the program's provider drivers: they refund unapplied
	// payments and list events for reconciliation. nil: none.
	Providers *provider.Registry
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
	if deps.Config == nil {
		deps.Config = config.Default()
	}
	cfg := deps.Config
	schedule := cfg.EnforcerSchedule
	if schedule == nil { // a Config built by hand (tests) has no parsed schedule
		schedule = config.Default().EnforcerSchedule
	}
	w := wallet.New(deps.Pool, wallet.Options{SparksPerMana: cfg.SparksPerMana})
	funding := enforcer.Options{TZ: cfg.ServiceDayTZ, Now: deps.Now, Logger: deps.Logger, FundAhead: cfg.FundAhead,
		Complete: cfg.BatchComplete}
	workers := river.NewWorkers()
	river.AddWorker(workers, &NoopWorker{})
	periodic := slices.Concat(
		fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: deps.Pool, Wallet: w, Logger: deps.Logger,
			Now: deps.Now, Refunders: provider.Select[fulfillment.Refunder](deps.Providers)}),
		playground.Register(workers, playground.WorkerOptions{Pool: deps.Pool, Now: deps.Now}),
		idempotency.Register(workers, idempotency.WorkerOptions{Pool: deps.Pool, Now: deps.Now}),
		enforcer.Register(workers, enforcer.WorkerOptions{Service: enforcer.New(deps.Pool, w, funding), Schedule: schedule}),
		reconcile.Register(workers, reconcile.WorkerOptions{Pool: deps.Pool,
			Listers: provider.Select[reconcile.Lister](deps.Providers), Schedule: cfg.ReconcileSchedule,
			RunTimeout: cfg.ReconcileTimeout, Now: deps.Now, Logger: deps.Logger}),
	)
	return workers, periodic
}
