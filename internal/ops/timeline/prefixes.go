package timeline

import (
	"slices"
	"strings"

	"github.com/fibe-dev/billing/internal/provider"
)

// idPrefixes are how the ids `billing explain payment` and the operator
// page take begin, per provider: the one list both read to tell which
// provider an id belongs to. Stripe's charges and Creem's checkouts share
// "ch_"; event ids ("evt_") are every provider's, so they name none.
var idPrefixes = []struct{ prefix, provider string }{
	{"cs_", provider.Stripe},     // Checkout Session
	{"pi_", provider.Stripe},     // PaymentIntent
	{"ch_", provider.Stripe},     // charge
	{"charge:", provider.Stripe}, // the refund fact of a charge
	{"re_", provider.Stripe},     // the refund of an unapplied payment
	{"dp_", provider.Stripe},     // dispute
	{"du_", provider.Stripe},     // dispute
	{"txn_", provider.Paddle},    // transaction
	{"adj_", provider.Paddle},    // refund adjustment
	{"chargeback:", provider.Paddle},
	{"ord_", provider.Creem}, // order
	{"ch_", provider.Creem},  // checkout
}

// ProvidersOf returns the providers whose ids may begin as id does, in
// the order of provider.Names: one, several (a shared prefix), or none
// (an event id, or a prefix no provider uses).
func ProvidersOf(id string) []string {
	var out []string
	for _, name := range provider.Names() {
		for _, p := range idPrefixes {
			if p.provider == name && strings.HasPrefix(id, p.prefix) && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// ValidID returns ErrInvalidID for an id no provider can have sent (NUL,
// invalid UTF-8), else nil.
func ValidID(id string) error { return checkText("payment id", id) }
