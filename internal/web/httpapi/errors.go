package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/domain/playground"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/web/idempotency"
	"github.com/fibe-dev/billing/internal/web/problem"
	"github.com/fibe-dev/billing/internal/web/requests"
	"github.com/fibe-dev/billing/wallet"
)

// Problem is an application/problem+json body (RFC 9457) with a stable
// machine-readable code.
type Problem = problem.Problem

// Stable error codes of the API.
const (
	CodeInvalidRequest        = "invalid_request"
	CodeInvalidAmount         = "invalid_amount"
	CodeUnauthorized          = "unauthorized"
	CodeNotFound              = "not_found"
	CodeInsufficientBalance   = "insufficient_balance"
	CodeMarqueeNotFunded      = "marquee_not_funded"
	CodeIdempotencyKeyInvalid = "invalid_idempotency_key"
	CodeIdempotencyKeyInUse   = "idempotency_key_in_use"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
	CodeBodyTooLarge          = "body_too_large"
	CodeInternal              = "internal"
	CodeMethodNotAllowed      = "method_not_allowed"
	CodeProviderUnavailable   = "provider_unavailable"
	CodeProviderDown          = "provider_down"
	CodeProviderRejected      = "provider_rejected"
	CodeCheckoutMisconfigured = "checkout_misconfigured"
	CodeBodyIncomplete        = "incomplete_body"
	CodeBodyTimeout           = "body_timeout"
	CodeUnsupportedMediaType  = "unsupported_media_type"
	CodeRateLimited           = "rate_limited"
	CodeHeadersTooLarge       = "headers_too_large"
	CodeTimeout               = "timeout"
	CodeOutstandingDebt       = "outstanding_debt"
	CodeNotDurable            = "not_durable"
	CodeUnavailable           = "unavailable"
)

// inUseRetryAfter is the Retry-After of a 409 idempotency_key_in_use: the
// first request is still running, and most finish well within a second.
const inUseRetryAfter = time.Second

// apiError is an error that already knows its answer (validation of the
// request itself).
type apiError struct {
	status int
	code   string
	detail string
}

func (e *apiError) Error() string { return e.detail }

func badRequest(code, detail string) error {
	return &apiError{status: http.StatusBadRequest, code: code, detail: detail}
}

// errNotFound answers every missing or foreign id the same way, so that an
// id never reveals whether it exists for someone else.
var errNotFound = &apiError{status: http.StatusNotFound, code: CodeNotFound, detail: "no such resource"}

