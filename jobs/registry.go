package jobs

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/idempotency"
	"github.com/fibe-dev/billing/playground"
)

// Deps are what the domain workers need.
type Deps struct {
	Pool   *pgxpool.Pool
	Config *config.Config
	Logger *slog.Logger
	// Now is the clock every worker and periodic job uses; nil is time.Now.
	Now func() time.Time
}

// Registry builds the worker bundle and the periodic jobs of the worker
// process. Every process that may win leader election must build the same
// periodic jobs, so this is the only place they are declared.
func Registry(deps Deps) (*river.Workers, []*river.PeriodicJob, error) {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &NoopWorker{})
	river.AddWorker(workers, fulfillment.NewWorker(fulfillment.WorkerOptions{
		Pool: deps.Pool, SparksPerMana: sparksPerMana(deps.Config), Logger: deps.Logger, Now: deps.Now,
		Refunders: refunders(deps.Config)}))
	river.AddWorker(workers, fulfillment.NewReverseWorker(fulfillment.WorkerOptions{
		Pool: deps.Pool, SparksPerMana: sparksPerMana(deps.Config), Logger: deps.Logger, Now: deps.Now}))
	playground.AddWorkers(workers, playground.WorkerOptions{Pool: deps.Pool, Now: deps.Now})
	river.AddWorker(workers, &idempotency.ReapWorker{Store: idempotency.NewStore(deps.Pool, 0), Now: deps.Now})
	periodic := []*river.PeriodicJob{idempotency.PeriodicReap()}
	enforcerPeriodic, err := enforcer.Register(workers, deps.Pool, deps.Config, deps.Now, deps.Logger)
	if err != nil {
		return nil, nil, err
	}
	periodic = append(periodic, enforcerPeriodic...)
	return workers, periodic, nil
}

func sparksPerMana(cfg *config.Config) int64 {
	if cfg == nil {
		return 0 // the wallet's default
	}
	return cfg.SparksPerMana
}

// refunders are the provider refund APIs configured: Stripe's when its
// secret key is set.
func refunders(cfg *config.Config) map[string]fulfillment.Refunder {
	if cfg == nil || cfg.StripeSecretKey == "" {
		return nil
	}
	return map[string]fulfillment.Refunder{
		fulfillment.ProviderStripe: fulfillment.NewStripeRefunder(cfg.StripeSecretKey, cfg.StripeAPIURL),
	}
}
