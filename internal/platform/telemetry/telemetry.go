// Package telemetry is billing's OpenTelemetry tracing: the provider set up
// from the standard OTEL_* environment variables, and the instrumentation
// of each layer a payment crosses (HTTP requests, SQL statements, River
// jobs, log lines).
//
// Tracing is off unless an OTLP endpoint is configured: the global
// provider then stays OpenTelemetry's no-op one and none of the
// instrumentation is wired in (see On), so it costs nothing.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the name billing's own tracers carry.
const instrumentation = "github.com/fibe-dev/billing"

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or its traces-only variant),
// and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none turns
// them off.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the global tracer provider and the W3C propagators when
// Enabled, exporting over OTLP/HTTP as the OTEL_EXPORTER_OTLP_* variables
// say; service is the default service.name (OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES win). The returned function flushes and stops
// the exporter; it is a no-op when tracing is off.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if !Enabled(os.Getenv) {
		return noop, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return noop, fmt.Errorf("telemetry: otlp exporter: %w", err)
	}
	// Later detectors win: the environment overrides the default name.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(service)), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return noop, fmt.Errorf("telemetry: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return tp.Shutdown, nil
}

// installed is set once a real provider is installed: until then the
// instrumentation is not even wired in (HTTPHandler, RiverMiddleware and
// QueryTracer return nothing to call), so tracing off costs nothing.
var installed atomic.Bool

// On reports whether a tracer provider was installed (Setup with an OTLP
// endpoint, or Install). Wire instrumentation after it is decided.
func On() bool { return installed.Load() }

// Install makes tp the global tracer provider with the W3C trace-context
// and baggage propagators (tests install an in-memory recorder this way).
func Install(tp trace.TracerProvider) {
	installed.Store(true)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
}

// tracer is billing's tracer from the global provider, looked up at each
// use so that a provider installed after start-up is honoured.
func tracer() trace.Tracer { return otel.Tracer(instrumentation) }

// Start starts a span named name as a child of ctx's span. While tracing
// is off it costs one interface call and returns ctx unchanged.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return tracer().Start(ctx, name, opts...)
}

// StartClaim starts the span of a webhook delivery's claim, named by the
// event's ids (orderID 0: the event names no order).
func StartClaim(ctx context.Context, provider, eventID, eventType string, orderID int64) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(ctx)
	}
	attrs := []attribute.KeyValue{attribute.String("billing.provider", provider),
		attribute.String("billing.event_id", eventID), attribute.String("billing.event_type", eventType)}
	if orderID != 0 {
		attrs = append(attrs, attribute.String("billing.order_id", strconv.FormatInt(orderID, 10)))
	}
	return Start(ctx, "webhook.claim", trace.WithAttributes(attrs...))
}
