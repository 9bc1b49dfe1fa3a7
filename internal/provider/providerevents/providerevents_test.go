package providerevents_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

func TestSignRefusesUnknownProviders(t *testing.T) {
	t.Parallel()
	_, _, err := providerevents.Sign("paypal", "k", nil, time.Unix(1_700_000_000, 0))
	require.ErrorIs(t, err, provider.ErrUnknown)
	require.Nil(t, providerevents.CompletedEvent("paypal", "x", 1, 1, "usd"))
	require.Empty(t, providerevents.OrderPaymentID("paypal", "1"))
}

// Every provider billing has has a builder: a provider added without one
// cannot be played by billing dev nor driven by the lab.
func TestEveryProviderHasABuilder(t *testing.T) {
	t.Parallel()
	for _, name := range provider.Names() {
		b, ok := providerevents.Of(name)
		require.True(t, ok, name)
		require.NotEmpty(t, b.Completed("evt_1", 1, 999, "usd", time.Now()), name)
		h, v, err := providerevents.Sign(name, "k", []byte("{}"), time.Now())
		require.NoError(t, err)
		require.NotEmpty(t, h)
		require.NotEmpty(t, v)
	}
}
