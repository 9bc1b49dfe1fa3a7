// Package checkout opens the payment provider's hosted checkout for an
// order, for exactly the order's pricing snapshot, through the provider's
// driver (package provider).
//
// The order row is the referee. The order is committed first (keyed by the
// client's Idempotency-Key, so a retry finds it), then the provider is
// called with no transaction open, then its checkout id and URL are stored
// by a conditional UPDATE ... WHERE checkout_id IS NULL: at most one
// provider checkout is ever stored and one URL ever handed out per order.
// Drivers that can (Stripe) send an idempotency key derived from the order
// id, so a retry reopens the same checkout.
//
// The driver retries timeouts, 429 and 5xx inside its bounded budget, then
// reports a *provider.DownError (the API answers 503 with Retry-After; the
// order stays pending and the client's retry resumes it). A provider's 4xx
// is a *provider.RejectedError carrying the provider's message.
package checkout

import (
	"context"
	"net/http"

	"github.com/fibe-dev/billing/internal/platform/errcode"
	"github.com/fibe-dev/billing/internal/provider"
)

// ErrProviderUnavailable: the provider cannot open checkouts here (it has
// no API key configured). Compare with errors.Is.
var ErrProviderUnavailable = errcode.New("checkout: provider not configured", errcode.Answer{
	Status: http.StatusUnprocessableEntity, Code: "provider_unavailable",
	Detail: "this payment provider is not available: it has no API key configured"})

// Opener opens one provider's hosted checkouts (a provider driver, or
// `billing dev`'s simulated page, package devcheckout).
type Opener interface {
	// Available is nil when the opener can open checkouts
	// (provider.Checkouts).
	Available(c provider.Capability) error
	OpenCheckout(ctx context.Context, r provider.CheckoutRequest) (*provider.Session, error)
}
