package drivers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/providertest"
	"github.com/fibe-dev/billing/internal/provider/providertest/fakeapi"
)

// The contract every registered driver keeps, whatever its provider: the
// same answers for the same faults. Each driver's own tests cover what
// is particular to it.

const (
	secret    = "whsec_contract"
	oldSecret = "whsec_contract_old"
	product   = "prod_contract" // the SKU's catalogue id (Creem product, Paddle price)
)

// contractRetry: a budget short enough that a provider down for all of it
// fails the test fast, and an attempt timeout no fake answer comes near
// even on a busy machine, since the tests count requests (an attempt that
// timed out would be one more; at load 40 one took over a second).
var contractRetry = provider.Retry{Budget: 3 * time.Second, BaseDelay: 5 * time.Millisecond, AttemptTimeout: time.Minute}

// budgetSlack is how far past the budget a call given up on may end: its
// last attempt (answered at once by a down fake) and a busy machine's
// scheduling.
const budgetSlack = 30 * time.Second

// registry is every driver, each pointed at its own fake.
func registry(t *testing.T) (*provider.Registry, map[string]*fakeapi.Server) {
	t.Helper()
	opts, fakes := map[string]provider.Options{}, map[string]*fakeapi.Server{}
	for _, name := range provider.Names() {
		fake := providertest.StartFake()
		t.Cleanup(fake.Close)
		fake.SetProduct(product, fakeapi.Product{Price: 999, Currency: "usd"})
		fakes[name] = fake
		opts[name] = provider.Options{APIKey: "sk_" + name, APIURL: fake.URL, WebhookSecrets: []string{secret, oldSecret},
			Retry: contractRetry}
	}
	return drivers.New(opts), fakes
}

// eachDriver runs check on every driver of reg, in parallel, each with its
// fake (nil when reg has none).
func eachDriver(t *testing.T, reg *provider.Registry, fakes map[string]*fakeapi.Server,
	check func(t *testing.T, p provider.Provider, fake *fakeapi.Server)) {
	for _, name := range reg.Names() {
		p, _ := reg.Get(name)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t, p, fakes[name])
		})
	}
}

func TestEveryProviderIsRegistered(t *testing.T) {
	t.Parallel()
	reg, _ := registry(t)
	require.ElementsMatch(t, provider.Names(), reg.Names())
	for _, name := range reg.Names() {
		p, _ := reg.Get(name)
		require.Equal(t, name, p.Name())
	}
}

func TestContractSignatures(t *testing.T) {
	t.Parallel()
	reg, fakes := registry(t)
	now := time.Now()
	eachDriver(t, reg, fakes, func(t *testing.T, p provider.Provider, _ *fakeapi.Server) {
		name := p.Name()
		body := providerevents.CompletedEvent(name, "evt_sig", 42, 999, "usd")
		verify := func(secret string, body []byte, signed time.Time) error {
			h, v, err := providerevents.Sign(name, secret, body, signed)
			require.NoError(t, err)
			hdr := http.Header{}
			hdr.Set(h, v)
			return p.Verify(hdr, body, now)
		}
		require.NoError(t, verify(secret, body, now))
		require.NoError(t, verify(oldSecret, body, now), "every configured secret verifies (rotation)")
		require.ErrorIs(t, verify("whsec_other", body, now), provider.ErrBadSignature)
		require.ErrorIs(t, p.Verify(http.Header{}, body, now), provider.ErrMissingSignature)
		h, v, _ := providerevents.Sign(name, secret, body, now)
		hdr := http.Header{}
		hdr.Set(h, v)
		require.ErrorIs(t, p.Verify(hdr, bytes.Replace(body, []byte("999"), []byte("998"), 1), now), provider.ErrBadSignature,
			"the MAC is over the raw body")
		requireStaleRule(t, name, verify, body, now)
	})
}

// requireStaleRule: a provider that signs a timestamp refuses a delivery
// signed an hour ago as stale; one that signs none (its headers are the
// same whenever signed) cannot tell, and its claim on the event id is the
// replay defence.
func requireStaleRule(t *testing.T, name string, verify func(string, []byte, time.Time) error, body []byte, now time.Time) {
	_, early, _ := providerevents.Sign(name, secret, body, now.Add(-time.Hour))
	_, late, _ := providerevents.Sign(name, secret, body, now)
	if early == late {
		require.NoError(t, verify(secret, body, now.Add(-time.Hour)))
		return
	}
	require.ErrorIs(t, verify(secret, body, now.Add(-time.Hour)), provider.ErrStaleSignature)
	require.ErrorIs(t, verify(secret, body, now.Add(time.Hour)), provider.ErrStaleSignature, "nor a clock far ahead")
}

