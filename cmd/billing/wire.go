package main

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/platform/rivercomplete"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/web/httpapi"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

// This file is the composition root: the one place where the
// configuration (package config, plain values) becomes the Options of the
// packages below cmd, and where what a process has one of is built: its
// wallet store and its provider registry. No package below cmd imports
// config.

// load is config.Load of every driver's settings (their facts declare
// them), then the checks of the values whose meaning belongs to a package
// below (batch_complete's modes are rivercomplete's), each failing with a
// *config.Error naming its key like config's own.
func load(fs *pflag.FlagSet, opts config.Options) (*config.Config, error) {
	opts.Providers = drivers.Facts()
	cfg, err := config.Load(fs, opts)
	if err != nil {
		return nil, err
	}
	if _, err := rivercomplete.ParseMode(cfg.BatchComplete); err != nil {
		return nil, &config.Error{Key: config.KeyBatchComplete, Err: err}
	}
	return cfg, nil
}

// app is what a process builds once from its configuration and hands to
// every part it runs: one pool, one wallet store, one provider registry.
type app struct {
	cfg       *config.Config
	pool      *pgxpool.Pool
	wallet    *wallet.Store
	providers *provider.Registry
}

func newApp(cfg *config.Config, pool *pgxpool.Pool) *app {
	return &app{cfg: cfg, pool: pool, wallet: newWallet(pool, cfg), providers: newProviders(cfg)}
}

// newWallet is the wallet store over pool, posting at cfg's rate. Every
// process that posts builds its store here, so every Sparks movement (the
// worker's funding and clawbacks, the web's conversions, an operator's
// adjustment) is judged against the low-balance threshold in its own
// transaction.
func newWallet(pool *pgxpool.Pool, cfg *config.Config) *wallet.Store {
	return wallet.New(pool, wallet.Options{SparksPerMana: cfg.SparksPerMana,
		Observer: events.LowBalance{Days: cfg.LowBalanceDays}})
}

// newProviders is the registry of provider drivers built from cfg (each
// one's API key, API URL and webhook signing secrets, which config read
// from the keys its facts declare): every command that talks to providers
// builds it once and hands it to what needs it (the webhook intake,
// checkouts, reconciliation, refunds).
func newProviders(cfg *config.Config) *provider.Registry {
	return drivers.New(cfg.Providers)
}

// skus is the catalogue: billing.yaml's, else the built-in one.
func skus(cfg *config.Config) map[string]fulfillment.SKU {
	return fileOr(cfg.SKUs, fulfillment.DefaultSKUs, func(s config.SKU) fulfillment.SKU { return fulfillment.SKU(s) })
}

// plans are the Marquee plans: billing.yaml's, else the built-in ones.
func plans(cfg *config.Config) map[string]enforcer.Plan {
	return fileOr(cfg.Plans, enforcer.DefaultPlans, func(p config.Plan) enforcer.Plan { return enforcer.Plan(p) })
}

// fileOr is the file's entries made into the domain's type by conv, or
// builtIn() when the file defines none (config leaves the map nil).
func fileOr[F, D any](file map[string]F, builtIn func() map[string]D, conv func(F) D) map[string]D {
	if file == nil {
		return builtIn()
	}
	out := make(map[string]D, len(file))
	for name, v := range file {
		out[name] = conv(v)
	}
	return out
}

// enforcerOptions are the funding service's options of cfg; the caller
// adds its clock and logger.
func enforcerOptions(cfg *config.Config) enforcer.Options {
	// load has checked the mode, so the conversion is one of the modes.
	return enforcer.Options{TZ: cfg.ServiceDayTZ, FundAhead: cfg.FundAhead, Complete: rivercomplete.Mode(cfg.BatchComplete)}
}

// jobsDeps are the worker process's: every worker and periodic job it
// declares (package jobs).
func (a *app) jobsDeps(logger *slog.Logger) jobs.Deps {
	return jobs.Deps{Pool: a.pool, Wallet: a.wallet, Logger: logger, Providers: a.providers,
		Enforcer: enforcerOptions(a.cfg), SweepSchedule: a.cfg.EnforcerSchedule,
		ReconcileSchedule: a.cfg.ReconcileSchedule, ReconcileTimeout: a.cfg.ReconcileTimeout,
		Events: events.WorkerOptions{Timeout: a.cfg.EventsTimeout, Schedule: a.cfg.EventsRetrySchedule}}
}

// apiOptions are the web process's (package httpapi), checkouts opened by
// the provider drivers; the caller adds the River client.
func (a *app) apiOptions(logger *slog.Logger) httpapi.Options {
	return httpapi.Options{Pool: a.pool, Wallet: a.wallet, Logger: logger, Providers: a.providers,
		Checkouts: a.checkouts(provider.Select[checkout.Opener](a.providers), logger),
		Plans:     plans(a.cfg), TZ: a.cfg.ServiceDayTZ, RateLimit: httpapi.RateLimit(a.cfg.RateLimit),
		RiverUIUser: a.cfg.RiverUIUser, RiverUIPassword: a.cfg.RiverUIPassword}
}

// checkouts open checkouts of the catalogue through openers, returning the
// customer to the configured URLs.
func (a *app) checkouts(openers map[string]checkout.Opener, logger *slog.Logger) *checkout.Service {
	return checkout.NewService(checkout.Options{Openers: openers, SKUs: skus(a.cfg),
		SuccessURL: a.cfg.CheckoutSuccessURL, CancelURL: a.cfg.CheckoutCancelURL, Logger: logger})
}
