package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
)

var providers = []string{"stripe", "paddle", "creem"}

// stripeFixture is a full checkout.session.completed event as Stripe sends
// it, carrying stripe-go's API version so its ConstructEvent accepts it
// (stripeevents' tests show stripe-go accepting it).
func stripeFixture(t *testing.T, eventID string, orderID int64) []byte {
	t.Helper()
	b, err := os.ReadFile("../../provider/stripe/testdata/stripe_checkout_session_completed.json")
	require.NoError(t, err)
	return []byte(strings.NewReplacer("{{EVENT_ID}}", eventID, "{{API_VERSION}}", stripeevents.APIVersion,
		"{{ORDER_ID}}", strconv.FormatInt(orderID, 10)).Replace(string(b)))
}

func TestStripeEventSignedByStripeGo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.order("mana_1000", "stripe")
	body := stripeFixture(t, "evt_1Stripe", o.ID)
	header, value := stripeevents.SignByStripeGo(secrets["stripe"][0], body, time.Now())

	// Our intake accepts the fixture under stripe-go's own signature and
	// fulfils the order end to end.
	a := e.post("stripe", body, header, value)
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	require.Equal(t, "claimed", a.status())
	require.Equal(t, "completed", e.waitJobs(1)[0].State)
	require.Equal(t, int64(1000), e.mana())
	require.Equal(t, fulfillment.StatusFulfilled, e.orderStatus(o.ID).Status)
	e.requireClean()
}

// Paddle's own example vector through the real intake at the vector's
// time: an event type we only acknowledge, so it is claimed without a
// job; now, it is stale.
func TestPaddleExampleVectorVerifies(t *testing.T) {
	t.Parallel()
	signedAt := providertest.PaddleExampleSignedAt
	paddleOnly := intakes(map[string][]string{"paddle": {providertest.PaddleExampleSecret}})
	at := newEnv(t, func(o *webhook.Options) {
		o.Providers = paddleOnly
		o.Now = func() time.Time { return signedAt }
	})
	a := at.post("paddle", []byte(providertest.PaddleExamplePayload), "Paddle-Signature", providertest.PaddleExampleSignature)
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	require.Equal(t, "claimed", a.status())
	require.Equal(t, 1, at.events())
	require.Zero(t, at.jobs())
	var typ string
	require.NoError(t, at.pool.QueryRow(context.Background(),
		`SELECT event_type FROM webhook_events WHERE provider = 'paddle' AND event_id = 'evt_01hsdn97563968dy0szkmgjwh3'`).Scan(&typ))
	require.Equal(t, "price.created", typ)

	now := newEnv(t, func(o *webhook.Options) { o.Providers = paddleOnly })
	a = now.post("paddle", []byte(providertest.PaddleExamplePayload), "Paddle-Signature", providertest.PaddleExampleSignature)
	require.Equal(t, http.StatusBadRequest, a.Status)
	require.Equal(t, "stale_signature", a.code())
	require.Zero(t, now.events())
}

// Creem's signature, computed here independently of our signer.
func TestCreemSignedByHMAC(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.order("mana_5000", "creem")
	body := providerevents.CompletedEvent("creem", "evt_creem1", o.ID, 3999, "USD")
	m := hmac.New(sha256.New, []byte(secrets["creem"][0]))
	m.Write(body)
	a := e.post("creem", body, "creem-signature", hex.EncodeToString(m.Sum(nil)))
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	require.Equal(t, "completed", e.waitJobs(1)[0].State)
	require.Equal(t, int64(5000), e.mana())
	e.requireClean()
}

