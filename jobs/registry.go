package jobs

import (
	"log/slog"
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
// periodic jobs, so this is the only place they are declared.
func Registry(deps Deps) (*river.Workers, []*river.PeriodicJob) {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Config == nil {
		deps.Config = config.Default()
	}
	cfg := deps.Config
	workers := river.NewWorkers()
	river.AddWorker(workers, &NoopWorker{})
	river.AddWorker(workers, fulfillment.NewWorker(fulfillment.WorkerOptions{
		Pool: deps.Pool, SparksPerMana: cfg.SparksPerMana, Logger: deps.Logger, Now: deps.Now,
		Refunders: provider.Select[fulfillment.Refunder](deps.Providers)}))
	river.AddWorker(workers, fulfillment.NewReverseWorker(fulfillment.WorkerOptions{
		Pool: deps.Pool, SparksPerMana: cfg.SparksPerMana, Logger: deps.Logger, Now: deps.Now}))
	playground.AddWorkers(workers, playground.WorkerOptions{Pool: deps.Pool, Now: deps.Now})
	river.AddWorker(workers, &idempotency.ReapWorker{Store: idempotency.NewStore(deps.Pool, 0), Now: deps.Now})
	periodic := []*river.PeriodicJob{idempotency.PeriodicReap()}
	schedule := cfg.EnforcerSchedule
	if schedule == nil { // a Config built by hand (tests) has no parsed schedule
		schedule = config.Default().EnforcerSchedule
	}
	w := wallet.New(deps.Pool, wallet.Options{SparksPerMana: cfg.SparksPerMana})
	periodic = append(periodic, enforcer.Register(workers, deps.Pool, w, enforcer.Options{TZ: cfg.ServiceDayTZ,
		Now: deps.Now, Logger: deps.Logger, FundAhead: cfg.FundAhead, Complete: cfg.BatchComplete}, schedule)...)
	periodic = append(periodic, reconcile.Register(workers, deps.Pool, provider.Select[reconcile.Lister](deps.Providers),
		cfg, deps.Now, deps.Logger)...)
	return workers, periodic
}
