package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/telemetry"
)

// BenchmarkOff measures the hooks while tracing is off (the global
// provider is OpenTelemetry's no-op one, as Setup leaves it without an
// OTLP endpoint): what every request and statement pays for them. Run it
// alone (-run '^$'): the package's tests install a provider.
func BenchmarkOff(b *testing.B) {
	ctx := context.Background()
	b.Run("sql", func(b *testing.B) {
		var tr telemetry.SQLTracer
		data := pgx.TraceQueryStartData{SQL: "SELECT 1"}
		for b.Loop() {
			c := tr.TraceQueryStart(ctx, nil, data)
			tr.TraceQueryEnd(c, nil, pgx.TraceQueryEndData{})
		}
	})
	b.Run("metadata", func(b *testing.B) {
		for b.Loop() {
			_ = telemetry.JobMetadata(ctx)
		}
	})
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	req := httptest.NewRequest(http.MethodGet, "/v1/wallets", nil)
	b.Run("http-bare", func(b *testing.B) {
		for b.Loop() {
			ok.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
	b.Run("http-wrapped", func(b *testing.B) {
		h := telemetry.HTTPHandler(ok)
		for b.Loop() {
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
}
