package telemetry

import (
	"context"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// maxQueryText bounds the statement text kept on a span.
const maxQueryText = 2048

// SQLTracer is a pgx tracer (queries and batches) that gives each SQL
// statement a client span named after its operation, with the statement
// text but never its arguments: arguments carry webhook payloads, key
// hashes and amounts, and the text is enough to find the statement.
//
// Only statements under a recording span are traced: River's own polling,
// leader election and maintenance run outside any request or job and would
// otherwise start a new trace every fraction of a second.
type SQLTracer struct{}

var (
	_ pgx.QueryTracer = SQLTracer{}
	_ pgx.BatchTracer = SQLTracer{}
)

// QueryTracer is the tracer for a pool's ConnConfig.Tracer: SQLTracer,
// or nil (no tracing hook at all) while tracing is off.
func QueryTracer() pgx.QueryTracer {
	if !On() {
		return nil
	}
	return SQLTracer{}
}

var dbSystem = attribute.String("db.system.name", "postgresql")

// TraceQueryStart implements pgx.QueryTracer.
func (SQLTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	ctx, _ = Start(ctx, operation(data.SQL), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(dbSystem, attribute.String("db.query.text", queryText(data.SQL))))
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (SQLTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	endSQL(trace.SpanFromContext(ctx), data.CommandTag.RowsAffected(), data.Err)
}

// TraceBatchStart implements pgx.BatchTracer: a span for the batch.
func (SQLTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	n := 0
	if data.Batch != nil {
		n = data.Batch.Len()
	}
	ctx, _ = Start(ctx, "batch", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(dbSystem, attribute.Int("db.operation.batch.size", n)))
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer: each statement of the batch
// is a child span, from when its result was read.
func (SQLTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	_, span := Start(ctx, operation(data.SQL), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(data.ReadStartTime),
		trace.WithAttributes(dbSystem, attribute.String("db.query.text", queryText(data.SQL))))
	endSQL(span, data.CommandTag.RowsAffected(), data.Err)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (SQLTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	endSQL(trace.SpanFromContext(ctx), -1, data.Err)
}

func endSQL(span trace.Span, rows int64, err error) {
	if !span.IsRecording() {
		return
	}
	if rows >= 0 {
		span.SetAttributes(attribute.Int64("db.response.returned_rows", rows))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// operation is a statement's first keyword (SELECT, INSERT, WITH, BEGIN),
// the span's low-cardinality name.
func operation(sql string) string {
	sql = strings.TrimLeftFunc(sql, unicode.IsSpace)
	for strings.HasPrefix(sql, "--") { // a leading comment line
		_, sql, _ = strings.Cut(sql, "\n")
		sql = strings.TrimLeftFunc(sql, unicode.IsSpace)
	}
	end := strings.IndexFunc(sql, func(r rune) bool { return !unicode.IsLetter(r) })
	if end < 0 {
		end = len(sql)
	}
	if end == 0 {
		return "SQL"
	}
	return strings.ToUpper(sql[:end])
}

func queryText(sql string) string {
	if len(sql) > maxQueryText {
		return sql[:maxQueryText]
	}
	return sql
}
