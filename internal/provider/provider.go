// Package provider is what billing's payment-provider drivers share: the
// Provider interface each one implements (one package per provider, like
// River's drivers: internal/provider/stripe, paddle and creem), the events
// intake reads from them, their typed errors, the bounded retry policy each
// driver instantiates once for all of its API calls, and the Registry that
// the program builds once (package drivers).
//
// It knows no provider: what Stripe, Paddle or Creem are (signature
// headers, event shapes, API clients, what their errors mean) lives in
// their packages only. Consumers depend on the few methods they use,
// declared where they use them: the webhook intake verifies and parses,
// checkouts open, reconciliation lists, fulfilment refunds.
package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fibe-dev/billing/internal/platform/errcode"
)

// Names of the payment providers billing supports: the provider column of
// orders, payments and webhook_events, the {provider} of
// POST /webhooks/{provider}, and the provider label of every metric.
const (
	Stripe = "stripe"
	Paddle = "paddle"
	Creem  = "creem"
)

// Names lists every supported provider (what the orders table accepts).
func Names() []string { return []string{Stripe, Paddle, Creem} }

// Known reports whether name is a supported provider.
func Known(name string) bool { return slices.Contains(Names(), name) }

// ErrUnknown is a provider name that is not one of Names: a checkout for
// it is refused, and so is signing one of its events in development.
var ErrUnknown = errcode.New("provider: unknown payment provider", errcode.Answer{Status: http.StatusBadRequest,
	Code: "unknown_provider", Detail: "provider must be " + oneOf(Names())})

// oneOf spells names as "a, b or c".
func oneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Provider is one payment provider's driver. Its API calls run outside any
// database transaction and are retried by its one Policy.
type Provider interface {
	// Name is one of Names.
	Name() string
	// Available says whether the driver can do c with its options and its
	// provider's API: nil, or an error wrapping ErrNotConfigured or
	// ErrUnsupported that says why not. It makes no call.
	Available(c Capability) error
	// Verify checks a delivery's signature over its raw body and headers,
	// against every configured secret (several during a rotation), and
	// its signed timestamp, if the provider signs one, against now.
	Verify(h http.Header, body []byte, now time.Time) error
	// Parse reads a verified body, or a listed event, into an Event: an
	// error wrapping ErrMalformedPayload when it cannot.
	Parse(body []byte) (*Event, error)
	// OpenCheckout opens the provider's hosted checkout for r.
	OpenCheckout(ctx context.Context, r CheckoutRequest) (*Session, error)
	// ListEvents calls fn with the id and body (the shape Parse reads) of
	// each event intake acts on (completed payments, refunds, disputes,
	// chargebacks) created since since; fn's error stops the listing and
	// is returned.
	ListEvents(ctx context.Context, since time.Time, fn func(eventID string, body []byte) error) error
	// Refund gives r's payment back and returns the provider's refund id.
	Refund(ctx context.Context, r RefundRequest) (refundID string, err error)
	// Facts are what the rest of billing knows of the provider, as data.
	Facts() Facts
}

// Capability is one of the things a Provider does.
type Capability int

// Capabilities.
const (
	Webhooks  Capability = iota + 1 // verify deliveries: needs signing secrets
	Checkouts                       // open checkouts: needs an API key
	Listing                         // list events: needs an API key and an API that lists
	Refunds                         // refund payments: needs an API key and a driver that refunds
)

func (c Capability) String() string {
	switch c {
	case Webhooks:
		return "webhooks"
	case Checkouts:
		return "checkouts"
	case Listing:
		return "event listing"
	case Refunds:
		return "refunds"
	}
	return fmt.Sprintf("capability %d", int(c))
}

// Errors of Available. Compare with errors.Is.
var (
	// ErrNotConfigured: the driver lacks the secret or key c needs.
	ErrNotConfigured = errors.New("provider: not configured")
	// ErrUnsupported: the provider's API, or its driver, cannot do c.
	ErrUnsupported = errors.New("provider: not supported")
	// ErrNoListing: the provider's API has no event listing (Creem).
	ErrNoListing = fmt.Errorf("%w: the API has no event listing", ErrUnsupported)
)

// Support is what a driver can do: what its options hold and what its
// provider's API offers. A driver's Available is its Support's Check.
type Support struct {
	Provider string
	Secrets  bool // signing secrets are set
	APIKey   bool // an API key is set
	// NoListing and NoRefunds mark an API (or driver) without them.
	NoListing, NoRefunds bool
	// Err, when set, is why the driver cannot call its API at all (its
	// client could not be built from its options).
	Err error
}

// Check implements Provider.Available.
func (s Support) Check(c Capability) error {
	switch {
	case c == Webhooks && !s.Secrets:
		return fmt.Errorf("%w: %s has no webhook signing secret", ErrNotConfigured, s.Provider)
	case c == Webhooks:
		return nil
	case s.Err != nil:
		return fmt.Errorf("%w: %s client: %w", ErrNotConfigured, s.Provider, s.Err)
	case c == Listing && s.NoListing:
		return fmt.Errorf("%w (%s)", ErrNoListing, s.Provider)
	case c == Refunds && s.NoRefunds:
		return fmt.Errorf("%w: %s refunds are not automated", ErrUnsupported, s.Provider)
	case c < Webhooks || c > Refunds:
		return fmt.Errorf("%w: %s", ErrUnsupported, c)
	case !s.APIKey:
		return fmt.Errorf("%w: %s has no API key (%s)", ErrNotConfigured, s.Provider, c)
	}
	return nil
}

// Options are what every driver's New takes.
type Options struct {
	// APIKey authenticates the driver's API calls; without one it can
	// verify and parse deliveries but not open, list or refund.
	APIKey string
	// APIURL is the API's base URL ("" is the provider's own): a sandbox,
	// stripe-mock or a fake in tests.
	APIURL string
	// WebhookSecrets verify deliveries: any of them may have signed one
	// (rotation). None: deliveries are refused as not configured.
	WebhookSecrets []string
	// Tolerance bounds a signed timestamp's distance from our clock, both
	// ways; 0 is DefaultTolerance.
	Tolerance time.Duration
	// HTTPClient makes the API calls; nil is a client with a 30s timeout.
	HTTPClient *http.Client
	// Retry bounds every API call; zero fields take their defaults.
	Retry Retry
}

// Client is o.HTTPClient, or the default one.
func (o Options) Client() *http.Client {
	if o.HTTPClient != nil {
		return o.HTTPClient
	}
	return &http.Client{Timeout: 30 * time.Second}
}
