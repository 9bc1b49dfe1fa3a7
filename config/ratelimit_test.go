package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/config"
)

func TestParseRateLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]config.RateLimit{
		"off":                   {},
		" OFF ":                 {},
		"50/s":                  {PerSecond: 50, Burst: 50},
		"50/s burst 100":        {PerSecond: 50, Burst: 100},
		"60/m":                  {PerSecond: 1, Burst: 1},
		"0.5/s concurrent 2":    {PerSecond: 0.5, Burst: 1, Concurrent: 2},
		config.DefaultRateLimit: {PerSecond: 200, Burst: 400, Concurrent: 8},
	} {
		got, err := config.ParseRateLimit(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "50", "50/h", "-1/s", "0/s", "abc/s", "50/s burst", "50/s burst 0",
		"50/s burst -3", "50/s burst x", "50/s bursts 10", "50/s concurrent 1.5", "1e9/s"} {
		_, err := config.ParseRateLimit(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestRateLimitFromEnvironment(t *testing.T) {
	t.Parallel()
	c, err := config.LoadFile("", config.Options{Providers: facts, Env: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, config.RateLimit{PerSecond: 200, Burst: 400, Concurrent: 8}, c.RateLimit, "the default")
	c, err = config.LoadFile("", config.Options{Providers: facts, Env: map[string]string{"BILLING_RATE_LIMIT": "off"}})
	require.NoError(t, err)
	require.Equal(t, config.RateLimit{}, c.RateLimit)
	_, err = config.LoadFile("", config.Options{Providers: facts, Env: map[string]string{"BILLING_RATE_LIMIT": "fast"}})
	var cerr *config.Error
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, config.KeyRateLimit, cerr.Key)
}
