package fibe_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fibe"
)

// newSecret is a fresh endpoint secret, as billing prints it.
func newSecret(t testing.TB) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

const testEventID = "evt_0123456789abcdef0123456789abcdef"

func testBody(id string) []byte {
	return []byte(`{"id":"` + id + `","type":"payment.refunded","api_version":"2026-12-01",` +
		`"created_at":"2026-12-01T10:00:00Z","player_id":123,"sequence":42,` +
		`"data":{"provider":"stripe","payment_id":"cs_test_1","order_id":9,"amount":999,"currency":"usd"}}`)
}

// signed is a delivery signed by the Standard Webhooks reference library
// with each of secrets (one signature per secret, as during a rotation).
func signed(t testing.TB, id string, at time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	var sigs []string
	for _, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		require.NoError(t, err)
		sig, err := wh.Sign(id, at, body)
		require.NoError(t, err)
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set(fibe.HeaderWebhookID, id)
	h.Set(fibe.HeaderWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(fibe.HeaderWebhookSignature, strings.Join(sigs, " "))
	return h
}

func verifier(t testing.TB, secret string, opts ...fibe.VerifierOption) *fibe.WebhookVerifier {
	t.Helper()
	v, err := fibe.NewWebhookVerifier(secret, opts...)
	require.NoError(t, err)
	return v
}

// TestVerifierAcceptsTheReferenceSignature: a delivery signed by the
// Standard Webhooks reference library verifies, and returns its event.
func TestVerifierAcceptsTheReferenceSignature(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	body := testBody(testEventID)
	h := signed(t, testEventID, time.Now(), body, secret)

	ref, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	require.NoError(t, ref.Verify(body, h), "the reference library refuses its own delivery")

	ev, err := verifier(t, secret).Verify(h, body)
	require.NoError(t, err)
	require.Equal(t, testEventID, ev.ID)
	require.Equal(t, fibe.EventPaymentRefunded, ev.Type)
	require.Equal(t, fibe.EventAPIVersion, ev.APIVersion)
	require.Equal(t, int64(123), ev.PlayerID)
	require.Equal(t, int64(42), ev.Sequence)
	require.Equal(t, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), ev.CreatedAt.UTC())
	data, err := ev.Decode()
	require.NoError(t, err)
	require.Equal(t, &fibe.PaymentRefundedData{Provider: "stripe", PaymentID: "cs_test_1", OrderID: 9, Amount: 999, Currency: "usd"}, data)
}

