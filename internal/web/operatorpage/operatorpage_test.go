package operatorpage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider/drivers"
)

// A provider id is tried first at the provider its prefix names.
func TestProvidersByPrefix(t *testing.T) {
	t.Parallel()
	for id, want := range map[string][]string{
		"pi_123":             {"stripe", "paddle", "creem"},
		"txn_01h":            {"paddle", "stripe", "creem"},
		"adj_01h":            {"paddle", "stripe", "creem"},
		"chargeback:txn_01h": {"paddle", "stripe", "creem"},
		"ord_9":              {"creem", "stripe", "paddle"},
		"ch_1":               {"stripe", "creem", "paddle"},
		"charge:ch_1":        {"stripe", "paddle", "creem"},
		"something-else":     {"stripe", "paddle", "creem"},
	} {
		require.Equal(t, want, providers(drivers.New(nil), id), id)
	}
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	got, err := parseSince("2026-11-01")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), got)
	got, err = parseSince("")
	require.NoError(t, err)
	require.True(t, got.IsZero())
	_, err = parseSince("last week")
	require.Error(t, err)
}

// Ids in paths are canonical decimals, as in the API.
func TestPositive(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{"7": true, "07": false, "+7": false, "0": false, "-1": false, "x": false} {
		_, ok := positive(s)
		require.Equal(t, want, ok, s)
	}
}
