package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
)

// facts are every driver's: the provider settings Load reads.
var facts = drivers.Facts()

func TestLoadValidation(t *testing.T) {
	t.Parallel()
	const db = "postgres://u:p@localhost:5432/billing"
	tests := []struct {
		name    string
		env     map[string]string
		require bool
		wantKey string // empty: no error
	}{
		{name: "defaults", env: map[string]string{"BILLING_DATABASE_URL": db}},
		{name: "missing database when required", env: map[string]string{}, require: true, wantKey: config.KeyDatabaseURL},
		{name: "database optional", env: map[string]string{}},
		{name: "unparsable database", env: map[string]string{"BILLING_DATABASE_URL": "::not a url"}, wantKey: config.KeyDatabaseURL},
		{name: "wrong scheme", env: map[string]string{"BILLING_DATABASE_URL": "mysql://h/db"}, wantKey: config.KeyDatabaseURL},
		{name: "bad cron", env: map[string]string{"BILLING_ENFORCER_SCHEDULE": "every five minutes"}, wantKey: config.KeyEnforcerSchedule},
		{name: "six-field cron refused", env: map[string]string{"BILLING_ENFORCER_SCHEDULE": "0 */5 * * * *"}, wantKey: config.KeyEnforcerSchedule},
		{name: "descriptor cron", env: map[string]string{"BILLING_ENFORCER_SCHEDULE": "@every 1m"}},
		{name: "unknown tz", env: map[string]string{"BILLING_SERVICE_DAY_TZ": "Mars/Olympus"}, wantKey: config.KeyServiceDayTZ},
		{name: "tz ok", env: map[string]string{"BILLING_SERVICE_DAY_TZ": "America/New_York"}},
		{name: "bad addr", env: map[string]string{"BILLING_HTTP_ADDR": "8080"}, wantKey: config.KeyHTTPAddr},
		{name: "bad rate", env: map[string]string{"BILLING_SPARKS_PER_MANA": "-2"}, wantKey: config.KeySparksPerMana},
		{name: "fractional rate", env: map[string]string{"BILLING_SPARKS_PER_MANA": "1.5"}, wantKey: config.KeySparksPerMana},
		{name: "zero low balance days", env: map[string]string{"BILLING_LOW_BALANCE_DAYS": "0"}, wantKey: config.KeyLowBalanceDays},
		{name: "fractional low balance days", env: map[string]string{"BILLING_LOW_BALANCE_DAYS": "2.5"}, wantKey: config.KeyLowBalanceDays},
		{name: "half riverui creds", env: map[string]string{"BILLING_RIVERUI_USER": "ops"}, wantKey: config.KeyRiverUIPassword},
		{name: "bad shutdown", env: map[string]string{"BILLING_SHUTDOWN_TIMEOUT": "soon"}, wantKey: config.KeyShutdownTimeout},
		{name: "bad job timeout", env: map[string]string{"BILLING_JOB_TIMEOUT": "-1s"}, wantKey: config.KeyJobTimeout},
		{name: "fund ahead ok", env: map[string]string{"BILLING_FUND_AHEAD": "15m"}},
		{name: "negative fund ahead", env: map[string]string{"BILLING_FUND_AHEAD": "-5m"}, wantKey: config.KeyFundAhead},
		{name: "fund ahead over 12h", env: map[string]string{"BILLING_FUND_AHEAD": "13h"}, wantKey: config.KeyFundAhead},
		{name: "stripe api url ok", env: map[string]string{"BILLING_STRIPE_API_URL": "http://127.0.0.1:12111", "BILLING_STRIPE_SECRET_KEY": "sk_test_x"}},
		{name: "stripe api url not a url", env: map[string]string{"BILLING_STRIPE_API_URL": "stripe"}, wantKey: "stripe_api_url"},
		{name: "unparsable fund ahead", env: map[string]string{"BILLING_FUND_AHEAD": "soon"}, wantKey: config.KeyFundAhead},
		{name: "rescue before timeout", env: map[string]string{"BILLING_JOB_TIMEOUT": "1m", "BILLING_RESCUE_STUCK_JOBS_AFTER": "10s"}, wantKey: config.KeyRescueAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.LoadFile("", config.Options{Providers: facts, RequireDatabase: tt.require, Env: tt.env})
			if tt.wantKey == "" {
				require.NoError(t, err)
				require.NotNil(t, c.EnforcerSchedule)
				return
			}
			var cerr *config.Error
			require.ErrorAs(t, err, &cerr)
			require.Equal(t, tt.wantKey, cerr.Key)
			require.Contains(t, err.Error(), tt.wantKey)
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.LoadFile("", config.Options{Providers: facts, Env: map[string]string{
		"BILLING_STRIPE_WEBHOOK_SECRET": " whsec_old , whsec_new ",
	}})
	require.NoError(t, err)
	require.Equal(t, ":8080", c.HTTPAddr)
	require.Equal(t, "*/5 * * * *", c.EnforcerSpec)
	require.Equal(t, time.UTC, c.ServiceDayTZ)
	require.EqualValues(t, 1, c.SparksPerMana)
	require.EqualValues(t, 3, c.LowBalanceDays)
	require.Zero(t, c.FundAhead, "funding ahead is opt-in")
	require.Equal(t, []string{"whsec_old", "whsec_new"}, c.Providers["stripe"].WebhookSecrets)
	require.Nil(t, c.SKUs, "no file catalogue: cmd/billing applies the built-in one")
	require.Nil(t, c.Plans, "no file plans: cmd/billing applies the built-in ones")
	require.Equal(t, "pilot", c.BatchComplete)
	require.Empty(t, c.Providers["stripe"].APIKey, "no Stripe API calls without a key")
	require.Equal(t, "https://api.stripe.com", c.Providers["stripe"].APIURL)
}

func TestFileAndPrecedence(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "billing.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
http_addr: "127.0.0.1:9000"
service_day_tz: Europe/Berlin
skus:
  gold:
    amount: 500
    currency: EUR
    mana: 700
plans:
  big:
    daily_sparks: 250
`), 0o600))
	c, err := config.LoadFile(path, config.Options{Providers: facts, Env: map[string]string{"BILLING_HTTP_ADDR": "127.0.0.1:9100"}})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9100", c.HTTPAddr, "env beats file")
	require.Equal(t, "Europe/Berlin", c.ServiceDayTZ.String())
	require.Equal(t, config.SKU{Amount: 500, Currency: "eur", Mana: 700}, c.SKUs["gold"])
	require.NotContains(t, c.SKUs, "mana_1000", "a file catalogue replaces the defaults")
	require.EqualValues(t, 250, c.Plans["big"].DailySparks)

	bad := filepath.Join(t.TempDir(), "billing.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("skus:\n  free:\n    amount: -1\n    currency: usd\n    mana: 5\n"), 0o600))
	_, err = config.LoadFile(bad, config.Options{Providers: facts, Env: map[string]string{}})
	var cerr *config.Error
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, "skus.free", cerr.Key)

	_, err = config.LoadFile(filepath.Join(t.TempDir(), "missing.yaml"), config.Options{Providers: facts, Env: map[string]string{}})
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, "config", cerr.Key)
}

func TestProviderSettings(t *testing.T) {
	t.Parallel()
	c, err := config.Load(nil, config.Options{Providers: facts, Env: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, "https://api.stripe.com", c.Providers["stripe"].APIURL)
	require.Equal(t, "https://api.paddle.com", c.Providers["paddle"].APIURL)
	require.Equal(t, "https://api.creem.io", c.Providers["creem"].APIURL)
	require.Empty(t, c.Providers["stripe"].APIKey)
	require.Equal(t, "@hourly", c.ReconcileSpec)
	require.Equal(t, 10*time.Minute, c.ReconcileTimeout)
	require.NotNil(t, c.ReconcileSchedule)

	c, err = config.Load(nil, config.Options{Providers: facts, Env: map[string]string{
		"BILLING_STRIPE_SECRET_KEY": " sk_test_1 ", "BILLING_STRIPE_API_URL": "http://127.0.0.1:12111/",
		"BILLING_PADDLE_API_KEY": "pdl", "BILLING_PADDLE_ENVIRONMENT": "sandbox",
		"BILLING_CREEM_API_KEY": "creem", "BILLING_CHECKOUT_SUCCESS_URL": "https://shop.test/ok",
		"BILLING_RECONCILE_SCHEDULE": "@every 10m", "BILLING_RECONCILE_TIMEOUT": "45s",
	}})
	require.NoError(t, err)
	require.Equal(t, "sk_test_1", c.Providers["stripe"].APIKey)
	require.Equal(t, "http://127.0.0.1:12111", c.Providers["stripe"].APIURL)
	require.Equal(t, "https://sandbox-api.paddle.com", c.Providers["paddle"].APIURL)
	require.Equal(t, "https://shop.test/ok", c.CheckoutSuccessURL)
	require.Equal(t, "@every 10m", c.ReconcileSpec)
	require.Equal(t, 45*time.Second, c.ReconcileTimeout)

	for key, val := range map[string]string{
		"stripe_api_url": "ftp://x", "paddle_environment": "staging", "creem_api_url": "not a url",
		config.KeyCheckoutCancelURL: "/relative", config.KeyReconcileSchedule: "hourly",
		config.KeyReconcileTimeout: "0s",
	} {
		_, err := config.Load(nil, config.Options{Providers: facts, Env: map[string]string{"BILLING_" + strings.ToUpper(key): val}})
		var ce *config.Error
		require.ErrorAs(t, err, &ce, key)
		require.Equal(t, key, ce.Key)
	}
}

func TestSKUProviderIDs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "billing.yaml")
	require.NoError(t, os.WriteFile(path, []byte("skus:\n  mana_1000: {amount: 999, currency: USD, mana: 1000, name: Starter, creem_product_id: prod_1, paddle_price_id: pri_1}\n"), 0o644))
	c, err := config.LoadFile(path, config.Options{Providers: facts, Env: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, config.SKU{Amount: 999, Currency: "usd", Mana: 1000, Name: "Starter",
		CatalogueIDs: map[string]string{"creem": "prod_1", "paddle": "pri_1"}}, c.SKUs["mana_1000"])

	// A number is an id too (as the typed fields read it); a list is not.
	require.NoError(t, os.WriteFile(path, []byte("skus:\n  gold: {amount: 5, currency: usd, mana: 5, creem_product_id: 42}\n"), 0o644))
	c, err = config.LoadFile(path, config.Options{Providers: facts, Env: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"creem": "42"}, c.SKUs["gold"].CatalogueIDs)
	require.NoError(t, os.WriteFile(path, []byte("skus:\n  gold: {amount: 5, currency: usd, mana: 5, paddle_price_id: [a]}\n"), 0o644))
	_, err = config.LoadFile(path, config.Options{Providers: facts, Env: map[string]string{}})
	var cerr *config.Error
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, "skus.gold.paddle_price_id", cerr.Key)
}

// TestProviderSettingsAreTheDriversFacts: config reads each provider's
// settings from the keys its facts declare, and reads none without them;
// the keys and their defaults are the ones billing has always read.
func TestProviderSettingsAreTheDriversFacts(t *testing.T) {
	t.Parallel()
	env := map[string]string{"BILLING_STRIPE_WEBHOOK_SECRET": "whsec_1", "BILLING_PADDLE_WEBHOOK_SECRET": "pdl_1",
		"BILLING_CREEM_WEBHOOK_SECRET": "creem_1", "BILLING_PADDLE_API_KEY": "pdl", "BILLING_CREEM_API_KEY": "ck",
		"BILLING_CREEM_API_URL": "http://127.0.0.1:1/", "BILLING_PADDLE_ENVIRONMENT": "http://127.0.0.1:2"}
	c, err := config.Load(nil, config.Options{Providers: facts, Env: env})
	require.NoError(t, err)
	require.Equal(t, map[string]provider.Options{
		"stripe": {APIURL: "https://api.stripe.com", WebhookSecrets: []string{"whsec_1"}},
		"paddle": {APIKey: "pdl", APIURL: "http://127.0.0.1:2", WebhookSecrets: []string{"pdl_1"}},
		"creem":  {APIKey: "ck", APIURL: "http://127.0.0.1:1", WebhookSecrets: []string{"creem_1"}},
	}, c.Providers)
	var keys []string
	for _, f := range facts {
		keys = append(keys, f.Settings.Keys()...)
	}
	require.ElementsMatch(t, []string{"stripe_webhook_secret", "paddle_webhook_secret", "creem_webhook_secret",
		"stripe_secret_key", "stripe_api_url", "paddle_api_key", "paddle_environment", "creem_api_key", "creem_api_url"}, keys)

	none, err := config.Load(nil, config.Options{Env: env})
	require.NoError(t, err)
	require.Empty(t, none.Providers, "no facts: no provider setting read")
}

// TestHTTPAddrDefaults: billing web listens on every interface unless
// told; billing dev (Options.HTTPAddr) on loopback, and a variable or a
// flag still overrides it.
func TestHTTPAddrDefaults(t *testing.T) {
	t.Parallel()
	web, err := config.Load(nil, config.Options{Providers: facts, Env: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, ":8080", web.HTTPAddr)
	dev, err := config.Load(nil, config.Options{Providers: facts, Env: map[string]string{}, HTTPAddr: config.DevHTTPAddr})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", dev.HTTPAddr)
	env, err := config.Load(nil, config.Options{Providers: facts, Env: map[string]string{"BILLING_HTTP_ADDR": ":9000"}, HTTPAddr: config.DevHTTPAddr})
	require.NoError(t, err)
	require.Equal(t, ":9000", env.HTTPAddr)
	fs := pflag.NewFlagSet("dev", pflag.ContinueOnError)
	config.BindFlags(fs)
	require.NoError(t, fs.Parse([]string{"--http-addr", "0.0.0.0:9001"}))
	flag, err := config.Load(fs, config.Options{Providers: facts, Env: map[string]string{}, HTTPAddr: config.DevHTTPAddr})
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0:9001", flag.HTTPAddr)
}

// TestTimeZoneErrorSaysItOnce: the error names the zone once, with what
// is wanted instead.
func TestTimeZoneErrorSaysItOnce(t *testing.T) {
	t.Parallel()
	_, err := config.Load(nil, config.Options{Providers: facts, Env: map[string]string{"BILLING_SERVICE_DAY_TZ": "Mars/Olympus"}})
	require.Error(t, err)
	require.Equal(t, 1, strings.Count(err.Error(), "unknown time zone"), err.Error())
	require.Equal(t, 1, strings.Count(err.Error(), "Mars/Olympus"), err.Error())
	require.Contains(t, err.Error(), "service_day_tz")
}

func TestEventsSettings(t *testing.T) {
	t.Parallel()
	c, err := config.Load(nil, config.Options{Env: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, c.EventsTimeout)
	require.Equal(t, []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour,
		10 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour, 14 * time.Hour},
		c.EventsRetrySchedule, "the default is the documented three-day schedule")

	c, err = config.Load(nil, config.Options{Env: map[string]string{
		"BILLING_EVENTS_TIMEOUT": "2s", "BILLING_EVENTS_RETRY_SCHEDULE": " 1s, 2s,2s ,2s,500ms",
	}})
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, c.EventsTimeout)
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 500 * time.Millisecond},
		c.EventsRetrySchedule)

	for _, bad := range []struct{ key, val string }{
		{config.KeyEventsTimeout, "0s"},
		{config.KeyEventsTimeout, "-1s"},
		{config.KeyEventsTimeout, "soon"},
		{config.KeyEventsRetrySchedule, ""},
		{config.KeyEventsRetrySchedule, "  "},
		{config.KeyEventsRetrySchedule, "1s,,2s"},
		{config.KeyEventsRetrySchedule, "1s,0s"},
		{config.KeyEventsRetrySchedule, "1s,-2s"},
		{config.KeyEventsRetrySchedule, "1s,5 minutes"},
		{config.KeyEventsRetrySchedule, "1s,"},
	} {
		_, err := config.Load(nil, config.Options{Env: map[string]string{"BILLING_" + strings.ToUpper(bad.key): bad.val}})
		var ce *config.Error
		require.ErrorAs(t, err, &ce, "%s=%q", bad.key, bad.val)
		require.Equal(t, bad.key, ce.Key, "%s=%q", bad.key, bad.val)
		require.Contains(t, err.Error(), "BILLING_"+strings.ToUpper(bad.key))
		require.NotContains(t, err.Error(), "\n", "one line")
	}
}
