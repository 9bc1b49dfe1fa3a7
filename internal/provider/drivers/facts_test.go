package drivers_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
)

// An id's prefix names its provider, several when providers share it,
// none for an event id or an unknown prefix: as the drivers' facts say.
func TestProvidersOf(t *testing.T) {
	t.Parallel()
	reg := drivers.New(nil)
	for id, want := range map[string][]string{
		"cs_test_1": {"stripe"}, "pi_1": {"stripe"}, "re_1": {"stripe"}, "dp_1": {"stripe"}, "du_1": {"stripe"},
		"charge:ch_1": {"stripe"}, "txn_01h": {"paddle"}, "adj_1": {"paddle"}, "chargeback:txn_1": {"paddle"},
		"ord_1": {"creem"}, "ch_1": {"stripe", "creem"}, "evt_1": nil, "something": nil, "": nil,
	} {
		require.Equal(t, want, reg.ProvidersOf(id), id)
	}
	require.Nil(t, (*provider.Registry)(nil).ProvidersOf("cs_1"), "a nil registry knows no provider")
}

// Every driver states its facts: its name, the ids it gives, where a
// stored completed payment names the payment's object, its status table.
func TestEveryDriverStatesItsFacts(t *testing.T) {
	t.Parallel()
	facts := drivers.Facts()
	require.Len(t, facts, len(provider.Names()))
	for i, f := range facts {
		require.Equal(t, provider.Names()[i], f.Name)
		require.NotEmpty(t, f.IDs, f.Name)
		require.NotEmpty(t, f.PaymentObject, f.Name)
		require.Equal(t, f.Name, f.States.Provider)
		require.NotEmpty(t, f.States.Events, f.Name)
		// Its settings: the keys config reads into its Options, the
		// default naming an http(s) API.
		s := f.Settings
		require.Len(t, s.Keys(), 3, "%s declares its webhook secret's, API key's and API URL's keys", f.Name)
		for _, key := range append(s.Keys(), s.CatalogueID) {
			require.True(t, key == "" || strings.HasPrefix(key, f.Name+"_"), "%s's key %q begins with its name", f.Name, key)
		}
		u, err := url.Parse(s.BaseURL(s.APIURLDefault))
		require.NoError(t, err, f.Name)
		require.Equal(t, "https", u.Scheme, "%s's default API URL", f.Name)
	}
}

// The checkout keys are the forms the drivers send (stored nowhere: the
// timeline shows them, so they must not change).
func TestCheckoutKeys(t *testing.T) {
	t.Parallel()
	reg := drivers.New(nil)
	for name, want := range map[string]string{
		provider.Stripe: "billing-checkout-order-42", provider.Paddle: "", provider.Creem: "order_42"} {
		p, ok := reg.Get(name)
		require.True(t, ok)
		require.Equal(t, want, p.Facts().CheckoutKey.For(42), name)
	}
}
