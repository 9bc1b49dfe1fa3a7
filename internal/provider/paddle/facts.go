package paddle

import "github.com/fibe-dev/billing/internal/provider"

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
	}
}
