// Package stripe is billing's Stripe driver: it verifies Stripe-Signature,
// reads Stripe's events (Checkout Sessions completed, charges refunded,
// disputes), opens Checkout Sessions, lists the Events API and refunds,
// through one stripe-go client whose every call goes through one retry
// policy (stripe-go's own retries are off).
//
// The payment is the Checkout Session; its PaymentIntent is an alias, and
// refunds and disputes name the payment by the PaymentIntent, with the
// charge as a second reference.
package stripe

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/fibe-dev/billing/internal/provider"
)

// Name is the provider's name.
const Name = provider.Stripe

// Driver is the Stripe driver.
type Driver struct {
	client *stripeapi.Client
	policy *provider.Policy
	signed provider.Signed
}

// New returns a Stripe driver. o.APIKey is the secret key (sk_...);
// o.APIURL "" is Stripe's API.
func New(o provider.Options) *Driver {
	noRetries := int64(0) // the policy owns retries, with one key across attempts
	cfg := &stripeapi.BackendConfig{HTTPClient: o.Client(), MaxNetworkRetries: &noRetries,
		LeveledLogger: &stripeapi.LeveledLogger{Level: stripeapi.LevelError}}
	if o.APIURL != "" {
		cfg.URL = stripeapi.String(o.APIURL)
	}
	support := provider.Support{Provider: Name, Secrets: len(o.WebhookSecrets) > 0, APIKey: o.APIKey != ""}
	return &Driver{
		client: stripeapi.NewClient(o.APIKey, stripeapi.WithBackends(stripeapi.NewBackendsWithConfig(cfg))),
		policy: provider.NewPolicy(support, o.Retry, classify),
		signed: provider.Signed{Name: SignatureHeader, Header: header, Secrets: o.WebhookSecrets, Tolerance: o.Tolerance},
	}
}

// Name implements provider.Provider.
func (d *Driver) Name() string { return Name }

// Available implements provider.Provider.
func (d *Driver) Available(c provider.Capability) error { return d.policy.Available(c) }

// classify is the policy's reading of a stripe-go error: 409 (a concurrent
// request with our key is in flight), 429 and 5xx are worth retrying, other
// 4xx are Stripe's refusal, and anything without a status is the
// network's fault.
func classify(err error) error {
	var se *stripeapi.Error
	if !errors.As(err, &se) {
		return provider.Transient(err, 0)
	}
	code := se.HTTPStatusCode
	if code == http.StatusConflict || code == 0 || provider.TransientStatus(code) {
		return provider.Transient(err, 0)
	}
	msg := se.Msg
	if msg == "" {
		msg = "status " + strconv.Itoa(code)
	}
	return &provider.RejectedError{Provider: Name, Status: code, Message: msg}
}

// SignatureHeader carries Stripe's signature.
const SignatureHeader = "Stripe-Signature"

// header is `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, each v1 an
// HMAC-SHA256 of "<t>.<body>".
var header = provider.Header{Sep: ",", TS: "t", Sig: "v1", Join: "."}

// Verify implements provider.Provider: any v1 may match any secret
// (rotation), and t must lie within the tolerance of now.
func (d *Driver) Verify(h http.Header, body []byte, now time.Time) error {
	return d.signed.Verify(h, body, now)
}

// ParseHeader parses a Stripe-Signature value. Unknown schemes (v0) and
// undecodable v1 values are skipped, as Stripe's own library does.
func ParseHeader(value string) (provider.Timestamp, [][]byte, error) { return header.Parse(value) }
