package provider

import (
	"slices"
	"strings"
)

// Facts are what the rest of billing knows of one provider, as data: its
// driver gives them (Provider.Facts) and consumers ask the Registry for
// them instead of spelling a provider's ids, payload shapes or keys
// themselves. Adding a provider adds its facts with its driver.
type Facts struct {
	// Name is one of Names.
	Name string
	// IDs are how the ids billing keeps of the provider's objects begin
	// (payments and their aliases, refunds, disputes, the reversal ids
	// billing derives), each with what it names. Event ids are not here:
	// "evt_" is every provider's, so it names none.
	IDs []IDPrefix
	// PaymentObject is the JSON path, from the root of a stored
	// completed-payment event, of the id of the provider object one
	// payment is (Stripe's Checkout Session, Paddle's transaction, Creem's
	// checkout): the audit's invariant 10 reads it.
	PaymentObject []string
	// CheckoutKey is what makes the provider's checkout of one order
	// once; its zero value: the driver sends none.
	CheckoutKey CheckoutKey
	// States is the driver's table of refund and dispute statuses.
	States StateTable
	// Settings are the provider's configuration keys.
	Settings Settings
}

// IDPrefix is how one kind of a provider's ids begins.
type IDPrefix struct {
	Prefix string
	Names  string // what an id so begun is, for people
}

// CheckoutKey is the form of the key a driver sends with the checkout of
// one order: derived from the order id only, so every attempt for one
// order carries it.
type CheckoutKey struct {
	// Field is where the key is sent: "Idempotency-Key" (a header), or
	// the request field that carries it.
	Field string
	// Prefix precedes the order's decimal id.
	Prefix string
}

// For is the key of order's checkout ("" when the driver sends none).
func (k CheckoutKey) For(order int64) string {
	if k.Field == "" {
		return ""
	}
	return k.Prefix + CheckoutRequest{OrderID: order}.OrderRef()
}

// Facts are every registered driver's facts, in registration order.
func (r *Registry) Facts() []Facts {
	if r == nil {
		return nil
	}
	out := make([]Facts, 0, len(r.names))
	for _, name := range r.names {
		out = append(out, r.byName[name].Facts())
	}
	return out
}

// ProvidersOf returns the registered providers whose ids may begin as id
// does, in registration order: one, several (a shared prefix, such as
// Stripe's charges and Creem's checkouts, "ch_"), or none (an event id,
// or a prefix no provider uses).
func (r *Registry) ProvidersOf(id string) []string {
	var out []string
	for _, f := range r.Facts() {
		if slices.ContainsFunc(f.IDs, func(p IDPrefix) bool { return strings.HasPrefix(id, p.Prefix) }) {
			out = append(out, f.Name)
		}
	}
	return out
}

// SimulatedCheckout begins the checkout id of a checkout no provider
// opened: billing dev's simulated page, which stands in for a provider
// without an API key.
const SimulatedCheckout = "dev_"

// Settings are a provider's configuration keys, as billing.yaml spells
// them (the environment's variable is BILLING_ and the key in upper
// case): the configuration reads each provider's from its facts into its
// driver's Options, and its catalogue id from each of billing.yaml's
// skus. A key is a stored format: it never changes once released.
type Settings struct {
	// WebhookSecret is the key of the webhook signing secrets, a
	// comma-separated list (several during a rotation).
	WebhookSecret string
	// APIKey is the key of the API key (Options.APIKey).
	APIKey string
	// APIURL is the key that names the API's base URL (Options.APIURL),
	// and APIURLDefault its value when unset.
	APIURL, APIURLDefault string
	// URLOf, when set, makes the APIURL key's value into the base URL
	// (Paddle's environment: sandbox, production or a URL); nil: the
	// value is the URL.
	URLOf func(value string) string `json:"-"`
	// CatalogueID is the key, in an SKU of billing.yaml's skus, of the
	// SKU's id in the provider's catalogue ("": the provider has none).
	CatalogueID string
}

// Keys are s's configuration keys (the catalogue id's aside: it is a key
// of an SKU), those set.
func (s Settings) Keys() []string {
	var keys []string
	for _, k := range []string{s.WebhookSecret, s.APIKey, s.APIURL} {
		if k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// BaseURL is the API's base URL that the APIURL key's value names.
func (s Settings) BaseURL(value string) string {
	if s.URLOf != nil {
		return s.URLOf(value)
	}
	return value
}
