package sim

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// The harness's delivery checks, planted: a webhook-id sent with two
// bodies, a body naming another id, and a request no given secret signed
// are each reported; one body per id, signed (with a secret given before
// or after it came), is not.
func TestDeliveryChecksFindPlantedFaults(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	const secret, other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_dGhpcyBpcyBhbm90aGVyIHNlY3JldCEh"
	r := &run{e: &Env{receiver: rc}, h: &History{Seed: 7}, endpoint: 1}
	require.NoError(t, rc.trust(endpointPath(7), secret))
	id := "evt_" + strings.Repeat("a", 32)
	send := func(secret, id, body string) {
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		now := time.Now()
		sig, err := wh.Sign(id, now, []byte(body))
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, rc.srv.URL+endpointPath(7), strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
	}
	send(secret, id, `{"id":"`+id+`","sequence":1}`)
	send(secret, id, `{"id":"`+id+`","sequence":1}`)
	r.oneBodyPerID()
	require.Empty(t, r.problems, "one body, signed")

	// Signed with a secret the receiver is told of only afterwards (a
	// rotation's commit races the harness): verified once it is known.
	const rotated = "whsec_cm90YXRlZCBzZWNyZXQgZm9yIHRoZSBzaW0h"
	late := "evt_" + strings.Repeat("d", 32)
	send(rotated, late, `{"id":"`+late+`","sequence":3}`)
	require.NoError(t, rc.trust(endpointPath(7), rotated))
	r.oneBodyPerID()
	require.Empty(t, r.problems, "verified with the secret given later")

	send(secret, id, `{"id":"`+id+`","sequence":2}`)
	send(other, "evt_"+strings.Repeat("b", 32), `{"id":"evt_`+strings.Repeat("c", 32)+`"}`)
	r.oneBodyPerID()
	text := strings.Join(r.problems, "\n")
	require.Contains(t, text, "carried two bodies")
	require.Contains(t, text, "carried a body naming")
	require.Contains(t, text, "did not verify")
}
