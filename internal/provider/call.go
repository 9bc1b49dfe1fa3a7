package provider

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fibe-dev/billing/internal/platform/errcode"
)

// CheckoutRequest is one hosted checkout to open: our order and its
// pricing snapshot.
type CheckoutRequest struct {
	OrderID     int64
	SKU         string
	ProductName string // what the customer sees on the provider's page
	// CatalogueID is the SKU's id in this provider's catalogue, if it has
	// one: the Creem product (Creem prices by product, so it is required),
	// the Paddle price (then used instead of a price made from the snapshot).
	CatalogueID string
	Amount      int64  // minor units, the order's snapshot
	Currency    string // lower case ISO 4217
	SuccessURL  string
	CancelURL   string
}

// OrderRef is the order id as the provider's metadata carries it.
func (r CheckoutRequest) OrderRef() string { return strconv.FormatInt(r.OrderID, 10) }

// Session is a provider's hosted checkout.
type Session struct {
	ID  string
	URL string
}

// RefundRequest asks a provider to give a payment back.
type RefundRequest struct {
	PaymentID string // the provider's payment id
	// Aliases are every id the payment is known by (PaymentID among them):
	// Stripe refunds a PaymentIntent or a charge, not a Checkout Session.
	Aliases  []string
	Amount   int64 // minor units
	Currency string
	// IdempotencyKey is derived from our payment row id, so a retried job
	// never refunds twice: the provider answers the first refund again.
	IdempotencyKey string
}

// Errors of API calls. Compare with errors.Is; *DownError and
// *RejectedError carry details. Each a checkout can meet declares its
// answer to the checkout's client (package errcode).
var (
	// ErrDown: the provider kept failing for the whole retry budget.
	ErrDown = errcode.New("provider: unavailable", downAnswer)
	// ErrRejected: the provider refused the request (a 4xx).
	ErrRejected = errcode.New("provider: rejected the request", errcode.Answer{Status: http.StatusBadGateway,
		Code: "provider_rejected", Detail: "the payment provider rejected the checkout"})
	// ErrNotRefundable: the payment cannot be refunded automatically, and
	// retrying does not help: it is left for an operator.
	ErrNotRefundable = errors.New("provider: payment cannot be refunded automatically")
	// ErrPriceMismatch: the provider's catalogue price for the SKU is not
	// the order's snapshot, a misconfiguration that must not charge.
	ErrPriceMismatch = errcode.New("provider: catalogue price differs from the order's snapshot", misconfigured)
	// ErrSKUNotConfigured: the SKU lacks the catalogue id the provider needs.
	ErrSKUNotConfigured = errcode.New("provider: sku not configured for provider", misconfigured)
)

var (
	downAnswer = errcode.Answer{Status: http.StatusServiceUnavailable, Code: "provider_down",
		Detail: "the payment provider is not answering"}
	misconfigured = errcode.Answer{Status: http.StatusInternalServerError, Code: "checkout_misconfigured",
		Detail: "this SKU is misconfigured at the payment provider; nothing was charged"}
)

// DownError is ErrDown with the provider and a suggested wait.
type DownError struct {
	Provider   string
	RetryAfter time.Duration
	Err        error // the last attempt's failure
}

func (e *DownError) Error() string {
	return fmt.Sprintf("%s unavailable (retry after %v): %v", e.Provider, e.RetryAfter, e.Err)
}

// Is makes errors.Is(err, ErrDown) hold.
func (e *DownError) Is(target error) bool { return target == ErrDown }

func (e *DownError) Unwrap() error { return e.Err }

// Answer is ErrDown's, with the provider's wait (at least a second).
func (e *DownError) Answer() errcode.Answer {
	a := downAnswer
	a.RetryAfter = max(e.RetryAfter, time.Second)
	return a
}

// RejectedError is ErrRejected with the provider's status and message.
type RejectedError struct {
	Provider string
	Status   int
	Message  string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%s rejected the request (%d): %s", e.Provider, e.Status, e.Message)
}

// Is makes errors.Is(err, ErrRejected) hold.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Answer is ErrRejected's, with the provider's own message.
func (e *RejectedError) Answer() errcode.Answer {
	return errcode.Answer{Status: http.StatusBadGateway, Code: "provider_rejected",
		Detail: e.Provider + " rejected the checkout: " + e.Message}
}

// transientError is a failure worth another attempt.
type transientError struct {
	err        error
	retryAfter time.Duration // the provider's Retry-After, if it sent one
}

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// Transient marks err as worth another attempt, after at least retryAfter
// (the provider's Retry-After; 0 when it sent none).
func Transient(err error, retryAfter time.Duration) error {
	return &transientError{err: err, retryAfter: retryAfter}
}

// IsTransient reports whether err was marked Transient, and its wait.
func IsTransient(err error) (time.Duration, bool) {
	var te *transientError
	if errors.As(err, &te) {
		return te.retryAfter, true
	}
	return 0, false
}

// RetryAfter reads a Retry-After header in seconds (0 when absent), capped
// at a minute.
func RetryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || n <= 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, time.Minute)
}

// TransientStatus reports whether an HTTP status is worth another attempt
// at any provider: 429 (slow down) and 5xx.
func TransientStatus(code int) bool {
	return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
}
