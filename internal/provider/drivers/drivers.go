// Package drivers builds the registry of every payment-provider driver
// billing has. Adding a provider is adding its folder
// (internal/provider/<name>: its driver implementing provider.Provider,
// its facts, its event builder and its fake API) and one line in New; the
// contract test in this package then runs against it (decision 0015).
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

// Facts are every driver's facts (provider.Facts: id prefixes, where a
// stored payload names the payment, checkout keys, status tables), for
// the programs that need them without a configured registry: the audit,
// billing explain, the lab. They do not depend on options.
func Facts() []provider.Facts { return New(nil).Facts() }