func TestContractParse(t *testing.T) {
	t.Parallel()
	reg, fakes := registry(t)
	eachDriver(t, reg, fakes, func(t *testing.T, p provider.Provider, _ *fakeapi.Server) {
		name := p.Name()
		body := providerevents.CompletedEvent(name, "evt_parse", 42, 999, "usd")
		ev, err := p.Parse(body)
		require.NoError(t, err)
		require.Equal(t, name, ev.Provider)
		require.Equal(t, "evt_parse", ev.ID)
		require.NotNil(t, ev.Payment)
		require.Equal(t, int64(42), ev.Payment.OrderID)
		require.Equal(t, int64(999), ev.Payment.Amount)
		require.Equal(t, "usd", ev.Payment.Currency)
		require.NotEmpty(t, ev.Payment.PaymentID)

		refund := providerevents.ReversalEvent(name, "evt_refund", providerevents.OrderPaymentID(name, "42"), "rv_1",
			provider.ReversalRefund, provider.StateSucceeded, 500, "usd")
		rev, err := p.Parse(refund)
		require.NoError(t, err)
		require.NotNil(t, rev.Reversal)
		require.Equal(t, provider.ReversalRefund, rev.Reversal.Kind)
		require.Equal(t, int64(500), rev.Reversal.Amount)
		known := append([]string{ev.Payment.PaymentID}, ev.Payment.Aliases...)
		require.Contains(t, known, rev.Reversal.PaymentID, "a refund names its payment by an id its payment event recorded")

		for what, bad := range ambiguous(t, body, ev.ID) {
			_, err := p.Parse(bad)
			require.ErrorIs(t, err, provider.ErrMalformedPayload, what)
		}
	})
}

// ambiguous are body with its event id member given twice, and given again
// under a name that differs only by case: bodies two JSON readers could
// read as different events.
func ambiguous(t *testing.T, body []byte, eventID string) map[string][]byte {
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &top))
	for k, v := range top {
		var s string
		if json.Unmarshal(v, &s) != nil || s != eventID {
			continue
		}
		prefix := func(name string) []byte {
			return append([]byte(fmt.Sprintf(`{%q:"evt_other",`, name)), body[1:]...)
		}
		return map[string][]byte{"duplicate member": prefix(k), "case-variant member": prefix(upper(k))}
	}
	t.Fatalf("no member holds the event id %q", eventID)
	return nil
}

func upper(s string) string { return string(bytes.ToUpper([]byte(s))) }

// Every API call is retried within the one budget when the provider
// fails N times then succeeds, not retried when it refuses (4xx), and
// answers ErrDown, in bounded time, when it stays down.
func TestContractRetries(t *testing.T) {
	t.Parallel()
	reg, fakes := registry(t)
	eachDriver(t, reg, fakes, func(t *testing.T, p provider.Provider, fake *fakeapi.Server) {
		for _, call := range calls(p) { // one fake per driver: one call at a time
			t.Run(call.name, func(t *testing.T) { requireRetries(t, fake, call) })
		}
	})
}

// call is one of a driver's API calls, run for the n-th time.
type call struct {
	name    string
	run     func(n int) error
	refused error // what a 4xx answers
}

// calls are p's API calls that its provider supports.
func calls(p provider.Provider) []call {
	ctx := context.Background()
	out := []call{{"checkout", func(n int) error {
		_, err := p.OpenCheckout(ctx, providertest.CheckoutRequest(int64(n), product))
		return err
	}, provider.ErrRejected}}
	if p.Available(provider.Listing) == nil {
		out = append(out, call{"list", func(int) error {
			return p.ListEvents(ctx, time.Now().Add(-time.Hour), func(string, []byte) error { return nil })
		}, provider.ErrRejected})
	}
	if p.Available(provider.Refunds) == nil {
		out = append(out, call{"refund", func(n int) error {
			_, err := p.Refund(ctx, provider.RefundRequest{PaymentID: fmt.Sprintf("pay_%d", n), Aliases: []string{fmt.Sprintf("pi_%d", n)},
				Amount: 999, Currency: "usd", IdempotencyKey: fmt.Sprintf("billing-payment-%d-refund", n)})
			return err
		}, provider.ErrNotRefundable})
	}
	return out
}

