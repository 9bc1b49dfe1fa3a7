package creem_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/platform/hmacsig"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/creem"
	"github.com/fibe-dev/billing/internal/provider/creem/creemevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

// The fuzz targets run over their seeds (testdata/fuzz/<name>) as ordinary
// tests; `go test -fuzz FuzzCreemHeader ./internal/provider/creem`
// explores further.

func FuzzCreemHeader(f *testing.F) {
	_, v := creemevents.Sign(providertest.FuzzSecret, providertest.FuzzBody, time.Time{})
	f.Add(v)
	d := creem.New(provider.Options{WebhookSecrets: []string{providertest.FuzzSecret}})
	f.Fuzz(func(t *testing.T, value string) {
		sig, err := creem.ParseHeader(value)
		if err != nil {
			providertest.RequireSignatureError(t, err)
			return
		}
		require.Len(t, sig, 32)
		providertest.AcceptedOnlyWithMAC(t, d, creem.SignatureHeader, value, hmacsig.Sum(providertest.FuzzSecret, "", providertest.FuzzBody))
	})
}

func FuzzCreemEvent(f *testing.F) { providertest.FuzzEvent(f, creem.New(provider.Options{})) }