// The same event delivered 10 times at once: one row, one job, one credit
// of exactly the snapshot, every answer 200.
func TestConcurrentDuplicateDeliveries(t *testing.T) {
	t.Parallel()
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			o := e.order("mana_5000", provider)
			body := providerevents.CompletedEvent(provider, "evt_race_"+provider, o.ID, o.Amount, o.Currency)

			answers := make([]answer, 10)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range answers {
				wg.Go(func() {
					<-start
					answers[i] = e.deliver(provider, body) // each redelivery signed afresh
				})
			}
			close(start)
			wg.Wait()

			statuses := map[string]int{}
			for _, a := range answers {
				require.Equal(t, http.StatusOK, a.Status, a.Body)
				statuses[a.status()]++
			}
			require.Equal(t, map[string]int{"claimed": 1, "duplicate": 9}, statuses)
			require.Equal(t, 1, e.events())
			require.Equal(t, 1, e.jobs())
			require.Equal(t, "completed", e.waitJobs(1)[0].State)
			require.Equal(t, 1, e.credits())
			require.Equal(t, o.Mana, e.mana())
			require.Equal(t, fulfillment.StatusFulfilled, e.orderStatus(o.ID).Status)

			// A late redelivery after fulfillment is still just a duplicate.
			a := e.deliver(provider, body)
			require.Equal(t, "duplicate", a.status())
			require.Equal(t, 1, e.jobs())
			require.Equal(t, o.Mana, e.mana())
			// Each duplicate wrote its count on the claim's row (the write
			// whose commit waits for the synchronous standby).
			require.Equal(t, 10, e.count(`SELECT duplicate_deliveries::int FROM webhook_events WHERE last_delivery_at IS NOT NULL`))
			e.requireClean()
		})
	}
}

// When the job insert fails, the claim rolls back with it (503, the
// provider retries), and the redelivery then claims and fulfils.
func TestClaimRolledBackWhenEnqueueFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failing := insertOnlyClient(t, e.pool, true)
	broken := httpServer(t, webhook.NewHandler(webhook.Options{Pool: e.pool, River: failing,
		Providers: intakes(secrets), Logger: discard}))
	o := e.order("mana_1000", "paddle")
	body := providerevents.CompletedEvent("paddle", "evt_enqueue_fails", o.ID, 999, "usd")

	h, v := sign("paddle", body, time.Now())
	a := postTo(t, broken, "paddle", body, h, v)
	require.Equal(t, http.StatusServiceUnavailable, a.Status)
	require.Equal(t, "unavailable", a.code())
	require.Zero(t, e.events(), "the claim must roll back with the failed job insert")
	require.Zero(t, e.jobs())

	a = e.deliver("paddle", body)
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	require.Equal(t, "claimed", a.status())
	require.Equal(t, "completed", e.waitJobs(1)[0].State)
	require.Equal(t, int64(1000), e.mana())
	e.requireClean()
}

// Each bad delivery answers as specified and stores nothing.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.order("mana_1000", "stripe")
	now := time.Now()
	goods := map[string][]byte{} // built once: bodies carry their creation time
	for _, p := range providers {
		goods[p] = providerevents.CompletedEvent(p, "evt_bad_"+p, o.ID, 999, "usd")
	}
	cases := badInputs(goods, now)
	for _, c := range cases {
		a := e.post(c.provider, c.body, c.headers...)
		require.Equal(t, c.status, a.Status, "%s %s: %v", c.provider, c.name, a.Body)
		require.Equal(t, c.code, a.code(), "%s %s", c.provider, c.name)
		require.Equal(t, "application/problem+json", a.ContentType, "%s %s", c.provider, c.name)
		require.Zero(t, e.events(), "%s %s stored an event", c.provider, c.name)
		require.Zero(t, e.jobs(), "%s %s enqueued a job", c.provider, c.name)
	}
	res, err := e.srv.Client().Get(e.srv.URL + "/webhooks/stripe")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)

	require.Zero(t, e.credits())
	require.Zero(t, e.mana())
	require.Equal(t, fulfillment.StatusPending, e.orderStatus(o.ID).Status)
	e.requireClean()

	// The good delivery still works afterwards.
	require.Equal(t, "claimed", e.deliver("stripe", goods["stripe"]).status())
	require.Equal(t, "completed", e.waitJobs(1)[0].State)
	require.Equal(t, int64(1000), e.mana())
	e.requireClean()
}

