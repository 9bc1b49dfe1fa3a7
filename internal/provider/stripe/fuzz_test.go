package stripe_test

import (
	"testing"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/stripe"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
)

// The fuzz targets run over their seeds (testdata/fuzz/<name>) as ordinary
// tests; `go test -fuzz FuzzStripeHeader ./internal/provider/stripe`
// explores further.

func FuzzStripeHeader(f *testing.F) {
	_, v := stripeevents.Sign(providertest.FuzzSecret, providertest.FuzzBody, providertest.SignedAt)
	d := stripe.New(provider.Options{WebhookSecrets: []string{providertest.FuzzSecret}})
	providertest.FuzzTimestampedHeader(f, d, stripe.SignatureHeader, v, ".", stripe.ParseHeader)
}

func FuzzStripeEvent(f *testing.F) { providertest.FuzzEvent(f, stripe.New(provider.Options{})) }
