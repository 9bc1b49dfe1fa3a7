// Package drivers builds the registry of every payment-provider driver
// billing has. Adding a provider is adding its package
// (internal/provider/<name>, implementing provider.Provider) and one line
// in New; the contract test in this package then runs against it.
package drivers

import (
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/creem"
	"github.com/fibe-dev/billing/internal/provider/paddle"
	"github.com/fibe-dev/billing/internal/provider/stripe"
)

// New returns the registry of every driver, each built from its options
// in opts by provider name (a missing entry is a driver with none: it
// refuses deliveries and API calls as not configured).
func New(opts map[string]provider.Options) *provider.Registry {
	return provider.NewRegistry(
		stripe.New(opts[provider.Stripe]),
		paddle.New(opts[provider.Paddle]),
		creem.New(opts[provider.Creem]),
	)
}

// StateTables are every driver's table of the refund and dispute statuses
// it documents, for the audit to read stored payloads through.
func StateTables() []provider.StateTable {
	return []provider.StateTable{stripe.States, paddle.States, creem.States}
}
