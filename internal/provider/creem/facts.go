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
	}
}
