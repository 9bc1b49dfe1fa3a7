// Package problem writes every error answer of the HTTP surface (the /v1
// API, the webhook intake, the replay cache's own refusals, the router's
// 404s) as an application/problem+json body (RFC 9457) with a stable
// machine-readable code, so that clients parse one error format.
//
// It keeps no map of domain errors: each error declares its own answer,
// next to its declaration (package errcode), and AnswerOf asks for it. It
// answers itself only the platform's failures that no package of billing
// declares: a commit its standby did not confirm, a database out of
// reach, a deadline.
package problem

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/errcode"
)

// ContentType is the media type of every error answer.
const ContentType = "application/problem+json"

// DefaultRetryAfter is the Retry-After of a 503 or 429 whose writer did not
// set one: short, since these answers are transient by nature.
const DefaultRetryAfter = time.Second

// Problem is an application/problem+json body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail,omitempty"`
}

// Internal is the answer to an error that declares none: a bug or a
// failure the client cannot act on, whose cause is logged, not shown.
var Internal = errcode.Answer{Status: http.StatusInternalServerError, Code: "internal", Detail: "internal error"}

// AnswerOf is what err means to a client: the answer the first error in its
// chain declares (errcode.Of), else the platform's answer, else Internal.
// A declared answer wins wherever it sits in the chain: a body cut short
// wraps the connection's failure, and the client's 400 is the answer, not
// a 503.
func AnswerOf(err error) errcode.Answer {
	if a, ok := errcode.Of(err); ok {
		return a
	}
	switch {
	case errors.Is(err, durable.ErrNotDurable):
		// Applied on the primary, unconfirmed by its standby: the retry
		// replays it, or runs it again if a failover lost it.
		return errcode.Answer{Status: http.StatusServiceUnavailable, Code: "not_durable",
			Detail: "the database could not confirm the write on its standby; retry with the same Idempotency-Key after Retry-After"}
	case durable.Unavailable(err):
		return errcode.Answer{Status: http.StatusServiceUnavailable, Code: "unavailable",
			Detail: "the database is unreachable or changing primary; retry with the same Idempotency-Key after Retry-After"}
	case errors.Is(err, context.DeadlineExceeded):
		return errcode.Answer{Status: http.StatusServiceUnavailable, Code: "timeout", Detail: "the request took too long"}
	}
	return Internal
}

// WriteAnswer is Write of a, with its Retry-After when it has one.
func WriteAnswer(w http.ResponseWriter, a errcode.Answer) {
	if a.RetryAfter > 0 {
		SetRetryAfter(w, a.RetryAfter)
	}
	Write(w, a.Status, a.Code, a.Detail)
}

// Write answers status with a problem body. A 503 or 429 always carries
// Retry-After (DefaultRetryAfter unless the caller set one): a client told
// to come back must be told when.
func Write(w http.ResponseWriter, status int, code, detail string) {
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Del("Content-Length") // a handler may have set one for a body never sent
	if (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests) && h.Get("Retry-After") == "" {
		SetRetryAfter(w, DefaultRetryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write(Body(status, code, detail))
}

// Body is the problem+json body Write sends, for a writer that has no
// http.ResponseWriter (an answer written on the raw connection).
func Body(status int, code, detail string) []byte {
	b, _ := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Code: code, Detail: detail}) // cannot fail: strings and an int
	return append(b, '\n')
}

// SetRetryAfter sets the Retry-After header to d in whole seconds, at
// least one (the header has no finer unit, and 0 invites a hot loop).
func SetRetryAfter(w http.ResponseWriter, d time.Duration) {
	secs := int64((d + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
}
