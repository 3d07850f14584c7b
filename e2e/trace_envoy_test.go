package e2e_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/logbuf"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// Envoy, when it traces a request, makes a span for the ext_proc call and
// puts its W3C context in the stream's gRPC metadata; the request's own
// headers still carry the client's context (Envoy adds its own only
// upstream, after the filter).
const (
	envoyTraceID   = "0af7651916cd43dd8448eb211c80319c"
	envoySpanID    = "b7ad6b7169203331"
	envoyParent    = "00-" + envoyTraceID + "-" + envoySpanID + "-01"
	clientTraceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientParent   = "00-" + clientTraceID + "-00f067aa0ba902b7-01"
	traceSecretArg = "token=SECRET-QUERY-0c11"
)

// extProcWithMetadata plays Envoy's side of one Process stream whose
// initial metadata is md: a bodiless request with headers, answered by an
// immediate response, whose status it returns.
func extProcWithMetadata(t *testing.T, e *env, md metadata.MD, headers ...string) int {
	t.Helper()
	conn, err := grpc.NewClient(e.dev.Processor.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 30*time.Second)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(extproctest.RequestHeaders(true, headers...)); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ir := resp.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("the processor answered %T, want an immediate response", resp.GetResponse())
	}
	return int(ir.GetStatus().GetCode())
}

// The processor's span joins the trace Envoy started (the context in the
// ext_proc stream's metadata) rather than the client's, its url.path has
// no query, and the exchange's log line names the trace and the span.
func TestSpanJoinsTheTraceEnvoyStarted(t *testing.T) {
	t.Parallel()
	exp, tracing := inMemoryTracing(t)
	var logs logbuf.Buffer
	e := startEnv(t, fetchConfig, tracing, func(o *stack.DevOptions) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	st := extProcWithMetadata(t, e, metadata.Pairs("traceparent", envoyParent),
		":method", "GET", ":path", "/items/nope?"+traceSecretArg, ":authority", "example.com", ":scheme", "http",
		"traceparent", clientParent)
	if st != 404 {
		t.Fatalf("status %d, want 404", st)
	}
	e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0) // the span ends with the exchange
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if got := s.SpanContext.TraceID().String(); got != envoyTraceID {
		t.Errorf("trace id %s, want Envoy's %s (not the client's %s)", got, envoyTraceID, clientTraceID)
	}
	if got := s.Parent.SpanID().String(); got != envoySpanID || !s.Parent.IsRemote() {
		t.Errorf("parent span %s (remote %v), want Envoy's ext_proc span %s", got, s.Parent.IsRemote(), envoySpanID)
	}
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["url.path"] != "/items/nope" {
		t.Errorf("url.path %q, want /items/nope (no query)", attrs["url.path"])
	}
	if attrs["kafka_ext_proc.route"] != "GET:/items/{id}" {
		t.Errorf("kafka_ext_proc.route %q, want the route's id", attrs["kafka_ext_proc.route"])
	}
	line := logs.String()
	if !strings.Contains(line, `"trace_id":"`+envoyTraceID+`"`) || !strings.Contains(line, `"span_id":"`+s.SpanContext.SpanID().String()+`"`) {
		t.Errorf("the exchange's log line lacks its trace and span ids:\n%s", line)
	}
	if strings.Contains(line, "SECRET-QUERY") {
		t.Errorf("the log holds the query:\n%s", line)
	}

	// Without Envoy's context the request's own is continued.
	exp.Reset()
	if st := extProcWithMetadata(t, e, metadata.MD{}, ":method", "GET", ":path", "/items/nope", ":authority", "example.com",
		":scheme", "http", "traceparent", clientParent); st != 404 {
		t.Fatalf("status %d, want 404", st)
	}
	e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0)
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].SpanContext.TraceID().String() != clientTraceID {
		t.Errorf("without Envoy's context: spans %v, want one in the client's trace %s", spans, clientTraceID)
	}
}

// Through the emulator running the shipped envoy.yaml with its tracing
// blocks uncommented, the processor's span joins the trace as a tracing
// Envoy makes it: the client's trace id, but as a child of Envoy's ext_proc
// span (not of the client's span, which the request headers carry); a
// request without trace context still gets a parent, Envoy's new trace.
func TestSpanJoinsTheTraceThroughTheEmulator(t *testing.T) {
	t.Parallel()
	exp, tracing := inMemoryTracing(t)
	yaml, err := envoy.Uncommented(envoy.DefaultYAML(), "tracing", "tracing-cluster")
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, fetchConfig, tracing, func(o *stack.DevOptions) { o.Envoy = yaml })
	const clientSpanID = "00f067aa0ba902b7"

	span := func(headers ...string) tracetest.SpanStub {
		t.Helper()
		exp.Reset()
		resp, _ := e.request(e.h1, "GET", "/items/nope", "", headers...)
		if resp.StatusCode != 404 {
			t.Fatalf("status %d, want 404", resp.StatusCode)
		}
		e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0) // the span ends with the exchange
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%d spans, want 1", len(spans))
		}
		return spans[0]
	}

	s := span("traceparent", clientParent, "tracestate", "vendor=1")
	if got := s.SpanContext.TraceID().String(); got != clientTraceID {
		t.Errorf("trace id %s, want the client's %s, which Envoy continues", got, clientTraceID)
	}
	p := s.Parent
	if !p.IsValid() || !p.IsRemote() || p.SpanID().String() == clientSpanID || p.TraceID() != s.SpanContext.TraceID() {
		t.Errorf("parent %s/%s (remote %v), want Envoy's ext_proc span in the same trace, not the client's span %s",
			p.TraceID(), p.SpanID(), p.IsRemote(), clientSpanID)
	}
	if got := s.SpanContext.TraceState().String(); got != "vendor=1" {
		t.Errorf("tracestate %q, want the client's, which Envoy passes on", got)
	}

	s = span()
	if p := s.Parent; !p.IsValid() || !p.IsRemote() || p.TraceID() != s.SpanContext.TraceID() {
		t.Errorf("without trace context: parent %s/%s (remote %v), want Envoy's new trace", p.TraceID(), p.SpanID(), p.IsRemote())
	}
}
