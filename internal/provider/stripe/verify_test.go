package stripe_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/stripe"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","type":"x"}`)
	at := time.Unix(1_700_000_000, 0)
	_, good := stripeevents.Sign("s1", body, at)
	_, other := stripeevents.Sign("s0", body, at)
	sig := good[strings.Index(good, "v1=")+3:]
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
		{"stale at +301s", good, body, at.Add(301 * time.Second), nil, 0, provider.ErrStaleSignature},
		{"future beyond 300s", good, body, at.Add(-301 * time.Second), nil, 0, provider.ErrStaleSignature},
		{"custom tolerance", good, body, at.Add(11 * time.Second), nil, 10 * time.Second, provider.ErrStaleSignature},
		{"second v1 matches", other + ",v1=" + sig, body, at, nil, 0, nil},
		{"v0 ignored, v1 matches", fmt.Sprintf("t=%d,v0=abcd,v1=%s", at.Unix(), sig), body, at, nil, 0, nil},
		{"upper-case hex", fmt.Sprintf("t=%d,v1=%s", at.Unix(), strings.ToUpper(sig)), body, at, nil, 0, nil},
		{"rotated: old secret", other, body, at, []string{"s1", "s0"}, 0, nil},
		{"wrong secret", other, body, at, nil, 0, provider.ErrBadSignature},
		{"tampered body", good, append([]byte(nil), `{"id":"evt_2","type":"x"}`...), at, nil, 0, provider.ErrBadSignature},
		{"other timestamp", fmt.Sprintf("t=%d,v1=%s", at.Unix()+1, sig), body, at, nil, 0, provider.ErrBadSignature},
		{"missing", "", body, at, nil, 0, provider.ErrMissingSignature},
		{"no t", "v1=" + sig, body, at, nil, 0, provider.ErrMalformedSignature},
		{"no v1", fmt.Sprintf("t=%d,v0=%s", at.Unix(), sig), body, at, nil, 0, provider.ErrMalformedSignature},
		{"bad t", "t=x,v1=" + sig, body, at, nil, 0, provider.ErrMalformedSignature},
		{"negative t", "t=-1,v1=" + sig, body, at, nil, 0, provider.ErrMalformedSignature},
		// The MAC is over the timestamp as the header spells it; an odd
		// spelling of the signed instant is not the signed text.
		{"t with a plus sign", fmt.Sprintf("t=+%d,v1=%s", at.Unix(), sig), body, at, nil, 0, provider.ErrMalformedSignature},
		{"t with a leading zero", fmt.Sprintf("t=0%d,v1=%s", at.Unix(), sig), body, at, nil, 0, provider.ErrMalformedSignature},
		{"t with a space", fmt.Sprintf("t= %d,v1=%s", at.Unix(), sig), body, at, nil, 0, provider.ErrMalformedSignature},
		{"two t", fmt.Sprintf("t=%d,t=%d,v1=%s", at.Unix(), at.Unix(), sig), body, at, nil, 0, provider.ErrMalformedSignature},
		{"short v1", fmt.Sprintf("t=%d,v1=%s", at.Unix(), sig[:10]), body, at, nil, 0, provider.ErrMalformedSignature},
		{"not key=value", "garbage", body, at, nil, 0, provider.ErrMalformedSignature},
		{"no secrets configured", good, body, at, []string{}, 0, provider.ErrBadSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			secrets := []string{"s1"}
			if c.secret != nil {
				secrets = c.secret
			}
			d := stripe.New(provider.Options{WebhookSecrets: secrets, Tolerance: c.tol})
			err := d.Verify(providertest.Header(stripe.SignatureHeader, c.value), c.body, c.now)
			providertest.RequireIs(t, err, c.want)
		})
	}
}
