package webhook

import (
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/devwebhook"
	"github.com/fibe-dev/billing/internal/hmacsig"
)

// The fuzz targets run over their seeds (testdata/fuzz/<name>) as ordinary
// tests; `go test -fuzz FuzzStripeHeader ./webhook` explores further.

var fuzzBody = []byte(`{"id":"evt_fuzz","type":"checkout.session.completed"}`)

const fuzzSecret = "whsec_fuzz"

func checkHeaderParse(t *testing.T, ts Timestamp, sigs [][]byte, err error) {
	if err != nil {
		require.True(t, errors.Is(err, ErrMissingSignature) || errors.Is(err, ErrMalformedSignature), err)
		return
	}
	require.GreaterOrEqual(t, ts.Unix, int64(0))
	require.Equal(t, itoa(ts.Unix), ts.Literal, "one spelling per instant")
	require.NotEmpty(t, sigs)
	require.LessOrEqual(t, len(sigs), maxSignatures)
	for _, s := range sigs {
		require.Len(t, s, 32)
	}
}

// acceptedOnlyWithMAC: whatever the header, Verify succeeds only when the
// header carries the true MAC of the body.
func acceptedOnlyWithMAC(t *testing.T, v Verifier, h string, value string, want []byte) {
	err := v.Verify(header(h, value), fuzzBody, time.Unix(1_700_000_000, 0))
	if err == nil {
		require.Contains(t, strings.ToLower(value), hex.EncodeToString(want))
	}
}

func FuzzStripeHeader(f *testing.F) {
	_, v := devwebhook.SignStripe(fuzzSecret, fuzzBody, time.Unix(1_700_000_000, 0))
	f.Add(v)
	f.Fuzz(func(t *testing.T, value string) {
		ts, sigs, err := ParseStripeHeader(value)
		checkHeaderParse(t, ts, sigs, err)
		if err == nil {
			acceptedOnlyWithMAC(t, StripeVerifier{Secrets: []string{fuzzSecret}}, HeaderStripe, value,
				hmacsig.Sum(fuzzSecret, ts.Literal+".", fuzzBody))
		}
	})
}

func FuzzPaddleHeader(f *testing.F) {
	_, v := devwebhook.SignPaddle(fuzzSecret, fuzzBody, time.Unix(1_700_000_000, 0))
	f.Add(v)
	f.Fuzz(func(t *testing.T, value string) {
		ts, sigs, err := ParsePaddleHeader(value)
		checkHeaderParse(t, ts, sigs, err)
		if err == nil {
			acceptedOnlyWithMAC(t, PaddleVerifier{Secrets: []string{fuzzSecret}}, HeaderPaddle, value,
				hmacsig.Sum(fuzzSecret, ts.Literal+":", fuzzBody))
		}
	})
}

func FuzzCreemHeader(f *testing.F) {
	_, v := devwebhook.SignCreem(fuzzSecret, fuzzBody)
	f.Add(v)
	f.Fuzz(func(t *testing.T, value string) {
		sig, err := ParseCreemHeader(value)
		if err != nil {
			require.True(t, errors.Is(err, ErrMissingSignature) || errors.Is(err, ErrMalformedSignature), err)
			return
		}
		require.Len(t, sig, 32)
		acceptedOnlyWithMAC(t, CreemVerifier{Secrets: []string{fuzzSecret}}, HeaderCreem, value, hmacsig.Sum(fuzzSecret, "", fuzzBody))
	})
}

func fuzzEvent(f *testing.F, provider string) {
	f.Add(devwebhook.CompletedEventAt(provider, "evt_seed", 42, 999, "usd", time.Unix(1_700_000_000, 0)))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := ParseEvent(provider, body)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformedPayload)
			return
		}
		require.Equal(t, provider, ev.Provider)
		require.NoError(t, checkText("id", ev.ID))
		require.NoError(t, checkText("type", ev.Type))
		if p := ev.Payment; p != nil {
			require.Positive(t, p.OrderID)
			require.GreaterOrEqual(t, p.Amount, int64(0))
			require.Len(t, p.Currency, 3)
		}
	})
}

func FuzzStripeEvent(f *testing.F) { fuzzEvent(f, "stripe") }
func FuzzPaddleEvent(f *testing.F) { fuzzEvent(f, "paddle") }
func FuzzCreemEvent(f *testing.F)  { fuzzEvent(f, "creem") }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
