package httpapi

import (
	"net/http"

	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
)

// mountRoutes mounts the /v1 API, the webhook intake and the index.
func (s *Server) mountRoutes() error {
	s.mux.Handle("POST /webhooks/{provider}", s.webhooks())
	s.mux.Handle("GET /v1/openapi.json", s.openAPI())
	for _, route := range []string{"GET /{$}", "GET /v1"} {
		s.mux.Handle(route, s.index(route))
	}
	// The document's paths carry no trailing slash; /v1/ (what a person
	// types) is sent to the one that has the index.
	s.mux.Handle("GET /v1/{$}", http.RedirectHandler("/v1", http.StatusPermanentRedirect))
	s.mountV1()
	for pattern, h := range s.opts.Pages {
		s.mux.Handle(pattern, h)
	}
	return nil
}

// webhooks is the provider webhook intake (package webhook does the work).
func (s *Server) webhooks() http.Handler {
	return webhook.NewHandler(webhook.Options{Pool: s.opts.Pool, River: s.opts.River,
		Providers: provider.Select[webhook.Intake](s.opts.Providers), Logger: s.opts.Logger, Now: s.opts.Now})
}