// badInput is one delivery the intake must refuse, and its answer.
type badInput struct {
	name, provider string
	body           []byte
	headers        []string
	status         int
	code           string
}

// badInputs are TestBadInputChangesNothing's deliveries: each provider's
// good body (goods) spoiled one way at a time, signed at now unless the
// signature is what is spoiled.
func badInputs(goods map[string][]byte, now time.Time) []badInput {
	good := func(provider string) []byte { return goods[provider] }
	signed := func(provider string, body []byte, at time.Time) []string {
		h, v := sign(provider, body, at)
		return []string{h, v}
	}
	// plusSigned signs at now, then spells the header's timestamp "+<t>":
	// the MAC is over "<t>", not over the header's literal text.
	plusSigned := func(provider string, body []byte, at time.Time) []string {
		h, v := sign(provider, body, at)
		return []string{h, strings.Replace(v, "="+strconv.FormatInt(at.Unix(), 10), "=+"+strconv.FormatInt(at.Unix(), 10), 1)}
	}
	huge := func(provider string) []byte {
		return append(good(provider)[:0:0], bytes.Repeat([]byte(" "), webhook.MaxBodyBytes+1)...)
	}
	var cases []badInput
	for _, p := range providers {
		tampered := bytes.Replace(good(p), []byte("999"), []byte("1"), 1)
		// The envelope's event id member twice, and beside a case variant of
		// its name: another reader could claim the event under another id.
		// (A member twice inside the object is a refused outcome instead.)
		idName := map[string]string{"stripe": `"id":`, "paddle": `"event_id":`, "creem": `"id":`}[p]
		twice := append([]byte(`{`+idName+`"evt_other",`), good(p)[1:]...)
		variant := append([]byte(`{`+strings.ToUpper(idName)+`"evt_other",`), good(p)[1:]...)
		invalid := bytes.Clone(bytes.TrimSuffix(bytes.TrimSpace(good(p)), []byte("}")))
		invalid = append(invalid, ',', '"', 'x', '"', ':', '"', 0xff, '"', '}')
		cases = append(cases,
			badInput{"wrong secret", p, good(p), func() []string { h, v := signWith(p, "not-the-secret", good(p), now); return []string{h, v} }(), 400, "bad_signature"},
			badInput{"tampered body", p, tampered, signed(p, good(p), now), 400, "bad_signature"},
			badInput{"missing header", p, good(p), nil, 400, "missing_signature"},
			badInput{"malformed JSON", p, []byte(`{"id":`), signed(p, []byte(`{"id":`), now), 400, "malformed_payload"},
			badInput{"body over 1 MiB", p, huge(p), signed(p, huge(p), now), 413, "payload_too_large"},
			badInput{"a member twice", p, twice, signed(p, twice, now), 400, "malformed_payload"},
			badInput{"a case variant of a member", p, variant, signed(p, variant, now), 400, "malformed_payload"},
			badInput{"invalid UTF-8", p, invalid, signed(p, invalid, now), 400, "malformed_payload"},
		)
	}
	cases = append(cases,
		badInput{"stale timestamp", "stripe", good("stripe"), signed("stripe", good("stripe"), now.Add(-6*time.Minute)), 400, "stale_signature"},
		badInput{"far-future timestamp", "stripe", good("stripe"), signed("stripe", good("stripe"), now.Add(6*time.Minute)), 400, "stale_signature"},
		badInput{"stale timestamp", "paddle", good("paddle"), signed("paddle", good("paddle"), now.Add(-6*time.Minute)), 400, "stale_signature"},
		badInput{"far-future timestamp", "paddle", good("paddle"), signed("paddle", good("paddle"), now.Add(time.Hour)), 400, "stale_signature"},
		badInput{"malformed header", "stripe", good("stripe"), []string{"Stripe-Signature", "t=abc,v1=00"}, 400, "malformed_signature"},
		badInput{"malformed header", "paddle", good("paddle"), []string{"Paddle-Signature", "ts=1710929255;h1=zz"}, 400, "malformed_signature"},
		badInput{"malformed header", "creem", good("creem"), []string{"creem-signature", "not-hex"}, 400, "malformed_signature"},
		badInput{"timestamp spelled with a sign", "stripe", good("stripe"), plusSigned("stripe", good("stripe"), now), 400, "malformed_signature"},
		badInput{"timestamp spelled with a sign", "paddle", good("paddle"), plusSigned("paddle", good("paddle"), now), 400, "malformed_signature"},
		badInput{"no v1 signature", "stripe", good("stripe"), []string{"Stripe-Signature", fmt.Sprintf("t=%d", now.Unix())}, 400, "malformed_signature"},
		badInput{"unknown provider", "paypal", good("stripe"), signed("stripe", good("stripe"), now), 404, "unknown_provider"},
	)
	return cases
}

