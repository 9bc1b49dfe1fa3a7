package stripe

import "github.com/fibe-dev/billing/internal/provider"

// checkoutKey is the Idempotency-Key of an order's Checkout Session.
var checkoutKey = provider.CheckoutKey{Field: "Idempotency-Key", Prefix: "billing-checkout-order-"}

// Facts implements provider.Provider.
func (d *Driver) Facts() provider.Facts {
	return provider.Facts{
		Name: Name,
		IDs: []provider.IDPrefix{
			{Prefix: "cs_", Names: "Checkout Session"},
			{Prefix: "pi_", Names: "PaymentIntent"},
			{Prefix: "ch_", Names: "charge"},
			{Prefix: "charge:", Names: "the refund fact of a charge"},
			{Prefix: "re_", Names: "the refund of an unapplied payment"},
			{Prefix: "dp_", Names: "dispute"},
			{Prefix: "du_", Names: "dispute"},
		},
		PaymentObject: []string{"data", "object", "id"}, // the Checkout Session
		CheckoutKey:   checkoutKey,
		States:        States,
		Settings:      settings,
	}
}

// DefaultAPIURL is Stripe's API, the stripe_api_url key's default.
const DefaultAPIURL = "https://api.stripe.com"

// settings are Stripe's configuration keys; Stripe's catalogue is not
// used (a checkout prices its line from the order's snapshot).
var settings = provider.Settings{
	WebhookSecret: "stripe_webhook_secret",
	APIKey:        "stripe_secret_key",
	APIURL:        "stripe_api_url", APIURLDefault: DefaultAPIURL,
}
