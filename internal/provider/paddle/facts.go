package paddle

import (
	"strings"

	"github.com/fibe-dev/billing/internal/provider"
)

// Facts implements provider.Provider. Paddle takes no idempotency key.
func (d *Driver) Facts() provider.Facts {
	return provider.Facts{
		Name: Name,
		IDs: []provider.IDPrefix{
			{Prefix: "txn_", Names: "transaction"},
			{Prefix: "adj_", Names: "refund adjustment"},
			{Prefix: ChargebackID(""), Names: "the chargeback of a transaction"},
		},
		PaymentObject: []string{"data", "id"}, // the transaction
		States:        States,
		Settings:      settings,
	}
}

// Paddle's API base URLs.
const (
	SandboxURL    = "https://sandbox-api.paddle.com"
	ProductionURL = "https://api.paddle.com"
)

// settings are Paddle's configuration keys. Its API is named by an
// environment (paddle_environment: sandbox, production or, for tests, a
// base URL); an SKU may name a catalogue price (paddle_price_id) that
// checkouts then use instead of a price made from the order's snapshot.
var settings = provider.Settings{
	WebhookSecret: "paddle_webhook_secret",
	APIKey:        "paddle_api_key",
	APIURL:        "paddle_environment", APIURLDefault: "production",
	URLOf:       EnvironmentURL,
	CatalogueID: "paddle_price_id",
}

// EnvironmentURL is the API base URL paddle_environment names: sandbox,
// production ("" too), or any other value as the URL itself.
func EnvironmentURL(env string) string {
	switch strings.ToLower(strings.TrimSpace(env)) {
	case "sandbox":
		return SandboxURL
	case "production", "":
		return ProductionURL
	}
	return env
}