// A completed payment naming an order we do not have is claimed (so the
// provider stops), its job cancelled with a clear error, nothing minted.
func TestUnknownOrderIsClaimedAndCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.deliver("creem", providerevents.CompletedEvent("creem", "evt_ghost", 987654, 999, "usd"))
	require.Equal(t, "claimed", a.status())
	j := e.waitJobs(1)[0]
	require.Equal(t, "cancelled", j.State)
	require.Contains(t, j.Errors[0], "order 987654, which does not exist")
	require.Zero(t, e.credits())
	e.requireClean()
}

func TestAmountOrCurrencyMismatchRejectsOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		provider, currency string
		amount             int64
	}{
		{"stripe", "usd", 1},
		{"paddle", "eur", 999},
		{"creem", "usd", 1000},
	} {
		t.Run(c.provider, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			o := e.order("mana_1000", c.provider)
			a := e.deliver(c.provider, providerevents.CompletedEvent(c.provider, "evt_mismatch", o.ID, c.amount, c.currency))
			require.Equal(t, "claimed", a.status())
			j := e.waitJobs(1)[0]
			require.Equal(t, "cancelled", j.State)
			require.Contains(t, j.Errors[0], "does not match")
			got := e.orderStatus(o.ID)
			require.Equal(t, fulfillment.StatusRejected, got.Status)
			require.Contains(t, got.Reason, fmt.Sprintf("paid %d %s", c.amount, c.currency))
			require.Zero(t, e.credits())
			require.Zero(t, e.mana())
			e.requireClean()
		})
	}
}

// During a rotation both secrets verify; a retired one does not.
func TestRotatedSecretBothAccepted(t *testing.T) {
	t.Parallel()
	rotating := map[string][]string{}
	for _, p := range providers {
		rotating[p] = []string{"old-" + p, "new-" + p}
	}
	e := newEnv(t, func(o *webhook.Options) { o.Providers = intakes(rotating) })
	for _, p := range providers {
		for i, secret := range []string{"old-" + p, "new-" + p, "retired-" + p} {
			o := e.order("mana_1000", p)
			body := providerevents.CompletedEvent(p, fmt.Sprintf("evt_rot_%d", i), o.ID, 999, "usd")
			h, v := signWith(p, secret, body, time.Now())
			a := e.post(p, body, h, v)
			if i < 2 {
				require.Equal(t, "claimed", a.status(), "%s signed with %s: %v", p, secret, a.Body)
			} else {
				require.Equal(t, "bad_signature", a.code(), "%s signed with %s", p, secret)
			}
		}
	}
	require.Equal(t, 6, e.events())
	for _, j := range e.waitJobs(6) {
		require.Equal(t, "completed", j.State, j.Errors)
	}
	require.Equal(t, int64(6000), e.mana())
	e.requireClean()
}

