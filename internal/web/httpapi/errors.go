package httpapi

import (
	"errors"
	"net/http"

	"github.com/fibe-dev/billing/internal/platform/errcode"
	"github.com/fibe-dev/billing/internal/web/idempotency"
	"github.com/fibe-dev/billing/internal/web/problem"
)

// Problem is an application/problem+json body (RFC 9457) with a stable
// machine-readable code.
type Problem = problem.Problem

// The API's stable error codes, by name. The API's own answers (request
// validation, routing, limits) use them; a domain error's code is declared
// with the error (package errcode), and the tests that name it here check
// the two agree.
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

// newError is an error of the API's own that already knows its answer
// (the validation of the request itself); its text is its detail.
func newError(status int, code, detail string) error {
	return errcode.New(detail, errcode.Answer{Status: status, Code: code, Detail: detail})
}

func badRequest(code, detail string) error { return newError(http.StatusBadRequest, code, detail) }

// errNotFound answers every missing or foreign id the same way, so that an
// id never reveals whether it exists for someone else.
var errNotFound = errcode.New("no such resource", errcode.NotFound)

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

// writeError answers err as problem+json. The answer is the one err
// declares next to its declaration (package errcode; problem.AnswerOf
// adds the platform's): this layer only asks, and adds what depends on
// the request. A domain error's own text (with its package prefix,
// "enforcer: ...") never reaches a client; 5xx causes are logged.
func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ans := problem.AnswerOf(err)
	if ans.Code == CodeInternal || ans.Code == CodeTimeout || ans.Code == CodeProviderDown {
		ans.Detail += retryAdvice(r, ans.Status)
	}
	if r.Context().Err() != nil {
		// The client went away; nobody will read this answer.
		a.logger.DebugContext(r.Context(), "api request abandoned", "path", r.URL.Path, "error", err)
	} else if ans.Status >= 500 {
		a.logger.ErrorContext(r.Context(), "api error", "method", r.Method, "path", r.URL.Path,
			"request_id", requestID(r.Context()), "error", err)
	} else if errors.Is(err, idempotency.ErrNoPlayer) {
		a.logger.ErrorContext(r.Context(), "api wiring", "error", err)
	}
	if ans.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="billing"`)
	}
	problem.WriteAnswer(w, ans)
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
