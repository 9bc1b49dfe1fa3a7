// Package problem writes every error answer of the HTTP surface (the /v1
// API, the webhook intake, the replay cache's own refusals, the router's
// 404s) as an application/problem+json body (RFC 9457) with a stable
// machine-readable code, so that clients parse one error format.
//
// It knows nothing of domain errors: each caller maps its errors to a
// status and code in its own one place and hands the result here.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
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
