package e2e_test

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// inMemoryTracing records the processor's spans.
func inMemoryTracing(t *testing.T) (*tracetest.InMemoryExporter, func(*stack.DevOptions)) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return exp, func(o *stack.DevOptions) { o.TracerProvider = tp }
}

// Each exchange is a span that continues the request's W3C trace context.
func TestExchangeSpanContinuesTheRequestTrace(t *testing.T) {
	t.Parallel()
	exp, tracing := inMemoryTracing(t)
	e := startEnv(t, fetchConfig, tracing)
	resp, _ := e.request(e.h1, "GET", "/items/nope", "", "traceparent", traceParent)
	if resp.StatusCode != 404 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0) // the span ends with the exchange
	var found bool
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			continue
		}
		found = true
		if s.Parent.SpanID().String() != "00f067aa0ba902b7" || !s.Parent.IsRemote() {
			t.Errorf("parent = %v, want the request's span 00f067aa0ba902b7", s.Parent.SpanID())
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["kafka_ext_proc.status"] != "404" || attrs["kafka_ext_proc.binding"] != "http0" || attrs["url.path"] != "/items/nope" {
			t.Errorf("attributes %v", attrs)
		}
	}
	if !found {
		t.Fatalf("no span in the request's trace among %d spans", len(exp.GetSpans()))
	}
}

// A produced record carries the trace context of the exchange's span, so a
// consumer continues the request's trace through the processor.
func TestRecordsCarryTheTraceContext(t *testing.T) {
	t.Parallel()
	exp, tracing := inMemoryTracing(t)
	e := startEnv(t, exchangeConfig, tracing)
	resp, _ := e.request(e.h1, "POST", "/things/1", `{"a":1}`, "traceparent", traceParent, "content-type", "application/json")
	if resp.StatusCode != 204 {
		t.Fatalf("oneway produce: %d", resp.StatusCode)
	}
	e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0)
	var spanID string
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
			spanID = s.SpanContext.SpanID().String()
		}
	}
	if spanID == "" {
		t.Fatal("no exported span in the request's trace")
	}
	recs := e.readTopic("things")
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	got, _ := recHeader(recs[0], "traceparent")
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + spanID + "-01"; got != want {
		t.Fatalf("record traceparent %q, want %q (the exchange's span)", got, want)
	}
}