// TestVerifierRefuses: every change to a signed delivery, and every header
// out of its format, is refused with its error, and the reference library
// refuses the same deliveries (where it is as strict).
func TestVerifierRefuses(t *testing.T) {
	t.Parallel()
	secret, other := newSecret(t), newSecret(t)
	now := time.Now()
	body := testBody(testEventID)
	good := func() http.Header { return signed(t, testEventID, now, body, secret) }
	with := func(name, value string) http.Header { h := good(); h.Set(name, value); return h }
	without := func(name string) http.Header { h := good(); h.Del(name); return h }
	ts := strconv.FormatInt(now.Unix(), 10)
	otherID := "evt_ffffffffffffffffffffffffffffffff"

	for _, c := range []struct {
		name      string
		header    http.Header
		body      []byte
		want      error
		refStrict bool // the reference library refuses it too
	}{
		{"tampered body", good(), []byte(strings.Replace(string(body), "999", "9999", 1)), fibe.ErrSignatureMismatch, true},
		{"tampered id", with(fibe.HeaderWebhookID, otherID), body, fibe.ErrSignatureMismatch, true},
		{"tampered timestamp", with(fibe.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix()-1, 10)), body, fibe.ErrSignatureMismatch, true},
		{"wrong secret", signed(t, testEventID, now, body, other), body, fibe.ErrSignatureMismatch, true},
		{"too old", signed(t, testEventID, now.Add(-6*time.Minute), body, secret), body, fibe.ErrStaleTimestamp, true},
		{"too new", signed(t, testEventID, now.Add(6*time.Minute), body, secret), body, fibe.ErrStaleTimestamp, true},
		{"timestamp with a plus", with(fibe.HeaderWebhookTimestamp, "+"+ts), body, fibe.ErrMalformedHeader, false},
		{"timestamp with a space", with(fibe.HeaderWebhookTimestamp, " "+ts), body, fibe.ErrMalformedHeader, true},
		{"timestamp with a leading zero", with(fibe.HeaderWebhookTimestamp, "0"+ts), body, fibe.ErrMalformedHeader, false},
		{"timestamp as a float", with(fibe.HeaderWebhookTimestamp, "1.5e9"), body, fibe.ErrMalformedHeader, true},
		{"timestamp in milliseconds", with(fibe.HeaderWebhookTimestamp, strconv.FormatInt(now.UnixMilli(), 10)), body, fibe.ErrStaleTimestamp, true},
		{"negative timestamp", with(fibe.HeaderWebhookTimestamp, "-"+ts), body, fibe.ErrMalformedHeader, true},
		{"huge timestamp", with(fibe.HeaderWebhookTimestamp, "99999999999999999999"), body, fibe.ErrMalformedHeader, true},
		{"no id", without(fibe.HeaderWebhookID), body, fibe.ErrMissingHeader, true},
		{"no timestamp", without(fibe.HeaderWebhookTimestamp), body, fibe.ErrMissingHeader, true},
		{"no signature", without(fibe.HeaderWebhookSignature), body, fibe.ErrMissingHeader, true},
		{"empty signature", with(fibe.HeaderWebhookSignature, ""), body, fibe.ErrMissingHeader, true},
		{"signature without version", with(fibe.HeaderWebhookSignature, "abc"), body, fibe.ErrMalformedHeader, true},
		{"signature not base64", with(fibe.HeaderWebhookSignature, "v1,!!!"), body, fibe.ErrSignatureMismatch, true},
		{"only another version", with(fibe.HeaderWebhookSignature, "v2,"+strings.TrimPrefix(good().Get(fibe.HeaderWebhookSignature), "v1,")), body, fibe.ErrSignatureMismatch, true},
		{"id sent twice", func() http.Header { h := good(); h.Add(fibe.HeaderWebhookID, otherID); return h }(), body, fibe.ErrMalformedHeader, false},
		{"id with a space", with(fibe.HeaderWebhookID, "evt 1"), body, fibe.ErrMalformedHeader, true},
		{"body id differs", signed(t, otherID, now, body, secret), body, fibe.ErrIDMismatch, false},
		{"body not an event", signed(t, testEventID, now, []byte(`[1]`), secret), []byte(`[1]`), fibe.ErrMalformedEvent, false},
		{"body without type", signed(t, testEventID, now, []byte(`{"id":"`+testEventID+`","data":{}}`), secret),
			[]byte(`{"id":"` + testEventID + `","data":{}}`), fibe.ErrMalformedEvent, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ev, err := verifier(t, secret).Verify(c.header, c.body)
			require.ErrorIs(t, err, c.want)
			require.Nil(t, ev)
			for _, e := range []error{fibe.ErrMissingHeader, fibe.ErrMalformedHeader, fibe.ErrStaleTimestamp,
				fibe.ErrSignatureMismatch, fibe.ErrMalformedEvent, fibe.ErrIDMismatch} {
				if e != c.want {
					require.NotErrorIs(t, err, e, "one error, one cause")
				}
			}
			if c.refStrict {
				ref, err := standardwebhooks.NewWebhook(secret)
				require.NoError(t, err)
				require.Error(t, ref.Verify(c.body, c.header), "the reference library accepts it: the case tests nothing")
			}
		})
	}
}

// TestVerifierDuringRotation: billing signs with the old and the new secret
// while both are valid; a verifier with either accepts, one with neither
// refuses, and the order of the signatures does not matter.
func TestVerifierDuringRotation(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret_, stranger := newSecret(t), newSecret(t), newSecret(t)
	now := time.Now()
	body := testBody(testEventID)
	for _, h := range []http.Header{
		signed(t, testEventID, now, body, oldSecret, newSecret_),
		signed(t, testEventID, now, body, newSecret_, oldSecret),
	} {
		for _, s := range []string{oldSecret, newSecret_} {
			ev, err := verifier(t, s).Verify(h, body)
			require.NoError(t, err)
			require.Equal(t, testEventID, ev.ID)
		}
		_, err := verifier(t, stranger).Verify(h, body)
		require.ErrorIs(t, err, fibe.ErrSignatureMismatch)
	}
}

