package checkout

import (
	"context"
	"strings"
)

// SimulatedPath is where `billing dev` serves its simulated hosted checkout
// page; the order id follows.
const SimulatedPath = "/dev/checkout/"

// Simulated is `billing dev`'s stand-in for a provider without an API key:
// its checkout URL is a local page, clearly marked as a simulation, whose
// Pay button sends the provider's signed completed-payment webhook.
type Simulated struct{ BaseURL string }

// Open returns the local page of the order; it never fails.
func (s Simulated) Open(_ context.Context, r Request) (*Session, error) {
	return &Session{ID: "dev_" + r.orderRef(), URL: strings.TrimRight(s.BaseURL, "/") + SimulatedPath + r.orderRef()}, nil
}
