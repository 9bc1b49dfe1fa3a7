package devcheckout

import (
	"context"
	"strings"

	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/provider"
)

// Path is where `billing dev` serves its simulated hosted checkout page
// (Handler); the order id follows.
const Path = "/dev/checkout/"

// Simulated is `billing dev`'s stand-in for a provider without an API key:
// its checkout URL is a local page, clearly marked as a simulation, whose
// Pay button sends the provider's signed completed-payment webhook. Only
// `billing dev` and tests make one.
type Simulated struct{ BaseURL string }

// Available implements checkout.Opener: a simulated page always opens.
func (Simulated) Available(provider.Capability) error { return nil }

// OpenCheckout returns the local page of the order; it never fails.
func (s Simulated) OpenCheckout(_ context.Context, r provider.CheckoutRequest) (*provider.Session, error) {
	return &provider.Session{ID: provider.SimulatedCheckout + r.OrderRef(), URL: strings.TrimRight(s.BaseURL, "/") + Path + r.OrderRef()}, nil
}

// WithSimulated returns openers with every provider of names that cannot
// open checkouts given the simulated page at baseURL.
func WithSimulated(openers map[string]checkout.Opener, names []string, baseURL string) map[string]checkout.Opener {
	out := make(map[string]checkout.Opener, len(names))
	for _, name := range names {
		if o := openers[name]; o != nil && o.Available(provider.Checkouts) == nil {
			out[name] = o
			continue
		}
		out[name] = Simulated{BaseURL: baseURL}
	}
	return out
}