// TestVerifierTolerance: the tolerance is configurable, and the clock too.
func TestVerifierTolerance(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	body := testBody(testEventID)
	sent := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h := signed(t, testEventID, sent, body, secret)
	at := func(d time.Duration) fibe.VerifierOption {
		return fibe.WithWebhookClock(func() time.Time { return sent.Add(d) })
	}

	_, err := verifier(t, secret, at(5*time.Minute)).Verify(h, body)
	require.NoError(t, err, "exactly the default tolerance is within it")
	_, err = verifier(t, secret, at(5*time.Minute+time.Second)).Verify(h, body)
	require.ErrorIs(t, err, fibe.ErrStaleTimestamp)
	_, err = verifier(t, secret, at(-5*time.Minute-time.Second)).Verify(h, body)
	require.ErrorIs(t, err, fibe.ErrStaleTimestamp)
	_, err = verifier(t, secret, at(time.Hour), fibe.WithWebhookTolerance(2*time.Hour)).Verify(h, body)
	require.NoError(t, err)
	_, err = verifier(t, secret, at(time.Minute), fibe.WithWebhookTolerance(30*time.Second)).Verify(h, body)
	require.ErrorIs(t, err, fibe.ErrStaleTimestamp)
}

func TestNewWebhookVerifierRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "whsec_", "whsec_!!!", "c2VjcmV0", "whsec_c2VjcmV0=", "sk_live_abc"} {
		_, err := fibe.NewWebhookVerifier(s)
		require.ErrorIs(t, err, fibe.ErrInvalidSecret, "secret %q", s)
	}
}

