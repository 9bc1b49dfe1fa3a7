// Package config loads the billing system's typed configuration.
//
// Precedence is flags > environment (BILLING_*) > an optional billing.yaml >
// built-in defaults, so that every command works without a file. Validation
// returns one line naming the offending key; nothing here panics.
//
// It parses into plain values and imports no package of billing but
// internal/provider, which knows no provider: each provider's settings are
// data its driver's facts declare (provider.Settings), which Load is given
// (Options.Providers), and config fills the drivers' provider.Options.
// cmd/billing is the only importer, and turns a Config into the packages'
// own Options (the catalogue's SKUs, the Marquee plans, the batch
// completion mode).
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/fibe-dev/billing/internal/provider"
)

// Keys, as they appear in billing.yaml; the environment variable is
// BILLING_ followed by the key in upper case.
const (
	KeyDatabaseURL      = "database_url"
	KeyHTTPAddr         = "http_addr"
	KeyEnforcerSchedule = "enforcer_schedule"
	KeyServiceDayTZ     = "service_day_tz"
	KeyRiverUIUser      = "riverui_user"
	KeyRiverUIPassword  = "riverui_password"
	KeySparksPerMana    = "sparks_per_mana"
	KeyLowBalanceDays   = "low_balance_days"
	KeyShutdownTimeout  = "shutdown_timeout"
	KeyLogFormat        = "log_format"
	KeyJobTimeout       = "job_timeout"
	KeyMetricsAddr      = "metrics_addr"
	KeyRescueAfter      = "rescue_stuck_jobs_after"
	KeyFundAhead        = "fund_ahead"
	KeyBatchComplete    = "batch_complete"
	KeySKUs             = "skus"
	KeyPlans            = "plans"
	// Each provider's keys (its webhook secrets, API key and API URL) are
	// its facts' (provider.Settings); these are the checkouts' and
	// reconciliation's own.
	KeyCheckoutSuccessURL = "checkout_success_url"
	KeyCheckoutCancelURL  = "checkout_cancel_url"
	KeyReconcileSchedule  = "reconcile_schedule"
	KeyReconcileTimeout   = "reconcile_timeout"
	KeyRateLimit          = "rate_limit"
	// The outgoing events' delivery: one request's bound, and the waits
	// after each failed attempt.
	KeyEventsTimeout       = "events_timeout"
	KeyEventsRetrySchedule = "events_retry_schedule"
)

// Default URLs and addresses.
const (
	DefaultCheckoutURL = "http://localhost:8080/"
	// DefaultHTTPAddr is where `billing web` listens unless told; DevHTTPAddr
	// is `billing dev`'s default, loopback only: dev serves an
	// unauthenticated simulated checkout that mints Mana.
	DefaultHTTPAddr      = ":8080"
	DevHTTPAddr          = "127.0.0.1:8080"
	defaultReconcileSpec = "@hourly"
	// DefaultEventsRetrySchedule is package events' DefaultSchedule, as
	// this package (which imports none of billing's) writes it: 11
	// retries, 12 attempts over about three days.
	DefaultEventsRetrySchedule = "5s,5m,30m,2h,5h,10h,10h,10h,10h,10h,14h"
)

