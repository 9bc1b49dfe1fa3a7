package telemetry

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// HTTPHandler gives every request a server span (otelhttp), named after
// the route pattern it matched ("POST /webhooks/{provider}") and joined
// to the caller's trace when the request carries a traceparent. otelhttp
// records method, route, path and status, never headers or bodies: an
// Authorization header or a webhook payload never reaches a span.
func HTTPHandler(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "http")
}
