package creem_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/creem"
	"github.com/fibe-dev/billing/internal/provider/creem/creemevents"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","eventType":"x"}`)
	_, good := creemevents.Sign("c1", body, time.Time{})
	d := creem.New(provider.Options{WebhookSecrets: []string{"c1"}})
	for _, c := range []struct {
		name, value string
		body        []byte
		want        error
	}{
		{"valid", good, body, nil},
		{"valid upper-case", strings.ToUpper(good), body, nil},
		{"tampered", good, []byte(`{"id":"evt_2","eventType":"x"}`), provider.ErrBadSignature},
		{"missing", "", body, provider.ErrMissingSignature},
		{"not hex", "zz" + good[2:], body, provider.ErrMalformedSignature},
		{"short", good[:62], body, provider.ErrMalformedSignature},
		{"with prefix", "sha256=" + good, body, provider.ErrMalformedSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := d.Verify(providertest.Header("creem-signature", c.value), c.body, time.Time{})
			providertest.RequireIs(t, err, c.want)
		})
	}
}

// Creem's signature, computed here independently of our signer: the hex
// HMAC-SHA256 of the raw body, whenever it was made.
func TestSignedByHMAC(t *testing.T) {
	t.Parallel()
	body := providerevents.CompletedEvent("creem", "evt_creem1", 7, 3999, "USD")
	m := hmac.New(sha256.New, []byte("whsec_test_creem"))
	m.Write(body)
	d := creem.New(provider.Options{WebhookSecrets: []string{"whsec_test_creem"}})
	h := providertest.Header("creem-signature", hex.EncodeToString(m.Sum(nil)))
	require.NoError(t, d.Verify(h, body, time.Now()))
	require.NoError(t, d.Verify(h, body, time.Now().Add(24*time.Hour)), "Creem signs no timestamp")
}
