package creem

import "github.com/fibe-dev/billing/internal/provider"

// checkoutKey: Creem takes no idempotency key; its checkout carries this
// request id instead.
var checkoutKey = provider.CheckoutKey{Field: "request_id", Prefix: "order_"}

// Facts implements provider.Provider.
func (d *Driver) Facts() provider.Facts {
	return provider.Facts{
		Name: Name,
		IDs: []provider.IDPrefix{
			{Prefix: "ord_", Names: "order"},
			{Prefix: "ch_", Names: "checkout"},
		},
		PaymentObject: []string{"object", "id"}, // the checkout
		CheckoutKey:   checkoutKey,
		States:        States,
		Settings:      settings,
	}
}

// settings are Creem's configuration keys. Creem prices by product: an
// SKU sold through Creem names its product (creem_product_id).
var settings = provider.Settings{
	WebhookSecret: "creem_webhook_secret",
	APIKey:        "creem_api_key",
	APIURL:        "creem_api_url", APIURLDefault: DefaultAPIURL,
	CatalogueID: "creem_product_id",
}
