// Package providertest is what the provider drivers' tests share: header
// and fuzzing helpers that state, once, what every driver's signature
// parsing and event reading must hold, and StartFake, every provider's
// fake API on one server.
package providertest

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/platform/hmacsig"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/creem/creemfake"
	"github.com/fibe-dev/billing/internal/provider/paddle/paddlefake"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripefake"
)

// Header is an http.Header with name set to value (nothing when value is "").
func Header(name, value string) http.Header {
	h := http.Header{}
	if value != "" {
		h.Set(name, value)
	}
	return h
}

// FuzzBody and FuzzSecret are what the fuzz targets sign; SignedAt when.
var (
	FuzzBody = []byte(`{"id":"evt_fuzz","type":"checkout.session.completed"}`)
	SignedAt = time.Unix(1_700_000_000, 0)
)

// FuzzSecret signs FuzzBody.
const FuzzSecret = "whsec_fuzz"

// CheckHeaderParse is what a timestamped header's parse must hold, for
// any input: a signature error, or one spelling per instant and 1 to
// provider.MaxSignatures 32-byte signatures.
func CheckHeaderParse(t *testing.T, ts provider.Timestamp, sigs [][]byte, err error) {
	if err != nil {
		RequireSignatureError(t, err)
		return
	}
	require.GreaterOrEqual(t, ts.Unix, int64(0))
	require.Equal(t, strconv.FormatInt(ts.Unix, 10), ts.Literal, "one spelling per instant")
	require.NotEmpty(t, sigs)
	require.LessOrEqual(t, len(sigs), provider.MaxSignatures)
	for _, s := range sigs {
		require.Len(t, s, 32)
	}
}

// RequireSignatureError fails unless err is a missing or malformed header.
func RequireSignatureError(t *testing.T, err error) {
	require.True(t, errors.Is(err, provider.ErrMissingSignature) || errors.Is(err, provider.ErrMalformedSignature), err)
}

// AcceptedOnlyWithMAC: whatever the header value, p (its secret
// FuzzSecret) accepts FuzzBody at SignedAt only when value carries want,
// the true MAC.
func AcceptedOnlyWithMAC(t *testing.T, p provider.Provider, header, value string, want []byte) {
	if p.Verify(Header(header, value), FuzzBody, SignedAt) == nil {
		require.Contains(t, strings.ToLower(value), hex.EncodeToString(want))
	}
}

// FuzzEvent fuzzes p's Parse from its completed-payment event: whatever
// the body, Parse reads a well-formed event or refuses it as malformed.
func FuzzEvent(f *testing.F, p provider.Provider) {
	f.Add(providerevents.CompletedEventAt(p.Name(), "evt_seed", 42, 999, "usd", SignedAt))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := p.Parse(body)
		if err != nil {
			require.ErrorIs(t, err, provider.ErrMalformedPayload)
			return
		}
		if ev.Refused != "" {
			require.Nil(t, ev.Payment, "a refused event applies nothing")
			require.Nil(t, ev.Reversal, "a refused event applies nothing")
		}
		require.Equal(t, p.Name(), ev.Provider)
		require.NoError(t, provider.CheckText("id", ev.ID))
		require.NoError(t, provider.CheckText("type", ev.Type))
		if pay := ev.Payment; pay != nil {
			require.Positive(t, pay.OrderID)
			require.GreaterOrEqual(t, pay.Amount, int64(0))
			require.Len(t, pay.Currency, 3)
		}
	})
}

// Paddle's published signature example (paddle-go-sdk/v4
// example_webhook_verifier_test.go): a real secret, header and body,
// signed at PaddleExampleSignedAt.
const (
	PaddleExampleSignature = `ts=1710929255;h1=6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8`
	PaddleExamplePayload   = `{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}`
	PaddleExampleSecret    = `pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr`
)

// PaddleExampleSignedAt is when Paddle's example was signed.
var PaddleExampleSignedAt = time.Unix(1710929255, 0)

// RequireIs fails unless err is want; a nil want is no error.
func RequireIs(t *testing.T, err, want error) {
	t.Helper()
	if want == nil {
		require.NoError(t, err)
		return
	}
	require.ErrorIs(t, err, want)
}

// StartFake starts one server faking every provider's API (each
// provider's fake from its folder: their paths do not overlap); Close it
// when done.
func StartFake() *fakeapi.Server {
	return fakeapi.Start(stripefake.Routes, paddlefake.Routes, creemfake.Routes)
}

// Fake is StartFake, stopped with the test.
func Fake(t *testing.T) *fakeapi.Server {
	fake := StartFake()
	t.Cleanup(fake.Close)
	return fake
}

// Case is an event body and what p must read from it: its payment, or
// its refund or dispute (neither: an event only acknowledged), or Err.
type Case struct {
	Name     string
	Body     string
	ID       string // the event id, when checked
	Payment  *provider.Payment
	Reversal *provider.Reversal
	Err      error
}

// RequireParse checks p's Parse against each case.
func RequireParse(t *testing.T, p provider.Provider, cases []Case) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			ev, err := p.Parse([]byte(c.Body))
			if c.Err != nil && err == nil && errors.Is(c.Err, provider.ErrMalformedPayload) {
				// A readable envelope whose object is malformed: claimed
				// and refused with its reason, nothing to apply.
				require.NotEmpty(t, ev.Refused, "neither refused at the door nor as an outcome")
				require.Nil(t, ev.Payment)
				require.Nil(t, ev.Reversal)
				return
			}
			if c.Err != nil {
				require.ErrorIs(t, err, c.Err)
				return
			}
			require.Empty(t, ev.Refused)
			require.NoError(t, err)
			require.Equal(t, p.Name(), ev.Provider)
			if c.ID != "" {
				require.Equal(t, c.ID, ev.ID)
			}
			require.Equal(t, c.Payment, ev.Payment)
			require.Equal(t, c.Reversal, ev.Reversal)
		})
	}
}

// Malformed are cases of bodies p must refuse, by name.
func Malformed(bodies map[string]string) []Case {
	out := make([]Case, 0, len(bodies))
	for name, body := range bodies {
		out = append(out, Case{Name: name, Body: body, Err: provider.ErrMalformedPayload})
	}
	return out
}

// FuzzTimestampedHeader fuzzes a timestamped signature header (Stripe's,
// Paddle's), seeded with value, a header signing FuzzBody at SignedAt
// with FuzzSecret: whatever the input, parse gives a signature error or a
// well-formed header, and p (its secret FuzzSecret) accepts FuzzBody only
// under the MAC of "<timestamp><join><body>".
func FuzzTimestampedHeader(f *testing.F, p provider.Provider, header, value, join string,
	parse func(string) (provider.Timestamp, [][]byte, error)) {
	f.Add(value)
	f.Fuzz(func(t *testing.T, value string) {
		ts, sigs, err := parse(value)
		CheckHeaderParse(t, ts, sigs, err)
		if err == nil {
			AcceptedOnlyWithMAC(t, p, header, value, hmacsig.Sum(FuzzSecret, ts.Literal+join, FuzzBody))
		}
	})
}

// CheckoutRequest is the checkout of order for the 999-cent SKU mana_1000,
// its catalogue id at the provider catalogueID ("" for none).
func CheckoutRequest(order int64, catalogueID string) provider.CheckoutRequest {
	return provider.CheckoutRequest{OrderID: order, SKU: "mana_1000", ProductName: "1000 Mana", CatalogueID: catalogueID,
		Amount: 999, Currency: "usd", SuccessURL: "https://example.test/ok", CancelURL: "https://example.test/cancel"}
}
