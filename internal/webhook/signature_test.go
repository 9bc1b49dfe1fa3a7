package webhook

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/devwebhook"
)

func header(name, value string) http.Header {
	h := http.Header{}
	if value != "" {
		h.Set(name, value)
	}
	return h
}

func TestStripeVerifier(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","type":"x"}`)
	at := time.Unix(1_700_000_000, 0)
	_, good := devwebhook.SignStripe("s1", body, at)
	_, other := devwebhook.SignStripe("s0", body, at)
	sig := good[strings.Index(good, "v1=")+3:]
	v := StripeVerifier{Secrets: []string{"s1"}}
	for _, c := range []struct {
		name   string
		value  string
		body   []byte
		now    time.Time
		secret []string
		tol    time.Duration
		want   error
	}{
		{"valid", good, body, at, nil, 0, nil},
		{"valid at +300s", good, body, at.Add(300 * time.Second), nil, 0, nil},
		{"valid at -300s (clock behind)", good, body, at.Add(-300 * time.Second), nil, 0, nil},
		{"stale at +301s", good, body, at.Add(301 * time.Second), nil, 0, ErrStaleSignature},
		{"future beyond 300s", good, body, at.Add(-301 * time.Second), nil, 0, ErrStaleSignature},
		{"custom tolerance", good, body, at.Add(11 * time.Second), nil, 10 * time.Second, ErrStaleSignature},
		{"second v1 matches", other + ",v1=" + sig, body, at, nil, 0, nil},
		{"v0 ignored, v1 matches", fmt.Sprintf("t=%d,v0=abcd,v1=%s", at.Unix(), sig), body, at, nil, 0, nil},
		{"upper-case hex", fmt.Sprintf("t=%d,v1=%s", at.Unix(), strings.ToUpper(sig)), body, at, nil, 0, nil},
		{"rotated: old secret", other, body, at, []string{"s1", "s0"}, 0, nil},
		{"wrong secret", other, body, at, nil, 0, ErrBadSignature},
		{"tampered body", good, append([]byte(nil), `{"id":"evt_2","type":"x"}`...), at, nil, 0, ErrBadSignature},
		{"other timestamp", fmt.Sprintf("t=%d,v1=%s", at.Unix()+1, sig), body, at, nil, 0, ErrBadSignature},
		{"missing", "", body, at, nil, 0, ErrMissingSignature},
		{"no t", "v1=" + sig, body, at, nil, 0, ErrMalformedSignature},
		{"no v1", fmt.Sprintf("t=%d,v0=%s", at.Unix(), sig), body, at, nil, 0, ErrMalformedSignature},
		{"bad t", "t=x,v1=" + sig, body, at, nil, 0, ErrMalformedSignature},
		{"negative t", "t=-1,v1=" + sig, body, at, nil, 0, ErrMalformedSignature},
		// The MAC is over the timestamp as the header spells it; an odd
		// spelling of the signed instant is not the signed text.
		{"t with a plus sign", fmt.Sprintf("t=+%d,v1=%s", at.Unix(), sig), body, at, nil, 0, ErrMalformedSignature},
		{"t with a leading zero", fmt.Sprintf("t=0%d,v1=%s", at.Unix(), sig), body, at, nil, 0, ErrMalformedSignature},
		{"t with a space", fmt.Sprintf("t= %d,v1=%s", at.Unix(), sig), body, at, nil, 0, ErrMalformedSignature},
		{"two t", fmt.Sprintf("t=%d,t=%d,v1=%s", at.Unix(), at.Unix(), sig), body, at, nil, 0, ErrMalformedSignature},
		{"short v1", fmt.Sprintf("t=%d,v1=%s", at.Unix(), sig[:10]), body, at, nil, 0, ErrMalformedSignature},
		{"not key=value", "garbage", body, at, nil, 0, ErrMalformedSignature},
		{"no secrets configured", good, body, at, []string{}, 0, ErrBadSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			vv := v
			if c.secret != nil {
				vv.Secrets = c.secret
			}
			vv.Tolerance = c.tol
			err := vv.Verify(header(HeaderStripe, c.value), c.body, c.now)
			if c.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, c.want)
			}
		})
	}
}

func TestPaddleVerifier(t *testing.T) {
	t.Parallel()
	body := []byte(`{"event_id":"evt_1","event_type":"x"}`)
	at := time.Unix(1_700_000_000, 0)
	_, good := devwebhook.SignPaddle("p1", body, at)
	sig := good[strings.Index(good, "h1=")+3:]
	v := PaddleVerifier{Secrets: []string{"p0", "p1"}}
	for _, c := range []struct {
		name, value string
		now         time.Time
		want        error
	}{
		{"valid", good, at, nil},
		{"valid with spaces", fmt.Sprintf(" ts=%d; h1=%s ", at.Unix(), sig), at, nil},
		{"two h1", fmt.Sprintf("ts=%d;h1=%s;h1=%s", at.Unix(), strings.Repeat("0", 64), sig), at, nil},
		{"stale", good, at.Add(301 * time.Second), ErrStaleSignature},
		{"future", good, at.Add(-301 * time.Second), ErrStaleSignature},
		{"stripe syntax", fmt.Sprintf("t=%d,v1=%s", at.Unix(), sig), at, ErrMalformedSignature},
		{"comma separated", fmt.Sprintf("ts=%d,h1=%s", at.Unix(), sig), at, ErrMalformedSignature},
		{"ts with a plus sign", fmt.Sprintf("ts=+%d;h1=%s", at.Unix(), sig), at, ErrMalformedSignature},
		{"ts with a leading zero", fmt.Sprintf("ts=0%d;h1=%s", at.Unix(), sig), at, ErrMalformedSignature},
		{"missing", "", at, ErrMissingSignature},
		{"wrong", fmt.Sprintf("ts=%d;h1=%s", at.Unix(), strings.Repeat("ab", 32)), at, ErrBadSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := v.Verify(header(HeaderPaddle, c.value), body, c.now)
			if c.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, c.want)
			}
		})
	}
}

func TestCreemVerifier(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","eventType":"x"}`)
	_, good := devwebhook.SignCreem("c1", body)
	v := CreemVerifier{Secrets: []string{"c1"}}
	for _, c := range []struct {
		name, value string
		body        []byte
		want        error
	}{
		{"valid", good, body, nil},
		{"valid upper-case", strings.ToUpper(good), body, nil},
		{"tampered", good, []byte(`{"id":"evt_2","eventType":"x"}`), ErrBadSignature},
		{"missing", "", body, ErrMissingSignature},
		{"not hex", "zz" + good[2:], body, ErrMalformedSignature},
		{"short", good[:62], body, ErrMalformedSignature},
		{"with prefix", "sha256=" + good, body, ErrMalformedSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := v.Verify(header("creem-signature", c.value), c.body, time.Time{})
			if c.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, c.want)
			}
		})
	}
}

func TestSign(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	for _, p := range []string{"stripe", "paddle", "creem"} {
		h, v, err := devwebhook.Sign(p, "k", []byte("{}"), at)
		require.NoError(t, err)
		vf := map[string]Verifier{"stripe": StripeVerifier{Secrets: []string{"k"}},
			"paddle": PaddleVerifier{Secrets: []string{"k"}}, "creem": CreemVerifier{Secrets: []string{"k"}}}[p]
		require.NoError(t, vf.Verify(header(h, v), []byte("{}"), at), p)
	}
	_, _, err := devwebhook.Sign("paypal", "k", nil, at)
	require.ErrorIs(t, err, fulfillment.ErrUnknownProvider)
}
