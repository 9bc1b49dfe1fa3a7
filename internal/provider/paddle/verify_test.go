package paddle_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	paddleapi "github.com/PaddleHQ/paddle-go-sdk/v4"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/paddle"
	"github.com/fibe-dev/billing/internal/provider/paddle/paddleevents"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"event_id":"evt_1","event_type":"x"}`)
	at := time.Unix(1_700_000_000, 0)
	_, good := paddleevents.Sign("p1", body, at)
	sig := good[strings.Index(good, "h1=")+3:]
	d := paddle.New(provider.Options{WebhookSecrets: []string{"p0", "p1"}})
	for _, c := range []struct {
		name, value string
		now         time.Time
		want        error
	}{
		{"valid", good, at, nil},
		{"valid with spaces", fmt.Sprintf(" ts=%d; h1=%s ", at.Unix(), sig), at, nil},
		{"two h1", fmt.Sprintf("ts=%d;h1=%s;h1=%s", at.Unix(), strings.Repeat("0", 64), sig), at, nil},
		{"stale", good, at.Add(301 * time.Second), provider.ErrStaleSignature},
		{"future", good, at.Add(-301 * time.Second), provider.ErrStaleSignature},
		{"stripe syntax", fmt.Sprintf("t=%d,v1=%s", at.Unix(), sig), at, provider.ErrMalformedSignature},
		{"comma separated", fmt.Sprintf("ts=%d,h1=%s", at.Unix(), sig), at, provider.ErrMalformedSignature},
		{"ts with a plus sign", fmt.Sprintf("ts=+%d;h1=%s", at.Unix(), sig), at, provider.ErrMalformedSignature},
		{"ts with a leading zero", fmt.Sprintf("ts=0%d;h1=%s", at.Unix(), sig), at, provider.ErrMalformedSignature},
		{"missing", "", at, provider.ErrMissingSignature},
		{"wrong", fmt.Sprintf("ts=%d;h1=%s", at.Unix(), strings.Repeat("ab", 32)), at, provider.ErrBadSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := d.Verify(providertest.Header(paddle.SignatureHeader, c.value), body, c.now)
			providertest.RequireIs(t, err, c.want)
		})
	}
}

// Signatures made by our Paddle signer are accepted by the Paddle SDK's own
// verifier, and a tampered body is refused by it.
func TestSignerAcceptedByPaddleSDK(t *testing.T) {
	t.Parallel()
	const secret = "pdl_ntfset_test_paddle"
	body := providerevents.CompletedEvent("paddle", "evt_01paddle", 7, 999, "USD")
	h, v := paddleevents.Sign(secret, body, time.Now())
	verifier := paddleapi.NewWebhookVerifier(secret, paddleapi.VerifierWithTimestampTolerance(5*time.Minute))

	req, err := http.NewRequest(http.MethodPost, "http://example.test/webhooks/paddle", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set(h, v)
	ok, err := verifier.Verify(req)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, paddle.New(provider.Options{WebhookSecrets: []string{secret}}).Verify(req.Header, body, time.Now()))

	tampered := bytes.Replace(body, []byte(`"999"`), []byte(`"1"`), 1)
	req, err = http.NewRequest(http.MethodPost, "http://example.test/webhooks/paddle", bytes.NewReader(tampered))
	require.NoError(t, err)
	req.Header.Set(h, v)
	ok, err = verifier.Verify(req)
	require.NoError(t, err)
	require.False(t, ok)
}

// Paddle's own example verifies, at its time only, and over its body only.
func TestExampleVectorVerifies(t *testing.T) {
	t.Parallel()
	signedAt, body := providertest.PaddleExampleSignedAt, []byte(providertest.PaddleExamplePayload)
	h := providertest.Header(paddle.SignatureHeader, providertest.PaddleExampleSignature)
	d := paddle.New(provider.Options{WebhookSecrets: []string{providertest.PaddleExampleSecret}})
	require.NoError(t, d.Verify(h, body, signedAt.Add(10*time.Second)))
	require.ErrorIs(t, d.Verify(h, body, time.Now()), provider.ErrStaleSignature)
	require.ErrorIs(t, d.Verify(h, append(body, ' '), signedAt), provider.ErrBadSignature)
}
