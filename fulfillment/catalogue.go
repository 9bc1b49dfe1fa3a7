package fulfillment

// SKU is a purchasable Mana pack: what it costs in a provider currency and
// how much Mana it grants. cmd/billing makes billing.yaml's skus into SKUs;
// an order snapshots one at checkout.
type SKU struct {
	Amount   int64  // minor units, e.g. cents
	Currency string // ISO 4217, lower case
	Mana     int64
	// Name is the product name shown on the provider's checkout (default:
	// the SKU's key).
	Name string
	// CatalogueIDs are the SKU's ids in the providers' catalogues, by
	// provider name, read from the billing.yaml key each provider's facts
	// declare (provider.Settings.CatalogueID). What one means is its
	// driver's: Creem's product (Creem prices by product: required to
	// sell the SKU through Creem), Paddle's catalogue price (optional: used
	// instead of a non-catalogue price made from the snapshot).
	CatalogueIDs map[string]string
}

// ProductName is what the customer sees on the provider's page: Name, or
// else the SKU's key.
func (s SKU) ProductName(key string) string {
	if s.Name != "" {
		return s.Name
	}
	return key
}

// CatalogueID is the SKU's id in provider's catalogue ("" when it has
// none there).
func (s SKU) CatalogueID(name string) string { return s.CatalogueIDs[name] }

// DefaultSKUs is the built-in catalogue, used when billing.yaml defines
// none.
func DefaultSKUs() map[string]SKU {
	return map[string]SKU{
		"mana_1000": {Amount: 999, Currency: "usd", Mana: 1000},
		"mana_5000": {Amount: 3999, Currency: "usd", Mana: 5000},
	}
}