// A price change after checkout changes neither what the order must be
// paid nor what it grants.
func TestCatalogueChangeAfterCheckoutEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.order("mana_1000", "stripe")
	catalogueAfter := map[string]fulfillment.SKU{"mana_1000": {Amount: 1499, Currency: "usd", Mana: 1200}}
	newer, err := fulfillment.CreateCheckout(context.Background(), e.pool, catalogueAfter,
		fulfillment.CheckoutParams{PlayerID: e.player, SKU: "mana_1000", Provider: "stripe"})
	require.NoError(t, err)

	require.Equal(t, "claimed", e.deliver("stripe", providerevents.CompletedEvent("stripe", "evt_old_price", o.ID, 999, "usd")).status())
	require.Equal(t, "claimed", e.deliver("stripe", providerevents.CompletedEvent("stripe", "evt_new_price", newer.ID, 1499, "usd")).status())
	for _, j := range e.waitJobs(2) {
		require.Equal(t, "completed", j.State, j.Errors)
	}
	require.Equal(t, int64(1000+1200), e.mana())
	require.Equal(t, int64(999), e.orderStatus(o.ID).Amount)
	e.requireClean()
}

// An event type we do not act on is claimed and acknowledged without a job;
// so is a Stripe session completed before its (delayed) payment succeeded.
func TestUnhandledEventClaimedWithoutJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.order("mana_1000", "stripe")
	unpaid := bytes.Replace(providerevents.CompletedEvent("stripe", "evt_unpaid", o.ID, 999, "usd"),
		[]byte(`"payment_status":"paid"`), []byte(`"payment_status":"unpaid"`), 1)
	bodies := map[string][]byte{
		"stripe": []byte(`{"id":"evt_cust","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`),
		"paddle": []byte(`{"event_id":"evt_sub","event_type":"subscription.created","data":{"custom_data":"not an object"}}`),
		// (refund.created, once unhandled here, is now a refund: see reversal_test.go.)
		"creem": []byte(`{"id":"evt_sub","eventType":"subscription.paid","object":{}}`),
	}
	for p, body := range bodies {
		require.Equal(t, "claimed", e.deliver(p, body).status(), p)
		require.Equal(t, "duplicate", e.deliver(p, body).status(), p)
	}
	require.Equal(t, "claimed", e.deliver("stripe", unpaid).status())
	require.Equal(t, 4, e.events())
	require.Equal(t, 3, e.count(`SELECT sum(duplicate_deliveries)::int FROM webhook_events`))
	require.Zero(t, e.jobs())
	require.Equal(t, fulfillment.StatusPending, e.orderStatus(o.ID).Status)
	e.requireClean()
}

// With the database unreachable the intake answers 503 so the provider
// retries; nothing is half-stored.
func TestDatabaseUnavailableAnswers503(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dead := closedPool(t, e.pool)
	srv := httpServer(t, webhook.NewHandler(webhook.Options{Pool: dead, River: e.river, Providers: intakes(secrets), Logger: discard}))
	o := e.order("mana_1000", "stripe")
	for _, body := range [][]byte{
		providerevents.CompletedEvent("stripe", "evt_down", o.ID, 999, "usd"),
		[]byte(`{"id":"evt_down2","type":"customer.created","data":{"object":{}}}`),
	} {
		h, v := sign("stripe", body, time.Now())
		a := postTo(t, srv, "stripe", body, h, v)
		require.Equal(t, http.StatusServiceUnavailable, a.Status)
		require.Equal(t, "unavailable", a.code())
	}
	require.Zero(t, e.events())

	noSecret := httpServer(t, webhook.NewHandler(webhook.Options{Pool: e.pool, River: e.river, Providers: intakes(nil), Logger: discard}))
	body := providerevents.CompletedEvent("creem", "evt_nosecret", o.ID, 999, "usd")
	h, v := sign("creem", body, time.Now())
	a := postTo(t, noSecret, "creem", body, h, v)
	require.Equal(t, http.StatusServiceUnavailable, a.Status)
	require.Equal(t, "provider_not_configured", a.code())
	require.Zero(t, e.events())
	e.requireClean()
}