// statusOf is the ONE place that maps domain errors to HTTP answers. Its
// details are the API's own words: a domain error's text (with its package
// prefix, "enforcer: ...") never reaches a client. A 5xx detail says what
// went wrong; writeError adds how to retry, which depends on the request.
//
// Insufficient balance is 409 Conflict: the request is well formed but
// conflicts with the wallet's current state, and may succeed after a
// top-up (with a new Idempotency-Key: the 409 itself is cached like any
// other 4xx answer). A Marquee that is not funded is 402 Payment Required.
func statusOf(err error) (status int, code, detail string) {
	var ae *apiError
	var debt *wallet.OutstandingDebtError
	var reserved *wallet.ReservedKeyError
	switch {
	case errors.As(err, &debt):
		// Before insufficient_balance: buying Mana settles the debt first.
		return http.StatusConflict, CodeOutstandingDebt,
			fmt.Sprintf("the player owes %d Mana after a refund or chargeback; a purchase settles it first", debt.Mana)
	case errors.As(err, &ae):
		return ae.status, ae.code, ae.detail
	case errors.As(err, &reserved):
		return http.StatusBadRequest, CodeIdempotencyKeyInvalid, fmt.Sprintf(
			"Idempotency-Key %q %s %q, which billing reserves for %s: choose another key", reserved.Key, reserved.Where(), reserved.Namespace, reserved.Use)
	case errors.Is(err, players.ErrUnauthorized):
		return http.StatusUnauthorized, CodeUnauthorized, "a valid API key is required: Authorization: Bearer <key>"
	case errors.Is(err, enforcer.ErrNotFound), errors.Is(err, fulfillment.ErrNotFound),
		errors.Is(err, playground.ErrNotFound), errors.Is(err, wallet.ErrUnknownCurrency),
		errors.Is(err, requests.ErrNotFound):
		return http.StatusNotFound, CodeNotFound, "no such resource"
	case errors.Is(err, requests.ErrExpired):
		// River deletes finished jobs after its retention period.
		return http.StatusNotFound, CodeNotFound, "this request is too old to be reported"
	case errors.Is(err, enforcer.ErrNotFunded):
		return http.StatusPaymentRequired, CodeMarqueeNotFunded, "the Marquee is not funded: add Sparks and fund it first"
	case errors.Is(err, wallet.ErrInsufficientBalance):
		return http.StatusConflict, CodeInsufficientBalance, "the wallet's balance is too low"
	case errors.Is(err, wallet.ErrIdempotencyKeyReused), errors.Is(err, idempotency.ErrReused):
		return http.StatusUnprocessableEntity, CodeIdempotencyKeyReused, "this Idempotency-Key was used for a different request"
	case errors.Is(err, idempotency.ErrInUse):
		return http.StatusConflict, CodeIdempotencyKeyInUse, "a request with this Idempotency-Key is still running; retry later"
	case errors.Is(err, idempotency.ErrInvalidKey):
		return http.StatusBadRequest, CodeIdempotencyKeyInvalid, "Idempotency-Key must be 1 to 255 printable ASCII characters, quoted or bare"
	case errors.Is(err, idempotency.ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body too large"
	case errors.Is(err, idempotency.ErrBodyTimeout):
		return http.StatusRequestTimeout, CodeBodyTimeout, "the request body did not arrive in time; nothing was done"
	case errors.Is(err, idempotency.ErrBodyIncomplete):
		return http.StatusBadRequest, CodeBodyIncomplete, "the request body ended early; nothing was done"
	case errors.Is(err, wallet.ErrInvalidAmount):
		return http.StatusBadRequest, CodeInvalidAmount, "amounts must be positive integers"
	case errors.Is(err, wallet.ErrOverflow):
		return http.StatusBadRequest, CodeInvalidAmount, "amount too large"
	case errors.Is(err, enforcer.ErrUnknownPlan):
		return http.StatusBadRequest, "unknown_plan", "no such plan"
	case errors.Is(err, enforcer.ErrInvalidName):
		return http.StatusBadRequest, "invalid_name",
			fmt.Sprintf("a Marquee's name must be 1 to %d printable characters", enforcer.MaxNameLength)
	case errors.Is(err, playground.ErrInvalidName):
		return http.StatusBadRequest, "invalid_name", fmt.Sprintf(
			"a playground's name must be at most %d printable characters (without one it is %q)", playground.MaxNameLength, playground.DefaultName)
	case errors.Is(err, fulfillment.ErrUnknownSKU):
		return http.StatusBadRequest, "unknown_sku", "no such SKU"
	case errors.Is(err, fulfillment.ErrUnknownProvider):
		return http.StatusBadRequest, "unknown_provider", "provider must be stripe, paddle or creem"
	case errors.Is(err, checkout.ErrProviderUnavailable):
		return http.StatusUnprocessableEntity, CodeProviderUnavailable, "this payment provider is not available: it has no API key configured"
	case errors.Is(err, provider.ErrDown):
		return http.StatusServiceUnavailable, CodeProviderDown, "the payment provider is not answering"
	case errors.Is(err, provider.ErrRejected):
		return http.StatusBadGateway, CodeProviderRejected, rejectedDetail(err)
	case errors.Is(err, provider.ErrPriceMismatch), errors.Is(err, provider.ErrSKUNotConfigured):
		return http.StatusInternalServerError, CodeCheckoutMisconfigured, "this SKU is misconfigured at the payment provider; nothing was charged"
	case errors.Is(err, fulfillment.ErrCheckoutKeyReused):
		return http.StatusUnprocessableEntity, CodeIdempotencyKeyReused, "this Idempotency-Key was used for a different request"
	case errors.Is(err, durable.ErrNotDurable):
		// Applied on the primary, unconfirmed by its standby: the retry
		// replays it, or runs it again if a failover lost it.
		return http.StatusServiceUnavailable, CodeNotDurable,
			"the database could not confirm the write on its standby; retry with the same Idempotency-Key after Retry-After"
	case durable.Unavailable(err):
		return http.StatusServiceUnavailable, CodeUnavailable,
			"the database is unreachable or changing primary; retry with the same Idempotency-Key after Retry-After"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, CodeTimeout, "the request took too long"
	}
	return http.StatusInternalServerError, CodeInternal, "internal error"
}

// retryAdvice ends the detail of a 5xx that a retry may cure, for r: a read
// is simply retried; a mutation is retried with its Idempotency-Key, which
// makes the retry safe (a 5xx is never stored, so the retry runs again).
func retryAdvice(r *http.Request, status int) string {
	when := ""
	if status == http.StatusServiceUnavailable {
		when = " after Retry-After"
	}
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return "; retry" + when
	case r.Header.Get(idempotency.HeaderKey) != "":
		return "; retry" + when + " with the same Idempotency-Key"
	}
	return "; retry" + when + " with an Idempotency-Key (a request without one runs again on every retry)"
}

