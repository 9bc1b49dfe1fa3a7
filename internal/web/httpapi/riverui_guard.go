package httpapi

import (
	"github.com/fibe-dev/billing/internal/web/problem"

	"mime"
	"net/http"
	"strings"
)

// Codes of the River UI's cross-site request guard.
const (
	CodeCrossSiteRequest = "cross_site_request"
	CodeJSONRequired     = "json_required"
)

var (
	errCrossSite = newError(http.StatusForbidden, CodeCrossSiteRequest,
		"a state-changing River UI request must come from the River UI's own origin")
	errJSONRequired = newError(http.StatusForbidden, CodeJSONRequired,
		"a state-changing River UI request must carry a JSON body (Content-Type: application/json)")
)

// riverUIGuard refuses cross-site requests that would change jobs or
// queues. The River UI sits behind Basic auth, and a browser attaches
// cached Basic credentials to any request to our origin, including a form
// another site posts (a CSRF): without this guard, a page an operator
// visits could retry, cancel or delete jobs.
//
// Safe methods (GET, HEAD, OPTIONS) pass. Other requests are refused when
// the browser says they are cross-origin (Sec-Fetch-Site, else an Origin
// whose host is not ours: net/http's CrossOriginProtection), or when their
// body is not JSON; see bodyAllowed for the one exception the UI needs.
func riverUIGuard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isSafeMethod(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		if err := cop.Check(r); err != nil {
			refuse(w, errCrossSite)
			return
		}
		if !bodyAllowed(r) {
			refuse(w, errJSONRequired)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers err with the answer it declares.
func refuse(w http.ResponseWriter, err error) { problem.WriteAnswer(w, problem.AnswerOf(err)) }

func isSafeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// bodyAllowed accepts a JSON body, or no body at all (the UI pauses and
// resumes queues with a bodiless PUT). A form or any other type is what a
// cross-site HTML form can send, and browsers old enough to send neither
// Sec-Fetch-Site nor Origin would slip it past the origin check.
//
// The exception: the River UI's own frontend posts its JSON retry, cancel
// and delete bodies without a Content-Type, so the browser labels them
// text/plain. text/plain passes only when the browser itself vouches that
// the request is same-origin (Sec-Fetch-Site, or an Origin naming our
// host); a page cannot forge either header.
func bodyAllowed(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return r.ContentLength == 0
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
		return false
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return true
	case mt == "text/plain":
		return browserSameOrigin(r)
	}
	return false
}

// browserSameOrigin: the browser marked r as same-origin. Called after the
// origin check passed, so a present header is already known to be ours;
// what matters is that one is present.
func browserSameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin":
		return true
	case "":
		return r.Header.Get("Origin") != ""
	}
	return false // "none": typed or bookmarked by the user, never a fetch
}
