package processor

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// tracing makes one span per exchange. Its parent is the W3C trace context
// (traceparent, tracestate) Envoy puts in the ext_proc stream's gRPC
// metadata when Envoy traces the request — its span for the ext_proc call —
// else the request's own headers, which carry the client's context (Envoy
// adds its own to the request only upstream, after the ext_proc filter).
// Capabilities find the span in their context and carry it into the
// records they write.
type tracing struct {
	tracer trace.Tracer // nil: tracing is off
	prop   propagation.TextMapPropagator
}

func newTracing(tp trace.TracerProvider) tracing {
	if tp == nil {
		return tracing{}
	}
	return tracing{tracer: tp.Tracer("github.com/kafka-ext-proc/kafka-ext-proc/processor"), prop: propagation.TraceContext{}}
}

// start begins the exchange's span. With tracing off there is no span
// (nil), and records keep the trace context the request carried
// (produce.WithTraceContext changes nothing without one). path is the
// request's path without its query, which may carry credentials.
func (t tracing) start(ctx context.Context, kind, path string, headers route.Headers) (context.Context, trace.Span) {
	if t.tracer == nil {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	parent := t.prop.Extract(ctx, metadataCarrier(md))
	if !trace.SpanContextFromContext(parent).IsValid() {
		parent = t.prop.Extract(ctx, headerCarrier(headers))
	}
	return t.tracer.Start(parent, "kafka-ext-proc "+kind, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", headers.Get(":method")),
			attribute.String("url.path", path),
			attribute.String("rpc.system", kindSystem(kind)),
		))
}

// end records the outcome and ends the span.
func endSpan(span trace.Span, binding, route, status string, failed bool) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("kafka_ext_proc.binding", binding), attribute.String("kafka_ext_proc.route", route),
		attribute.String("kafka_ext_proc.status", status))
	if failed {
		span.SetStatus(codes.Error, status)
	}
	span.End()
}

// traceAttrs are the span's ids for the exchange's log lines, so a line
// leads to its trace; none without a span.
func traceAttrs(span trace.Span) []slog.Attr {
	if span == nil {
		return nil
	}
	sc := span.SpanContext()
	if !sc.IsValid() {
		return nil
	}
	return []slog.Attr{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
}

func kindSystem(kind string) string {
	if kind == "grpc" {
		return "grpc"
	}
	return "http"
}

// headerCarrier reads request headers for the propagator (names are lower case).
type headerCarrier route.Headers

func (h headerCarrier) Get(key string) string { return route.Headers(h).Get(key) }
func (h headerCarrier) Set(string, string)    {}
func (h headerCarrier) Keys() []string {
	keys := make([]string, len(h))
	for i, hd := range h {
		keys[i] = hd.Name
	}
	return keys
}

// metadataCarrier reads the ext_proc stream's incoming gRPC metadata
// (names are lower case).
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := m[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (m metadataCarrier) Set(string, string) {}
func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
