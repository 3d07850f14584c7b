package processor

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// tracing makes one span per exchange, continuing the W3C trace context of
// the request (traceparent, tracestate). Capabilities find the span in their
// context and carry it into the records they write.
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

// start begins the exchange's span as a child of the request's context. With
// tracing off there is no span (nil), and records keep the trace context the
// request carried (kafkaio.WithTraceContext changes nothing without one).
func (t tracing) start(ctx context.Context, kind string, headers route.Headers) (context.Context, trace.Span) {
	if t.tracer == nil {
		return ctx, nil
	}
	ctx = t.prop.Extract(ctx, headerCarrier(headers))
	return t.tracer.Start(ctx, "kafka-ext-proc "+kind, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", headers.Get(":method")),
			attribute.String("url.path", headers.Get(":path")),
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