// TestVerifierIsSafeForConcurrentUse: one verifier shared by goroutines
// verifying good and tampered deliveries gives each its own answer.
func TestVerifierIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	v := verifier(t, secret)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			id := fmt.Sprintf("evt_%032x", i)
			body := testBody(id)
			h := signed(t, id, time.Now(), body, secret)
			if i%2 == 1 {
				body = append(body[:len(body)-1:len(body)-1], ' ', '}')
			}
			ev, err := v.Verify(h, body)
			switch {
			case i%2 == 0 && (err != nil || ev.ID != id):
				errs <- fmt.Errorf("delivery %d: %v", i, err)
			case i%2 == 1 && !errors.Is(err, fibe.ErrSignatureMismatch):
				errs <- fmt.Errorf("tampered delivery %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestDecodeEveryType: each type's data decodes into its struct, a newer
// member is ignored, and an unknown type is ErrUnknownEventType.
func TestDecodeEveryType(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		typ  string
		data string
		want fibe.EventData
	}{
		{fibe.EventOrderFulfilled, `{"order_id":9,"sku":"mana_1000","provider":"stripe","payment_id":"cs_1","amount":999,"currency":"usd","mana_credited":1000,"wallet_transaction_id":31}`,
			&fibe.OrderFulfilledData{OrderID: 9, SKU: "mana_1000", Provider: "stripe", PaymentID: "cs_1", Amount: 999, Currency: "usd", ManaCredited: 1000, WalletTransactionID: 31}},
		{fibe.EventPaymentUnapplied, `{"provider":"paddle","payment_id":"txn_2","order_id":9,"amount":999,"currency":"usd","reason":"order already paid"}`,
			&fibe.PaymentUnappliedData{Provider: "paddle", PaymentID: "txn_2", OrderID: 9, Amount: 999, Currency: "usd", Reason: "order already paid"}},
		{fibe.EventPaymentRefunded, `{"provider":"creem","payment_id":"ord_3","order_id":9,"amount":999,"currency":"eur"}`,
			&fibe.PaymentRefundedData{Provider: "creem", PaymentID: "ord_3", OrderID: 9, Amount: 999, Currency: "eur"}},
		{fibe.EventReversalApplied, `{"provider":"stripe","payment_id":"cs_1","order_id":9,"reversal_id":"charge:ch_1","kind":"refund","state":"succeeded","amount":333,"currency":"usd","mana_clawed_back":334,"debt_opened":true}`,
			&fibe.ReversalAppliedData{Provider: "stripe", PaymentID: "cs_1", OrderID: 9, ReversalID: "charge:ch_1", Kind: fibe.ReversalRefund, State: "succeeded", Amount: 333, Currency: "usd", ManaClawedBack: 334, DebtOpened: true}},
		{fibe.EventReversalRefused, `{"provider":"stripe","event_id":"evt_1","payment_id":"cs_1","reason":"currency eur is not the payment's usd"}`,
			&fibe.ReversalRefusedData{Provider: "stripe", EventID: "evt_1", PaymentID: "cs_1", Reason: "currency eur is not the payment's usd"}},
		{fibe.EventDebtOpened, `{"order_id":9,"mana_opened":120,"mana_outstanding":120}`, &fibe.DebtOpenedData{OrderID: 9, ManaOpened: 120, ManaOutstanding: 120}},
		{fibe.EventDebtSettled, `{"mana_settled":100,"mana_outstanding":20}`, &fibe.DebtSettledData{ManaSettled: 100, ManaOutstanding: 20}},
		{fibe.EventDebtForgiven, `{"mana_forgiven":20}`, &fibe.DebtForgivenData{ManaForgiven: 20}},
		{fibe.EventMarqueeFunded, `{"marquee_id":42,"day":"2026-12-01","plan":"standard","sparks_debited":10,"paid_through":"2026-12-02T00:00:00Z"}`,
			&fibe.MarqueeFundedData{MarqueeID: 42, Day: "2026-12-01", Plan: "standard", SparksDebited: 10, PaidThrough: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}},
		{fibe.EventMarqueeUnfunded, `{"marquee_id":42,"day":"2026-12-02","plan":"standard","reason":"insufficient Sparks"}`,
			&fibe.MarqueeUnfundedData{MarqueeID: 42, Day: "2026-12-02", Plan: "standard", Reason: "insufficient Sparks"}},
		{fibe.EventWalletLowBalance, `{"sparks_balance":20,"sparks_per_day":10,"days_covered":2,"threshold_days":3}`,
			&fibe.WalletLowBalanceData{SparksBalance: 20, SparksPerDay: 10, DaysCovered: 2, ThresholdDays: 3}},
		{fibe.EventWalletBalanceRecovered, `{"sparks_balance":50,"sparks_per_day":10,"days_covered":5,"threshold_days":3,"added_later":true}`,
			&fibe.WalletBalanceRecoveredData{SparksBalance: 50, SparksPerDay: 10, DaysCovered: 5, ThresholdDays: 3}},
	} {
		ev := &fibe.Event{ID: testEventID, Type: c.typ, Data: []byte(c.data)}
		got, err := ev.Decode()
		require.NoError(t, err, c.typ)
		require.Equal(t, c.want, got, c.typ)
		require.Equal(t, c.typ, got.EventType())
	}
	require.Len(t, fibe.EventTypes(), 12)

	_, err := (&fibe.Event{ID: testEventID, Type: "invoice.paid", Data: []byte(`{}`)}).Decode()
	require.ErrorIs(t, err, fibe.ErrUnknownEventType)
	_, err = (&fibe.Event{ID: testEventID, Type: fibe.EventDebtOpened, Data: []byte(`{"order_id":"9"}`)}).Decode()
	require.Error(t, err, "a member of the wrong JSON type")
}

// FuzzVerifyHeaders: whatever the headers and body, Verify never panics,
// and it accepts only what the reference library also accepts (its
// timestamp check aside: the fuzzer's clock is fixed).
func FuzzVerifyHeaders(f *testing.F) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("fuzzing-key-0123456789abcdef0123"))
	sent := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	body := testBody(testEventID)
	h := signed(f, testEventID, sent, body, secret, newSecret(f))
	f.Add(testEventID, h.Get(fibe.HeaderWebhookTimestamp), h.Get(fibe.HeaderWebhookSignature), body)
	f.Add(testEventID, "+"+h.Get(fibe.HeaderWebhookTimestamp), "v1,xx v2,yy", body)
	f.Add("evt_1", "1.5e9", "v1", []byte(`{}`))
	f.Add("", "", "", []byte(nil))
	v := verifier(f, secret, fibe.WithWebhookClock(func() time.Time { return sent }), fibe.WithWebhookTolerance(100*365*24*time.Hour))
	ref, err := standardwebhooks.NewWebhook(secret)
	require.NoError(f, err)
	_, err = v.Verify(h, body)
	require.NoError(f, err, "the first seed must be accepted, or the property below is never checked")
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(fibe.HeaderWebhookID, id)
		h.Set(fibe.HeaderWebhookTimestamp, ts)
		h.Set(fibe.HeaderWebhookSignature, sig)
		ev, err := v.Verify(h, body)
		if err != nil {
			require.Nil(t, ev)
			return
		}
		require.Equal(t, id, ev.ID)
		require.NoError(t, ref.VerifyIgnoringTimestamp(body, h), "fibe accepts what the reference library refuses")
	})
}
