package telemetry

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// metaTraceparent is the job metadata key of the enqueuer's trace context
// (W3C traceparent, as otelriver names it too).
const metaTraceparent = "traceparent"

// RiverMiddleware is the River middleware of traced jobs, in order: the
// enqueuing request's trace context carried in each job's metadata and
// restored when the job is worked, a span for every job worked (otelriver,
// named after the job's kind), and on that span a link to the enqueuer and
// the job's ids (order, event, Marquee).
//
// The job's span is a child of the span that enqueued it, in the same
// trace, so that one purchase reads as one trace: delivery, claim, fulfil
// job, wallet post. It also links to it, which is how tools that split
// traces per process show the hop.
//
// The trace context is injected by our own middleware rather than
// otelriver's: it runs before otelriver's insert span exists, so a job
// points at the request that enqueued it, and it keeps a traceparent set
// earlier (a webhook delivery's, when a batch of claims enqueues the
// fulfilments of many deliveries at once).
//
// While tracing is off it returns none.
func RiverMiddleware() []rivertype.Middleware {
	if !On() {
		return nil
	}
	return []rivertype.Middleware{
		&carryMiddleware{},
		otelriver.NewMiddleware(&otelriver.MiddlewareConfig{EnableWorkSpanJobKindSuffix: true}),
		&workMiddleware{},
	}
}

// JobMetadata is job metadata carrying ctx's trace context, for a job
// inserted later or elsewhere on ctx's behalf (nil when ctx is not traced).
func JobMetadata(ctx context.Context) []byte {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	b, err := json.Marshal(carrier)
	if err != nil {
		return nil
	}
	return b
}

// carryMiddleware carries the trace context from insert to work.
type carryMiddleware struct{ river.MiddlewareDefaults }

// InsertMany adds ctx's trace context to each job that carries none.
func (m *carryMiddleware) InsertMany(ctx context.Context, many []*rivertype.JobInsertParams,
	doInner func(context.Context) ([]*rivertype.JobInsertResult, error),
) ([]*rivertype.JobInsertResult, error) {
	if meta := JobMetadata(ctx); meta != nil {
		for _, p := range many {
			p.Metadata = withTraceparent(p.Metadata, meta)
		}
	}
	return doInner(ctx)
}

// withTraceparent merges meta's trace context into metadata unless it
// already has one.
func withTraceparent(metadata, meta []byte) []byte {
	fields := map[string]json.RawMessage{}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &fields); err != nil {
			return metadata
		}
	}
	if _, ok := fields[metaTraceparent]; ok {
		return metadata
	}
	var add map[string]json.RawMessage
	if err := json.Unmarshal(meta, &add); err != nil {
		return metadata
	}
	for k, v := range add {
		fields[k] = v
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return metadata
	}
	return b
}

// Work makes the enqueuer's span the parent of the job's. Only a job
// inserted while tracing was on has a traceparent; others cost one scan of
// their metadata.
func (m *carryMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if bytes.Contains(job.Metadata, []byte(metaTraceparent)) {
		if sc := enqueuer(job.Metadata); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return doInner(ctx)
}

type workMiddleware struct{ river.MiddlewareDefaults }

// jobIDFields are the args fields copied onto a job's span: ids only,
// never amounts or payloads.
var jobIDFields = []string{"order_id", "event_id", "provider", "payment_id", "reversal_id", "marquee_id", "playground_id", "day"}

// Work links the job's span to the request that enqueued it and names the
// ids the job is about.
func (m *workMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return doInner(ctx)
	}
	if sc := enqueuer(job.Metadata); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("link", "enqueued_by")}})
	}
	span.SetAttributes(attribute.Int64("river.job.id", job.ID))
	span.SetAttributes(argIDs(job.EncodedArgs)...)
	return doInner(ctx)
}

// enqueuer is the span context stored in a job's metadata.
func enqueuer(metadata []byte) trace.SpanContext {
	var fields map[string]any
	if err := json.Unmarshal(metadata, &fields); err != nil {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{}
	for k, v := range fields {
		if s, ok := v.(string); ok {
			carrier[k] = s
		}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), carrier)
	return trace.SpanContextFromContext(ctx)
}

// argIDs are the jobIDFields present in a job's args, as billing.* attributes.
func argIDs(args []byte) []attribute.KeyValue {
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber() // ids above 2^53 stay exact
	if err := dec.Decode(&fields); err != nil {
		return nil
	}
	var attrs []attribute.KeyValue
	for _, k := range jobIDFields {
		switch v := fields[k].(type) {
		case string:
			attrs = append(attrs, attribute.String("billing."+k, v))
		case json.Number:
			attrs = append(attrs, attribute.String("billing."+k, v.String()))
		}
	}
	return attrs
}
