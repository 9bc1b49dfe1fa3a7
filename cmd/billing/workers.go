package main

import (
	"slices"
	"time"

	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/playground"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/payments/reconcile"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/web/idempotency"
	"github.com/fibe-dev/billing/jobs"
)

// registry builds the worker bundle and the periodic jobs of a process
// that works jobs, from the dependencies the composition root built
// (app.jobsDeps). Every process that may win leader election must build
// the same periodic jobs, so this is the only place they are declared:
// one list, each package's Register adding its workers and returning its
// periodic jobs (TestWorkersRegisterOneWay holds the list whole).
func registry(deps jobs.Deps) (*river.Workers, []*river.PeriodicJob) {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	funding := deps.Enforcer
	funding.Now, funding.Logger = deps.Now, deps.Logger
	workers := river.NewWorkers()
	periodic := slices.Concat(
		jobs.RegisterNoop(workers),
		fulfillment.Register(workers, fulfillment.WorkerOptions{Pool: deps.Pool, Wallet: deps.Wallet, Logger: deps.Logger,
			Now: deps.Now, Refunders: provider.Select[fulfillment.Refunder](deps.Providers)}),
		playground.Register(workers, playground.WorkerOptions{Pool: deps.Pool, Now: deps.Now}),
		idempotency.Register(workers, idempotency.WorkerOptions{Pool: deps.Pool, Now: deps.Now}),
		enforcer.Register(workers, enforcer.WorkerOptions{Service: enforcer.New(deps.Pool, deps.Wallet, funding),
			Schedule: deps.SweepSchedule}),
		reconcile.Register(workers, reconcile.WorkerOptions{Pool: deps.Pool,
			Listers: provider.Select[reconcile.Lister](deps.Providers), Schedule: deps.ReconcileSchedule,
			RunTimeout: deps.ReconcileTimeout, Now: deps.Now, Logger: deps.Logger}),
		events.Register(workers, eventsOptions(deps)),
	)
	return workers, periodic
}

// eventsOptions gives the delivery worker the program's pool, clock and logger.
func eventsOptions(deps jobs.Deps) events.WorkerOptions {
	o := deps.Events
	o.Pool, o.Now, o.Logger = deps.Pool, deps.Now, deps.Logger
	return o
}