// rejectedDetail is the provider's own message for a refused checkout.
func rejectedDetail(err error) string {
	if re, ok := errors.AsType[*provider.RejectedError](err); ok {
		return re.Provider + " rejected the checkout: " + re.Message
	}
	return "the payment provider rejected the checkout"
}

// writeError answers err as problem+json; 5xx causes are logged, not shown.
func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, detail := statusOf(err)
	if code == CodeInternal || code == CodeTimeout || code == CodeProviderDown {
		detail += retryAdvice(r, status)
	}
	if r.Context().Err() != nil {
		// The client went away; nobody will read this answer.
		a.logger.DebugContext(r.Context(), "api request abandoned", "path", r.URL.Path, "error", err)
	} else if status >= 500 {
		a.logger.ErrorContext(r.Context(), "api error", "method", r.Method, "path", r.URL.Path,
			"request_id", requestID(r.Context()), "error", err)
	} else if errors.Is(err, idempotency.ErrNoPlayer) {
		a.logger.ErrorContext(r.Context(), "api wiring", "error", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="billing"`)
	}
	if down, ok := errors.AsType[*provider.DownError](err); ok {
		problem.SetRetryAfter(w, max(down.RetryAfter, time.Second))
	}
	if code == CodeIdempotencyKeyInUse {
		problem.SetRetryAfter(w, inUseRetryAfter)
	}
	problem.Write(w, status, code, detail)
}

// unmatched answers a request no route matched (the mux's 404, or its 405
// with the Allow header) as problem+json like every other error, instead
// of the mux's text/plain: clients parse one error format.
type unmatched struct {
	http.ResponseWriter
	wrote bool
}

func (u *unmatched) WriteHeader(status int) {
	if u.wrote {
		return
	}
	u.wrote = true
	code, detail := CodeNotFound, "no such route"
	if status == http.StatusMethodNotAllowed {
		code, detail = CodeMethodNotAllowed, "method not allowed on this route; see the Allow header"
	}
	u.Header().Del("X-Content-Type-Options")
	problem.Write(u.ResponseWriter, status, code, detail)
}

// Write drops the mux's text body: WriteHeader wrote the problem.
func (u *unmatched) Write(b []byte) (int, error) {
	if !u.wrote {
		u.WriteHeader(http.StatusOK)
	}
	return len(b), nil
}
