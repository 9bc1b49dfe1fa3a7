package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/dev/devcheckout"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/platform/rivercomplete"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/creem"
	"github.com/fibe-dev/billing/internal/provider/paddle"
	"github.com/fibe-dev/billing/internal/web/httpapi"
)

func loadEnv(t *testing.T, env map[string]string) *config.Config {
	t.Helper()
	cfg, err := load(nil, config.Options{Env: env})
	require.NoError(t, err)
	return cfg
}

// TestWiringDefaults: with no file and no environment, the packages get
// the built-in catalogue, plans, batch completion and rate limit.
func TestWiringDefaults(t *testing.T) {
	t.Parallel()
	cfg := loadEnv(t, map[string]string{})
	require.Equal(t, fulfillment.DefaultSKUs(), skus(cfg))
	require.Equal(t, fulfillment.SKU{Amount: 999, Currency: "usd", Mana: 1000}, skus(cfg)["mana_1000"])
	require.Equal(t, fulfillment.SKU{Amount: 3999, Currency: "usd", Mana: 5000}, skus(cfg)["mana_5000"])
	require.Equal(t, enforcer.DefaultPlans(), plans(cfg))
	require.EqualValues(t, 100, plans(cfg)["standard"].DailySparks)
	require.Equal(t, rivercomplete.ModePilot, enforcerOptions(cfg).Complete)
	a := newApp(cfg, nil)
	opts := a.apiOptions(nil)
	require.Equal(t, httpapi.RateLimit{PerSecond: 200, Burst: 400, Concurrent: 8}, opts.RateLimit)
	require.Same(t, a.wallet, opts.Wallet, "one wallet store")
	require.Same(t, a.wallet, a.jobsDeps(nil).Wallet, "one wallet store")
}

func TestBatchComplete(t *testing.T) {
	t.Parallel()
	cfg := loadEnv(t, map[string]string{"BILLING_BATCH_COMPLETE": "per_job"})
	require.Equal(t, rivercomplete.ModePerJob, enforcerOptions(cfg).Complete)
	_, err := load(nil, config.Options{Env: map[string]string{"BILLING_BATCH_COMPLETE": "each"}})
	var cerr *config.Error
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, config.KeyBatchComplete, cerr.Key)
	require.ErrorIs(t, err, rivercomplete.ErrMode)
	require.Contains(t, err.Error(), config.KeyBatchComplete)
	require.NotContains(t, err.Error(), "\n", "one line")
}

// TestFileCatalogue: billing.yaml's SKUs and plans replace the built-in
// ones, every field carried over.
func TestFileCatalogue(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "billing.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`skus:
  mana_1000: {amount: 999, currency: USD, mana: 1000, name: Starter, creem_product_id: prod_1, paddle_price_id: pri_1}
plans:
  big:
    daily_sparks: 250
`), 0o600))
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	config.BindFlags(fs)
	require.NoError(t, fs.Set("config", path))
	cfg, err := load(fs, config.Options{Env: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, map[string]fulfillment.SKU{"mana_1000": {Amount: 999, Currency: "usd", Mana: 1000, Name: "Starter",
		CatalogueIDs: map[string]string{provider.Creem: "prod_1", provider.Paddle: "pri_1"}}}, skus(cfg))
	require.Equal(t, "prod_1", skus(cfg)["mana_1000"].CatalogueID(provider.Creem))
	require.Empty(t, skus(cfg)["mana_1000"].CatalogueID(provider.Stripe))
	require.Equal(t, map[string]enforcer.Plan{"big": {DailySparks: 250}}, plans(cfg))
}

func TestProviderOptions(t *testing.T) {
	t.Parallel()
	cfg := loadEnv(t, map[string]string{"BILLING_STRIPE_SECRET_KEY": "sk_test_1", "BILLING_STRIPE_API_URL": "http://127.0.0.1:12111/",
		"BILLING_STRIPE_WEBHOOK_SECRET": "whsec_old,whsec_new", "BILLING_PADDLE_API_KEY": "pdl",
		"BILLING_PADDLE_ENVIRONMENT": "sandbox", "BILLING_CREEM_WEBHOOK_SECRET": "creem_sec"})
	opts := cfg.Providers
	require.Equal(t, provider.Options{APIKey: "sk_test_1", APIURL: "http://127.0.0.1:12111",
		WebhookSecrets: []string{"whsec_old", "whsec_new"}}, opts[provider.Stripe])
	require.Equal(t, provider.Options{APIKey: "pdl", APIURL: paddle.SandboxURL}, opts[provider.Paddle])
	require.Equal(t, provider.Options{APIURL: creem.DefaultAPIURL, WebhookSecrets: []string{"creem_sec"}}, opts[provider.Creem])
	require.ElementsMatch(t, provider.Names(), newProviders(cfg).Names())
}

// TestWorkerDeclaresPeriodicJobs: the worker process declares the
// idempotency reaper and the enforcer's sweep, and a reconciliation per
// provider with an API key.
func TestWorkerDeclaresPeriodicJobs(t *testing.T) {
	t.Parallel()
	_, periodic := registry(newApp(loadEnv(t, map[string]string{}), nil).jobsDeps(nil))
	require.Len(t, periodic, 2, "reaper and sweep; no provider has a key")
	_, periodic = registry(newApp(loadEnv(t, map[string]string{"BILLING_STRIPE_SECRET_KEY": "sk_test_1"}), nil).jobsDeps(nil))
	require.Len(t, periodic, 3, "and Stripe's reconciliation")
}

// TestOnlyDevServesTheSimulatedCheckout: billing web's options serve no
// dev page and open no checkout without an API key; billing dev's add the
// simulated page and open it for every provider without one.
func TestOnlyDevServesTheSimulatedCheckout(t *testing.T) {
	t.Parallel()
	a := newApp(loadEnv(t, map[string]string{}), nil)
	web := a.apiOptions(nil)
	require.Empty(t, web.Pages)
	dev := withDevCheckout(a, web, "http://127.0.0.1:1", nil)
	require.Contains(t, dev.Pages, devcheckout.Path)
	for _, name := range provider.Names() {
		require.False(t, web.Checkouts.Available(name), "web: %s has no API key", name)
		require.True(t, dev.Checkouts.Available(name), "dev: %s opens the simulated page", name)
	}
}

// TestEventsOptions: the delivery worker gets the configured request
// timeout and retry schedule, and the documented defaults without them.
func TestEventsOptions(t *testing.T) {
	t.Parallel()
	o := eventsOptions(newApp(loadEnv(t, map[string]string{}), nil).jobsDeps(nil))
	require.Equal(t, events.DefaultTimeout, o.Timeout)
	require.Equal(t, events.DefaultSchedule, o.Schedule)

	cfg := loadEnv(t, map[string]string{"BILLING_EVENTS_TIMEOUT": "2s", "BILLING_EVENTS_RETRY_SCHEDULE": "1s,2s,2s,2s,2s"})
	o = eventsOptions(newApp(cfg, nil).jobsDeps(nil))
	require.Equal(t, 2*time.Second, o.Timeout)
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}, o.Schedule)
}
