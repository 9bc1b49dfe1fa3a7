package httpapi

import (
	"net/http"
	"path"
	"strings"

	"github.com/fibe-dev/billing/internal/web/problem"
)

// maxHeaderBytes bounds a request's header block. No request of this
// service needs more than a few hundred bytes (an API key, an
// Idempotency-Key of at most 255 characters, a provider's signature), so
// 64 KiB is generous; beyond it the answer is a 431 problem. (Go's server
// refuses a header block over its own read limit, 1 MiB, before any
// handler runs, and closes the connection; ProblemListener makes that
// answer a problem too.)
const maxHeaderBytes = 64 << 10

// preflight refuses, before routing, a request no route may see: a header
// block over maxHeaderBytes, or a path that is not in canonical form. The
// mux would answer the latter with a 307 to the cleaned path; a client
// that sent /v1//orders or /v1/x/../orders has a bug, and a redirect would
// hide it (and make a POST's body travel twice), so it is a 404 like any
// path that names nothing.
func preflight(w http.ResponseWriter, r *http.Request) bool {
	if headerBytes(r) > maxHeaderBytes {
		problem.Write(w, http.StatusRequestHeaderFieldsTooLarge, CodeHeadersTooLarge,
			"the request's header fields exceed 64 KiB")
		return false
	}
	if r.Method != http.MethodConnect && !isCleanPath(r.URL.EscapedPath()) {
		problem.Write(w, http.StatusNotFound, CodeNotFound, "no such route: paths must not contain //, . or .. segments")
		return false
	}
	return true
}

// headerBytes approximates the header block's size as it came on the wire.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Host) + 16
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	return n
}

// isCleanPath reports whether p is what the mux's path cleaning leaves
// unchanged (path.Clean, keeping a trailing slash).
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean == p
}
