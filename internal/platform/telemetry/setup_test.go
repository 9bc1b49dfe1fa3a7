package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fibe-dev/billing/internal/platform/telemetry"
)

// TestSetupExportsOverOTLP points the standard OTEL_* variables at an
// OTLP/HTTP receiver and checks a span reaches it on shutdown; without
// them Setup installs nothing.
func TestSetupExportsOverOTLP(t *testing.T) {
	var got atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" && len(b) > 0 {
			got.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer receiver.Close()

	before := otel.GetTracerProvider()
	shutdown, err := telemetry.Setup(context.Background(), "billing-test")
	require.NoError(t, err)
	require.Equal(t, before, otel.GetTracerProvider(), "tracing must stay off without OTEL_* endpoint")
	require.NoError(t, shutdown(context.Background()))

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	shutdown, err = telemetry.Setup(context.Background(), "billing-test")
	require.NoError(t, err)
	_, isSDK := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	require.True(t, isSDK)
	_, span := telemetry.Start(context.Background(), "exported")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, shutdown(ctx))
	require.Positive(t, got.Load(), "no span reached the OTLP receiver")
}