// Config is the validated configuration of every billing command.
type Config struct {
	DatabaseURL      string
	HTTPAddr         string
	MetricsAddr      string // where `billing worker` serves /metrics and /healthz; empty: nowhere
	EnforcerSpec     string
	EnforcerSchedule cron.Schedule
	ServiceDayTZ     *time.Location
	RiverUIUser      string
	RiverUIPassword  string
	SparksPerMana    int64
	// LowBalanceDays is the threshold of wallet.low_balance: a player whose
	// Sparks pay for fewer service days of their running Marquees is low.
	LowBalanceDays  int64
	ShutdownTimeout time.Duration
	LogFormat       string // "json", "text" or "" (auto: text on a terminal)
	// FundAhead, when positive, makes the periodic sweep also fund the next
	// service day once now is that close to midnight, so that a Marquee
	// whose owner has the Sparks never answers 402 between midnight and the
	// first sweep of the new day. 0 (the default) funds each day once it has
	// begun, as docs/contract.md describes.
	FundAhead time.Duration
	// JobTimeout bounds one run of a job; RescueAfter is when River's
	// rescuer retries a job left running by a killed worker. Every money job
	// is idempotent, so rescuing early is safe and keeps recovery fast.
	JobTimeout  time.Duration
	RescueAfter time.Duration
	// BatchComplete is how a group-committed batch of fund_day jobs is
	// completed: pilot (one statement, River's unstable pilot API; the
	// default) or per_job (river.JobCompleteTx per job, the fallback if a
	// River upgrade breaks the pilot's contract test). cmd/billing checks
	// the mode (package rivercomplete knows them).
	BatchComplete string
	// SKUs and Plans are billing.yaml's catalogue and Marquee plans; nil
	// when the file defines none (the built-in ones then apply).
	SKUs  map[string]SKU
	Plans map[string]Plan
	// Providers are the drivers' options by provider name, one for each
	// of Options.Providers: webhook signing secrets, API key and API URL,
	// read from the keys its facts declare. A provider without a key
	// cannot be chosen for a checkout, nor reconciled.
	Providers map[string]provider.Options
	// Where the provider's hosted checkout sends the customer afterwards.
	CheckoutSuccessURL string
	CheckoutCancelURL  string
	// ReconcileSchedule is when the leader lists recent provider events to
	// recover lost webhooks (default hourly).
	ReconcileSpec     string
	ReconcileSchedule cron.Schedule
	// ReconcileTimeout bounds one reconciliation run (default 10m). River's
	// rescuer leaves a running job alone until its own timeout has passed,
	// so a run on a worker killed mid-listing blocks the next run (one per
	// provider at a time) for this long plus rescue_stuck_jobs_after.
	ReconcileTimeout time.Duration
	// RateLimit bounds each player's requests to the API (BILLING_RATE_LIMIT).
	RateLimit RateLimit
	// EventsTimeout bounds one delivery request of an outgoing event
	// (default 10s); EventsRetrySchedule is the wait after each failed
	// attempt, the delivery failing after its last (default about three
	// days). Tests and the lab shorten both.
	EventsTimeout       time.Duration
	EventsRetrySchedule []time.Duration
}

// Error is a configuration error naming the key at fault.
type Error struct {
	Key string
	Err error
}

func (e *Error) Error() string {
	return fmt.Sprintf("config: %s (BILLING_%s): %v", e.Key, strings.ToUpper(e.Key), e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrMissing is wrapped by an *Error for a required key that has no value.
var ErrMissing = errors.New("is required")

// BindFlags declares the flags shared by every command on fs.
func BindFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "path to billing.yaml (optional)")
	fs.String("database-url", "", "PostgreSQL URL (env BILLING_DATABASE_URL)")
	fs.String("http-addr", "", "HTTP listen address (env BILLING_HTTP_ADDR, default "+DefaultHTTPAddr+"; billing dev: "+DevHTTPAddr+")")
}

// Options tune Load.
type Options struct {
	// RequireDatabase makes an empty database URL an error.
	RequireDatabase bool
	// Env replaces os.LookupEnv-based environment lookups (tests).
	Env map[string]string
	// HTTPAddr replaces DefaultHTTPAddr as the listen address used when no
	// flag, variable or file sets one (billing dev: DevHTTPAddr).
	HTTPAddr string
	// Providers are the facts of the providers whose settings Load reads:
	// cmd/billing and the lab pass every driver's (drivers.Facts()).
	// Without them Load reads no provider setting, and Config.Providers
	// is empty.
	Providers []provider.Facts
}

// Load reads flags (may be nil), the environment and the optional file.
func Load(fs *pflag.FlagSet, opts Options) (*Config, error) {
	v := viper.New()
	setDefaults(v)
	setProviderDefaults(v, opts.Providers)
	if opts.HTTPAddr != "" {
		v.SetDefault(KeyHTTPAddr, opts.HTTPAddr)
	}
	if err := bindEnv(v, opts.Env, envKeys); err != nil {
		return nil, err
	}
	if err := bindEnv(v, opts.Env, providerKeys(opts.Providers)); err != nil {
		return nil, err
	}
	if fs != nil {
		for key, flag := range map[string]string{KeyDatabaseURL: "database-url", KeyHTTPAddr: "http-addr"} {
			if f := fs.Lookup(flag); f != nil {
				if err := v.BindPFlag(key, f); err != nil {
					return nil, fmt.Errorf("config: bind flag %s: %w", flag, err)
				}
			}
		}
		if f := fs.Lookup("config"); f != nil && f.Value.String() != "" {
			v.SetConfigFile(f.Value.String())
			if err := v.ReadInConfig(); err != nil {
				return nil, &Error{Key: "config", Err: err}
			}
		}
	}
	return decode(v, opts)
}

