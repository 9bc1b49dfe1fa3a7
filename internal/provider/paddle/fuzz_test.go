package paddle_test

import (
	"testing"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/paddle"
	"github.com/fibe-dev/billing/internal/provider/paddle/paddleevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

// The fuzz targets run over their seeds (testdata/fuzz/<name>) as ordinary
// tests; `go test -fuzz FuzzPaddleHeader ./internal/provider/paddle`
// explores further.

func FuzzPaddleHeader(f *testing.F) {
	_, v := paddleevents.Sign(providertest.FuzzSecret, providertest.FuzzBody, providertest.SignedAt)
	d := paddle.New(provider.Options{WebhookSecrets: []string{providertest.FuzzSecret}})
	providertest.FuzzTimestampedHeader(f, d, paddle.SignatureHeader, v, ":", paddle.ParseHeader)
}

func FuzzPaddleEvent(f *testing.F) { providertest.FuzzEvent(f, paddle.New(provider.Options{})) }
