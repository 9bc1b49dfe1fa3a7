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
//
// While tracing is off it returns h itself.
func HTTPHandler(h http.Handler) http.Handler {
	if !On() {
		return h
	}
	return otelhttp.NewHandler(h, "http", otelhttp.WithFilter(traced))
}

// traced leaves out the probes and scrapes, which would otherwise start a
// trace every few seconds and bury the requests worth reading.
func traced(r *http.Request) bool {
	return r.URL.Path != "/metrics" && r.URL.Path != "/healthz"
}