// LoadFile is Load with an explicit file path and environment, for tests and tools.
func LoadFile(path string, opts Options) (*Config, error) {
	fs := pflag.NewFlagSet("config", pflag.ContinueOnError)
	BindFlags(fs)
	if path != "" {
		_ = fs.Set("config", path)
	}
	return Load(fs, opts)
}

func setDefaults(v *viper.Viper) {
	v.SetDefault(KeyHTTPAddr, DefaultHTTPAddr)
	v.SetDefault(KeyEnforcerSchedule, "*/5 * * * *")
	v.SetDefault(KeyServiceDayTZ, "UTC")
	v.SetDefault(KeySparksPerMana, "1")
	v.SetDefault(KeyLowBalanceDays, "3")
	v.SetDefault(KeyShutdownTimeout, "25s")
	v.SetDefault(KeyJobTimeout, "1m")
	v.SetDefault(KeyRescueAfter, "5m")
	v.SetDefault(KeyFundAhead, "0s")
	v.SetDefault(KeyBatchComplete, "pilot")
	v.SetDefault(KeyCheckoutSuccessURL, DefaultCheckoutURL)
	v.SetDefault(KeyCheckoutCancelURL, DefaultCheckoutURL)
	v.SetDefault(KeyReconcileSchedule, defaultReconcileSpec)
	v.SetDefault(KeyReconcileTimeout, "10m")
	v.SetDefault(KeyRateLimit, DefaultRateLimit)
	v.SetDefault(KeyEventsTimeout, "10s")
	v.SetDefault(KeyEventsRetrySchedule, DefaultEventsRetrySchedule)
}

var envKeys = []string{
	KeyDatabaseURL, KeyHTTPAddr, KeyEnforcerSchedule, KeyServiceDayTZ,
	KeyRiverUIUser,
	KeyRiverUIPassword, KeySparksPerMana, KeyShutdownTimeout, KeyLogFormat,
	KeyJobTimeout, KeyRescueAfter, KeyMetricsAddr, KeyFundAhead,
	KeyBatchComplete, KeyLowBalanceDays,
	KeyCheckoutSuccessURL, KeyCheckoutCancelURL, KeyReconcileSchedule, KeyReconcileTimeout,
	KeyRateLimit, KeyEventsTimeout, KeyEventsRetrySchedule,
}

func bindEnv(v *viper.Viper, env map[string]string, keys []string) error {
	for _, key := range keys {
		name := "BILLING_" + strings.ToUpper(key)
		if env != nil {
			if val, ok := env[name]; ok {
				v.Set(key, val)
			}
			continue
		}
		if err := v.BindEnv(key, name); err != nil {
			return fmt.Errorf("config: bind env %s: %w", name, err)
		}
	}
	return nil
}

func decode(v *viper.Viper, opts Options) (*Config, error) {
	c := &Config{
		DatabaseURL:     strings.TrimSpace(v.GetString(KeyDatabaseURL)),
		HTTPAddr:        strings.TrimSpace(v.GetString(KeyHTTPAddr)),
		MetricsAddr:     strings.TrimSpace(v.GetString(KeyMetricsAddr)),
		EnforcerSpec:    strings.TrimSpace(v.GetString(KeyEnforcerSchedule)),
		RiverUIUser:     v.GetString(KeyRiverUIUser),
		RiverUIPassword: v.GetString(KeyRiverUIPassword),
		LogFormat:       strings.ToLower(strings.TrimSpace(v.GetString(KeyLogFormat))),
	}
	for _, step := range []func() error{
		func() error { return c.decodeAddresses(opts.RequireDatabase) },
		func() error { return c.decodeRuntime(v) },
		c.validateAccess,
		func() error { return c.decodeProviderSettings(v, opts.Providers) },
		func() error { return c.decodeCatalogue(v, opts.Providers) },
		func() error { return c.decodeProviders(v) },
		func() error { return c.decodeEvents(v) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	var err error
	if c.RateLimit, err = ParseRateLimit(v.GetString(KeyRateLimit)); err != nil {
		return nil, &Error{Key: KeyRateLimit, Err: err}
	}
	return c, nil
}

// decodeAddresses checks the URLs and listen addresses decode read.
func (c *Config) decodeAddresses(requireDatabase bool) error {
	if err := c.validateDatabase(requireDatabase); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return &Error{Key: KeyHTTPAddr, Err: fmt.Errorf("cannot parse %q: %w", c.HTTPAddr, err)}
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return &Error{Key: KeyMetricsAddr, Err: fmt.Errorf("cannot parse %q: %w", c.MetricsAddr, err)}
		}
	}
	return nil
}

