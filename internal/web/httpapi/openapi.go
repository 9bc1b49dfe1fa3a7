package httpapi

import (
	"net/http"

	apidoc "github.com/fibe-dev/billing/api"
	"github.com/fibe-dev/billing/internal/web/problem"
)

// openAPI serves the OpenAPI document of this API, without auth: a client
// is written from it before it has a key.
func (s *Server) openAPI() http.Handler {
	return instrument("GET /v1/openapi.json", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, err := apidoc.JSON()
		if err != nil {
			s.opts.Logger.ErrorContext(r.Context(), "openapi document", "error", err)
			problem.Write(w, http.StatusInternalServerError, CodeInternal, "the API document is unavailable")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = w.Write(doc)
	}))
}
