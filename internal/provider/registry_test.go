package provider_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
)

// named is a driver that only has a name: what the registry reads.
type named struct {
	provider.Provider
	name string
}

func (n named) Name() string { return n.name }

// verifier is the one method a consumer might declare.
type verifier interface {
	Verify(h http.Header, body []byte, now time.Time) error
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := provider.NewRegistry(named{name: provider.Paddle}, named{name: provider.Stripe})
	require.Equal(t, []string{provider.Paddle, provider.Stripe}, r.Names(), "registration order")
	p, ok := r.Get(provider.Stripe)
	require.True(t, ok)
	require.Equal(t, provider.Stripe, p.Name())
	_, ok = r.Get(provider.Creem)
	require.False(t, ok)
	require.Len(t, provider.Select[verifier](r), 2)
	require.Len(t, provider.Select[interface{ Other() }](r), 0, "selects only what implements T")

	var none *provider.Registry
	require.Empty(t, none.Names())
	_, ok = none.Get(provider.Stripe)
	require.False(t, ok)
	require.Empty(t, provider.Select[verifier](none))
}

func TestRegistryRefusesWiringMistakes(t *testing.T) {
	t.Parallel()
	require.Panics(t, func() { provider.NewRegistry(named{name: provider.Stripe}, named{name: provider.Stripe}) })
	require.Panics(t, func() { provider.NewRegistry(named{name: "paypal"}) })
}

func TestSupport(t *testing.T) {
	t.Parallel()
	none := provider.Support{Provider: "x"}
	for _, c := range []provider.Capability{provider.Webhooks, provider.Checkouts, provider.Listing, provider.Refunds} {
		require.ErrorIs(t, none.Check(c), provider.ErrNotConfigured, c.String())
	}
	all := provider.Support{Provider: "x", Secrets: true, APIKey: true}
	for _, c := range []provider.Capability{provider.Webhooks, provider.Checkouts, provider.Listing, provider.Refunds} {
		require.NoError(t, all.Check(c), c.String())
	}
	limited := provider.Support{Provider: "x", NoListing: true, NoRefunds: true}
	require.ErrorIs(t, limited.Check(provider.Listing), provider.ErrNoListing, "said before the missing key")
	require.ErrorIs(t, limited.Check(provider.Refunds), provider.ErrUnsupported)
	require.ErrorIs(t, all.Check(provider.Capability(99)), provider.ErrUnsupported)
	require.True(t, provider.Known(provider.Creem))
	require.False(t, provider.Known("paypal"))
}