// decodeRuntime reads the schedule, the service day's zone, the conversion
// rate and the durations that bound shutdowns, jobs and funding ahead.
func (c *Config) decodeRuntime(v *viper.Viper) error {
	sched, err := ParseSchedule(c.EnforcerSpec)
	if err != nil {
		return &Error{Key: KeyEnforcerSchedule, Err: err}
	}
	c.EnforcerSchedule = sched
	if c.ServiceDayTZ, err = time.LoadLocation(strings.TrimSpace(v.GetString(KeyServiceDayTZ))); err != nil {
		// LoadLocation's own error already names the zone ("unknown time zone X").
		return &Error{Key: KeyServiceDayTZ, Err: fmt.Errorf("want an IANA time zone such as Europe/Berlin: %w", err)}
	}
	if c.SparksPerMana, err = parsePositive(v.GetString(KeySparksPerMana)); err != nil {
		return &Error{Key: KeySparksPerMana, Err: err}
	}
	if c.LowBalanceDays, err = parsePositive(v.GetString(KeyLowBalanceDays)); err != nil {
		return &Error{Key: KeyLowBalanceDays, Err: err}
	}
	if c.ShutdownTimeout, err = time.ParseDuration(v.GetString(KeyShutdownTimeout)); err != nil || c.ShutdownTimeout <= 0 {
		return &Error{Key: KeyShutdownTimeout, Err: fmt.Errorf("want a positive duration such as 25s, got %q", v.GetString(KeyShutdownTimeout))}
	}
	return c.decodeJobTimes(v)
}

// decodeJobTimes reads how long a job may run, when a stuck one is
// rescued, and how far ahead funding runs.
func (c *Config) decodeJobTimes(v *viper.Viper) error {
	var err error
	if c.JobTimeout, err = positiveDuration(v, KeyJobTimeout); err != nil {
		return err
	}
	if c.RescueAfter, err = positiveDuration(v, KeyRescueAfter); err != nil {
		return err
	}
	if c.FundAhead, err = time.ParseDuration(v.GetString(KeyFundAhead)); err != nil || c.FundAhead < 0 || c.FundAhead > 12*time.Hour {
		return &Error{Key: KeyFundAhead, Err: fmt.Errorf("want a duration from 0s (off) to 12h such as 15m, got %q", v.GetString(KeyFundAhead))}
	}
	c.BatchComplete = strings.TrimSpace(v.GetString(KeyBatchComplete))
	if c.RescueAfter < c.JobTimeout {
		return &Error{Key: KeyRescueAfter, Err: fmt.Errorf("must be at least job_timeout (%v)", c.JobTimeout)}
	}
	return nil
}

// validateAccess checks the log format and the River UI's credentials.
func (c *Config) validateAccess() error {
	switch c.LogFormat {
	case "", "json", "text":
	default:
		return &Error{Key: KeyLogFormat, Err: fmt.Errorf("want json or text, got %q", c.LogFormat)}
	}
	if c.RiverUIUser != "" && c.RiverUIPassword == "" || c.RiverUIUser == "" && c.RiverUIPassword != "" {
		return &Error{Key: KeyRiverUIPassword, Err: errors.New("riverui_user and riverui_password must be set together")}
	}
	return nil
}

// decodeProviders reads the checkout return URLs and the reconciliation
// schedule.
func (c *Config) decodeProviders(v *viper.Viper) error {
	var err error
	if c.CheckoutSuccessURL, err = httpURL(KeyCheckoutSuccessURL, v.GetString(KeyCheckoutSuccessURL)); err != nil {
		return err
	}
	if c.CheckoutCancelURL, err = httpURL(KeyCheckoutCancelURL, v.GetString(KeyCheckoutCancelURL)); err != nil {
		return err
	}
	c.ReconcileSpec = strings.TrimSpace(v.GetString(KeyReconcileSchedule))
	sched, err := ParseSchedule(c.ReconcileSpec)
	if err != nil {
		return &Error{Key: KeyReconcileSchedule, Err: err}
	}
	c.ReconcileSchedule = sched
	c.ReconcileTimeout, err = positiveDuration(v, KeyReconcileTimeout)
	return err
}

// decodeEvents reads the outgoing events' request timeout and retry
// schedule.
func (c *Config) decodeEvents(v *viper.Viper) error {
	var err error
	if c.EventsTimeout, err = positiveDuration(v, KeyEventsTimeout); err != nil {
		return err
	}
	if c.EventsRetrySchedule, err = ParseRetrySchedule(v.GetString(KeyEventsRetrySchedule)); err != nil {
		return &Error{Key: KeyEventsRetrySchedule, Err: err}
	}
	return nil
}

