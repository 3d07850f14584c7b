package stack

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP trace collector keeping what it receives.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.ResourceSpans
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, req.GetResourceSpans()...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serviceNames are the service.name of each span received, by span name.
func (c *collector) serviceNames() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for _, rs := range c.spans {
		var service string
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out[s.GetName()] = service
			}
		}
	}
	return out
}

func grpcCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, c)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return c, lis.Addr().String()
}

func httpCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = c.Export(r.Context(), &req)
		w.Header().Set("content-type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

func exportOne(t *testing.T, o OTLPOptions, span string) {
	t.Helper()
	tp, err := OTLPTracing(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if tp == nil {
		t.Fatal("tracing is off")
	}
	_, s := tp.Tracer("test").Start(t.Context(), span)
	s.End()
	if err := tp.Shutdown(t.Context()); err != nil { // flushes
		t.Fatal(err)
	}
}

func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// The standard OTEL_* variables configure the exporter, the protocol and
// the service name; flags override them.
func TestOTLPTracingFollowsTheStandardVariables(t *testing.T) {
	gc, gaddr := grpcCollector(t)
	hc, haddr := httpCollector(t)

	// Everything from the environment: the exporter reads the endpoint itself.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+gaddr)
	t.Setenv("OTEL_SERVICE_NAME", "shop-edge")
	exportOne(t, OTLPOptions{}, "from-env")
	if got := gc.serviceNames()["from-env"]; got != "shop-edge" {
		t.Errorf("a span exported over OTLP/gRPC from the environment: service %q (received %v), want shop-edge", got, gc.serviceNames())
	}

	// http/protobuf from the environment.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", haddr)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	exportOne(t, OTLPOptions{}, "over-http")
	if got := hc.serviceNames()["over-http"]; got != "shop-edge" {
		t.Errorf("a span exported over OTLP/HTTP: service %q (received %v), want shop-edge", got, hc.serviceNames())
	}

	// Flags win over the variables: endpoint and protocol back to gRPC.
	t.Setenv("OTEL_SERVICE_NAME", "")
	exportOne(t, OTLPOptions{Endpoint: gaddr, Protocol: "grpc", Insecure: true}, "from-flags")
	if got, ok := gc.serviceNames()["from-flags"]; !ok || got != "kafka-ext-proc" {
		t.Errorf("a span exported with flags: service %q (received %v), want the default kafka-ext-proc", got, gc.serviceNames())
	}
}

func TestOTLPTracingOffAndRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		o    OTLPOptions
		err  string // "" = off without error
	}{
		{"nothing set", OTLPOptions{Getenv: envOf()}, ""},
		{"exporter none", OTLPOptions{Getenv: envOf("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4317", "OTEL_TRACES_EXPORTER", "none")}, ""},
		{"sdk disabled", OTLPOptions{Endpoint: "x:4317", Getenv: envOf("OTEL_SDK_DISABLED", "true")}, ""},
		{"zipkin", OTLPOptions{Getenv: envOf("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4317", "OTEL_TRACES_EXPORTER", "zipkin")},
			"OTEL_TRACES_EXPORTER=zipkin: kafka-ext-proc exports otlp (or none)"},
		{"json", OTLPOptions{Endpoint: "x:4317", Protocol: "http/json", Getenv: envOf()}, `OTLP protocol "http/json": want grpc or http/protobuf`},
		{"sampler", OTLPOptions{Endpoint: "x:4317", Getenv: envOf("OTEL_TRACES_SAMPLER", "sometimes")}, "OTEL_TRACES_SAMPLER=sometimes: want always_on"},
		{"ratio", OTLPOptions{Endpoint: "x:4317", Getenv: envOf("OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "2")},
			"OTEL_TRACES_SAMPLER_ARG=2: want a ratio from 0 to 1"},
		{"url", OTLPOptions{Endpoint: "ftp://x:4317", Getenv: envOf()}, `OTLP endpoint "ftp://x:4317": want host:port or an http:// or https:// URL`},
	} {
		tp, err := OTLPTracing(t.Context(), c.o)
		switch {
		case c.err == "" && (err != nil || tp != nil):
			t.Errorf("%s: provider %v, error %v; want tracing off", c.name, tp, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
		if tp != nil {
			_ = tp.Shutdown(t.Context())
		}
	}
}