func requireRetries(t *testing.T, fake *fakeapi.Server, c call) {
	before := fake.Requests()
	require.NoError(t, c.run(1))
	one := fake.Requests() - before // requests of one successful call

	before = fake.Requests()
	fake.FailRequests(http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusTooManyRequests)
	require.NoError(t, c.run(2), "three failures, then served")
	require.Equal(t, one+3, fake.Requests()-before)

	before = fake.Requests()
	fake.FailRequests(http.StatusBadRequest)
	err := c.run(3)
	require.ErrorIs(t, err, c.refused)
	require.Equal(t, 1, fake.Requests()-before, "a 4xx is not retried")

	fake.SetDown(true)
	defer fake.SetDown(false)
	start := time.Now()
	err = c.run(4)
	require.ErrorIs(t, err, provider.ErrDown)
	require.Less(t, time.Since(start), contractRetry.Budget+budgetSlack, "bounded by the budget")
	down, ok := errors.AsType[*provider.DownError](err)
	require.True(t, ok)
	require.GreaterOrEqual(t, down.RetryAfter, time.Second, "the provider's Retry-After")
}

// An empty listing lists nothing and is no error; a provider whose API
// has no listing says so without a call.
func TestContractEmptyListing(t *testing.T) {
	t.Parallel()
	reg, fakes := registry(t)
	eachDriver(t, reg, fakes, func(t *testing.T, p provider.Provider, fake *fakeapi.Server) {
		n := 0
		err := p.ListEvents(context.Background(), time.Now().Add(-time.Hour), func(string, []byte) error { n++; return nil })
		if errors.Is(p.Available(provider.Listing), provider.ErrUnsupported) {
			require.ErrorIs(t, err, provider.ErrNoListing)
			require.Zero(t, fake.Requests())
			return
		}
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// A listing longer than a page lists each event once, newest first, and
// a page that fails is fetched again, not the whole listing: 250 events,
// a later page failing twice, cost exactly two requests more than a clean
// listing.
func TestContractLongListing(t *testing.T) {
	t.Parallel()
	reg, fakes := registry(t)
	eachDriver(t, reg, fakes, func(t *testing.T, p provider.Provider, fake *fakeapi.Server) {
		if p.Available(provider.Listing) != nil {
			return
		}
		now := time.Now()
		for i := range 250 {
			fake.AddEvent(p.Name(), providerevents.CompletedEventAt(p.Name(), fmt.Sprintf("evt_%03d", i), int64(i+1), 999, "usd", now))
		}
		list := func(fail bool) ([]string, int) {
			before, ids := fake.Requests(), []string{}
			err := p.ListEvents(context.Background(), now.Add(-time.Hour), func(id string, _ []byte) error {
				if ids = append(ids, id); fail && len(ids) == 1 {
					fake.FailRequests(http.StatusServiceUnavailable, http.StatusInternalServerError)
				}
				return nil
			})
			require.NoError(t, err)
			return ids, fake.Requests() - before
		}
		clean, requests := list(false)
		require.Greater(t, requests, 1, "more than one page")
		ids, retried := list(true)
		require.Equal(t, clean, ids)
		require.Len(t, ids, 250)
		for i, id := range ids {
			require.Equal(t, fmt.Sprintf("evt_%03d", 249-i), id, "newest first, each once")
		}
		require.Equal(t, requests+2, retried, "the failed page fetched again, nothing else")
	})
}

// Without options a driver still reads events, and refuses everything
// else as not configured, without a call.
func TestContractNotConfigured(t *testing.T) {
	t.Parallel()
	eachDriver(t, drivers.New(nil), nil, func(t *testing.T, p provider.Provider, _ *fakeapi.Server) {
		for _, c := range []provider.Capability{provider.Webhooks, provider.Checkouts} {
			require.ErrorIs(t, p.Available(c), provider.ErrNotConfigured, c.String())
		}
		_, err := p.OpenCheckout(context.Background(), providertest.CheckoutRequest(1, product))
		require.ErrorIs(t, err, provider.ErrNotConfigured)
		_, err = p.Refund(context.Background(), provider.RefundRequest{PaymentID: "pi_1", Amount: 1, Currency: "usd", IdempotencyKey: "k"})
		require.True(t, errors.Is(err, provider.ErrNotConfigured) || errors.Is(err, provider.ErrUnsupported), err)
		_, err = p.Parse(providerevents.CompletedEvent(p.Name(), "evt_1", 1, 999, "usd"))
		require.NoError(t, err)
	})
}