// ParseRetrySchedule parses a comma-separated list of positive durations
// such as "5s,5m,30m": the wait after each failed attempt, in turn.
func ParseRetrySchedule(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("want a comma-separated list of positive durations such as 5s,5m,30m, got an empty one")
	}
	var out []time.Duration
	for i, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		d, err := time.ParseDuration(p)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("want a comma-separated list of positive durations such as 5s,5m,30m; wait %d is %q", i+1, p)
		}
		out = append(out, d)
	}
	return out, nil
}

// httpURL is val, an http(s) URL, without its surrounding space and
// trailing slashes.
func httpURL(key, val string) (string, error) {
	u := strings.TrimRight(strings.TrimSpace(val), "/")
	if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return "", &Error{Key: key, Err: fmt.Errorf("want an http(s) URL, got %q", val)}
	}
	return u, nil
}

func (c *Config) validateDatabase(required bool) error {
	if c.DatabaseURL == "" {
		if required {
			return &Error{Key: KeyDatabaseURL, Err: ErrMissing}
		}
		return nil
	}
	u, err := url.Parse(c.DatabaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" && u.Query().Get("host") == "" {
		return &Error{Key: KeyDatabaseURL, Err: errors.New("want a postgres:// URL with a host")}
	}
	return nil
}

// SKU is one entry of billing.yaml's skus: a Mana pack, what it costs in a
// provider currency (minor units; a 3-letter code, stored lower case) and
// the Mana it grants, with its optional product name and provider
// catalogue ids.
type SKU struct {
	Amount   int64  `mapstructure:"amount"`
	Currency string `mapstructure:"currency"`
	Mana     int64  `mapstructure:"mana"`
	Name     string `mapstructure:"name"`
	// CatalogueIDs are the SKU's ids in the providers' catalogues, by
	// provider name, each read from the key its facts declare
	// (provider.Settings.CatalogueID); nil when it names none.
	CatalogueIDs map[string]string `mapstructure:"-"`
}

// Plan is one entry of billing.yaml's plans: a Marquee's price per
// service day in Sparks.
type Plan struct {
	DailySparks int64 `mapstructure:"daily_sparks"`
}

func (c *Config) decodeCatalogue(v *viper.Viper, providers []provider.Facts) error {
	if v.IsSet(KeySKUs) {
		c.SKUs = map[string]SKU{}
		if err := v.UnmarshalKey(KeySKUs, &c.SKUs); err != nil {
			return &Error{Key: KeySKUs, Err: err}
		}
	}
	for _, name := range sortedKeys(c.SKUs) {
		s := c.SKUs[name]
		s.Currency = strings.ToLower(strings.TrimSpace(s.Currency))
		if s.Amount <= 0 || s.Mana <= 0 || len(s.Currency) != 3 {
			return &Error{Key: KeySKUs + "." + name, Err: errors.New("needs a positive amount, a positive mana and a 3-letter currency")}
		}
		var err error
		if s.CatalogueIDs, err = catalogueIDs(v, name, providers); err != nil {
			return err
		}
		c.SKUs[name] = s
	}
	if v.IsSet(KeyPlans) {
		c.Plans = map[string]Plan{}
		if err := v.UnmarshalKey(KeyPlans, &c.Plans); err != nil {
			return &Error{Key: KeyPlans, Err: err}
		}
	}
	for _, name := range sortedKeys(c.Plans) {
		if c.Plans[name].DailySparks <= 0 {
			return &Error{Key: KeyPlans + "." + name, Err: errors.New("needs a positive daily_sparks")}
		}
	}
	return nil
}

// ParseSchedule parses a standard 5-field cron spec or a descriptor such as
// "@every 1m" or "@hourly".
func ParseSchedule(spec string) (cron.Schedule, error) {
	if spec == "" {
		return nil, ErrMissing
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("cannot parse cron spec %q: %w", spec, err)
	}
	return s, nil
}

func parsePositive(s string) (int64, error) {
	var n int64
	if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n <= 0 || fmt.Sprint(n) != strings.TrimSpace(s) {
		return 0, fmt.Errorf("want a positive integer, got %q", s)
	}
	return n, nil
}

func positiveDuration(v *viper.Viper, key string) (time.Duration, error) {
	d, err := time.ParseDuration(v.GetString(key))
	if err != nil || d <= 0 {
		return 0, &Error{Key: key, Err: fmt.Errorf("want a positive duration such as 30s, got %q", v.GetString(key))}
	}
	return d, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
