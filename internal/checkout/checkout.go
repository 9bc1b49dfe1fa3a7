// Package checkout opens the payment provider's hosted checkout for an
// order: a Stripe Checkout Session, a Paddle transaction or a Creem
// checkout, for exactly the order's pricing snapshot.
//
// The order row is the referee. The order is committed first (keyed by the
// client's Idempotency-Key, so a retry finds it), then the provider is
// called with no transaction open, then its checkout id and URL are stored
// by a conditional UPDATE ... WHERE checkout_id IS NULL: at most one
// provider checkout is ever stored and one URL ever handed out per order.
// Stripe also gets an Idempotency-Key derived from the order id, so a retry
// of the call, or of the whole request after a crash, reopens the same
// session. Paddle and Creem take no idempotency key: a crash between their
// answer and our UPDATE leaves an extra unpaid draft at the provider that
// no customer ever sees (its URL was never handed out).
//
// Timeouts, 429 and 5xx are retried with backoff inside a bounded budget,
// then reported as a *DownError (the API answers 503 with Retry-After; the
// order stays pending and the client's retry resumes it). A provider's 4xx
// is a *RejectedError carrying the provider's message.
package checkout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/fibe-dev/billing/fulfillment"
)

// Errors. Compare with errors.Is; *DownError and *RejectedError carry details.
var (
	// ErrProviderUnavailable: the provider has no API key configured.
	ErrProviderUnavailable = errors.New("checkout: provider not configured")
	// ErrProviderDown: the provider kept failing for the whole retry budget.
	ErrProviderDown = errors.New("checkout: provider unavailable")
	// ErrProviderRejected: the provider refused the request (4xx).
	ErrProviderRejected = errors.New("checkout: provider rejected the checkout")
	// ErrPriceMismatch: the provider's catalogue price for the SKU is not
	// the order's snapshot, a misconfiguration that must not charge.
	ErrPriceMismatch = errors.New("checkout: provider price differs from the order's snapshot")
	// ErrNotConfigured: the SKU lacks the provider id the provider needs.
	ErrNotConfigured = errors.New("checkout: sku not configured for provider")
)

// Request is one checkout to open: the order and its snapshot.
type Request struct {
	OrderID    int64
	SKU        string
	Catalogue  fulfillment.SKU // the SKU's provider ids and product name
	Amount     int64           // minor units, the order's snapshot
	Currency   string          // lower case ISO 4217
	SuccessURL string
	CancelURL  string
}

// ProductName is what the customer sees on the provider's page.
func (r Request) ProductName() string {
	if r.Catalogue.Name != "" {
		return r.Catalogue.Name
	}
	return r.SKU
}

// IdempotencyKey is the provider idempotency key of the order's checkout:
// derived from our order id only, so every attempt for one order shares it.
func (r Request) IdempotencyKey() string { return "billing-checkout-order-" + r.orderRef() }

func (r Request) orderRef() string { return strconv.FormatInt(r.OrderID, 10) }

// Session is a provider's hosted checkout.
type Session struct {
	ID  string
	URL string
}

// Opener makes ONE attempt at opening a provider's checkout. It returns a
// *retryableError for failures worth retrying (timeouts, 429, 5xx), a
// *RejectedError for the provider's refusals.
type Opener interface {
	Open(ctx context.Context, r Request) (*Session, error)
}

// DownError is ErrProviderDown with the provider and a suggested wait.
type DownError struct {
	Provider   string
	RetryAfter time.Duration
	Err        error // the last attempt's failure
}

func (e *DownError) Error() string {
	return fmt.Sprintf("checkout: %s unavailable (retry after %v): %v", e.Provider, e.RetryAfter, e.Err)
}

// Is makes errors.Is(err, ErrProviderDown) hold.
func (e *DownError) Is(target error) bool { return target == ErrProviderDown }

func (e *DownError) Unwrap() error { return e.Err }

// RejectedError is ErrProviderRejected with the provider's status and message.
type RejectedError struct {
	Provider string
	Status   int
	Message  string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("checkout: %s rejected the checkout (%d): %s", e.Provider, e.Status, e.Message)
}

// Is makes errors.Is(err, ErrProviderRejected) hold.
func (e *RejectedError) Is(target error) bool { return target == ErrProviderRejected }

// retryableError is a failure worth another attempt.
type retryableError struct {
	err        error
	retryAfter time.Duration // the provider's Retry-After, if it sent one
}

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

func retryable(err error, after time.Duration) error {
	return &retryableError{err: err, retryAfter: after}
}

// Outcomes of provider calls, the label values of billing_checkout_provider_calls_total.
const (
	outcomeOK       = "ok"
	outcomeRetry    = "retryable_error"
	outcomeRejected = "rejected"
	outcomeError    = "error"
)

var providerCalls = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "billing_checkout_provider_calls_total",
	Help: "Attempts to open a provider checkout, by provider and outcome (ok, retryable_error, rejected, error).",
}, []string{"provider", "outcome"})

func outcomeOf(err error) string {
	var re *retryableError
	switch {
	case err == nil:
		return outcomeOK
	case errors.As(err, &re):
		return outcomeRetry
	case errors.Is(err, ErrProviderRejected):
		return outcomeRejected
	}
	return outcomeError
}
