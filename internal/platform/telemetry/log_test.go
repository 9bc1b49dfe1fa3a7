package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fibe-dev/billing/internal/platform/telemetry"
)

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()

	var buf bytes.Buffer
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("process", "web")
	logger.InfoContext(ctx, "inside")
	logger.Info("outside")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var in, out map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &in))
	require.NoError(t, json.Unmarshal(lines[1], &out))
	require.Equal(t, span.SpanContext().TraceID().String(), in["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), in["span_id"])
	require.Equal(t, "web", in["process"])
	require.NotContains(t, out, "trace_id")
}

func TestEnabledFollowsOTELEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		require.Equal(t, tc.want, telemetry.Enabled(func(k string) string { return tc.env[k] }), "%v", tc.env)
	}
}

// The text log format (a terminal's) prints what a provider chose escaped:
// slog's text handler quotes every message, key and value holding a
// control character, a non-printing rune or invalid UTF-8, and the trace
// handler keeps it so. A handler swapped for one that writes values raw
// fails here.
func TestTextLogsEscapeControlCharacters(t *testing.T) {
	t.Parallel()
	const hostile = "pi_\x1b[2J\x1b[31mred\u009b0m\u202eevil\x7f\xff"
	var buf bytes.Buffer
	logger := slog.New(telemetry.LogHandler(slog.NewTextHandler(&buf, nil))).With("payment", hostile)
	logger.WithGroup("evt\x1b").Info("claimed "+hostile, "id", hostile, "error", errors.New("bad "+hostile),
		"ids", []string{hostile}, slog.Group("g", "k\u202e", hostile))

	out := buf.String()
	require.Equal(t, 1, strings.Count(out, "\n"), "one line:\n%q", out)
	for _, r := range strings.TrimSuffix(out, "\n") {
		require.True(t, unicode.IsPrint(r), "the log line holds %U:\n%q", r, out)
	}
	require.True(t, utf8.ValidString(out), "%q", out)
	require.Contains(t, out, `payment="pi_\x1b[2J\x1b[31mred\u009b0m\u202eevil\x7f\xff"`)
}
