package processor

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
)

// harness runs a Server on an in-memory gRPC connection and drives it with a
// real grpc-go ext_proc client, playing Envoy's side.
type harness struct {
	t      testing.TB
	srv    *Server
	reg    *prometheus.Registry
	client extprocv3.ExternalProcessorClient
	base   map[string]float64 // counters after the warm-up
}

func newHarness(t testing.TB, cfg *config.Config, opts ...func(*Options)) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	o := Options{Config: cfg, Registerer: reg, Logger: testLogger(t), HTTP: httpkafka.New(nil, nil), GRPC: grpckafka.New(nil, nil)}
	for _, f := range opts {
		f(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	srv.Register(g)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	// Connect now, so that the connection's goroutines exist before a test
	// takes its goroutine baseline.
	conn.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatal("in-memory connection not ready")
		}
	}
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		<-served
		waitIdle(t, srv)
	})
	h := &harness{t: t, srv: srv, reg: reg, client: extprocv3.NewExternalProcessorClient(conn)}
	h.warmUp()
	return h
}

// warmUp runs one exchange, so that every goroutine of the connection exists
// (the server's transport starts asynchronously) before a test takes its
// goroutine baseline; its count is subtracted by counter.
func (h *harness) warmUp() {
	s := h.open()
	s.headers(true, httpReq("GET", "/__warm-up")...)
	s.recv()
	s.finish()
	waitIdle(h.t, h.srv)
	h.base = map[string]float64{}
	h.base = h.counters()
}

// waitIdle waits until no exchange or goroutine of one is left.
func waitIdle(t testing.TB, s *Server) {
	t.Helper()
	idle := make(chan struct{})
	go func() {
		s.live.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("exchanges still running 10s after the test")
	}
}

// stream is one Process stream, driven as Envoy would.
type stream struct {
	t      testing.TB
	s      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

// open starts a Process stream; md are initial metadata pairs (as
// grpc_initial_metadata would set).
func (h *harness) open(md ...string) *stream {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	s, err := h.client.Process(ctx)
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	st := &stream{t: h.t, s: s, cancel: cancel}
	h.t.Cleanup(cancel)
	return st
}

func (s *stream) send(m *extprocv3.ProcessingRequest) {
	s.t.Helper()
	if err := s.s.Send(m); err != nil && !errors.Is(err, io.EOF) {
		s.t.Fatalf("send: %v", err)
	}
}

func (s *stream) headers(eos bool, kv ...string) {
	s.t.Helper()
	s.send(extproctest.RequestHeaders(eos, kv...))
}
func (s *stream) body(b []byte, eos bool) { s.t.Helper(); s.send(extproctest.RequestBody(b, eos)) }

// recv returns the next answer message.
func (s *stream) recv() *extprocv3.ProcessingResponse {
	s.t.Helper()
	r, err := s.s.Recv()
	if err != nil {
		s.t.Fatalf("recv: %v", err)
	}
	return r
}

// finish does what Envoy does after the final message: cancel the stream.
func (s *stream) finish() { s.cancel() }

// immediate expects an ImmediateResponse.
func (s *stream) immediate() *extprocv3.ImmediateResponse {
	s.t.Helper()
	r := s.recv()
	ir := r.GetImmediateResponse()
	if ir == nil {
		s.t.Fatalf("want an ImmediateResponse, got %v", r)
	}
	return ir
}

// streamed expects a StreamedImmediateResponse.
func (s *stream) streamed() *extprocv3.StreamedImmediateResponse {
	s.t.Helper()
	r := s.recv()
	sr := r.GetStreamedImmediateResponse()
	if sr == nil {
		s.t.Fatalf("want a StreamedImmediateResponse, got %v", r)
	}
	return sr
}

// header returns the raw value of a header, failing if Value is used instead.
func header(t testing.TB, hs []*corev3.HeaderValue, name string) (string, bool) {
	t.Helper()
	for _, h := range hs {
		if h.GetValue() != "" {
			t.Fatalf("header %q uses value, not raw_value", h.GetKey())
		}
		if h.GetKey() == name {
			return string(h.GetRawValue()), true
		}
	}
	return "", false
}

func mutationHeaders(ir *extprocv3.ImmediateResponse) []*corev3.HeaderValue {
	var hs []*corev3.HeaderValue
	for _, o := range ir.GetHeaders().GetSetHeaders() {
		hs = append(hs, o.GetHeader())
	}
	return hs
}

// Test handlers.

type httpFunc func(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse

func (f httpFunc) HandleHTTP(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
	return f(ctx, req)
}

type grpcFunc func(ctx context.Context, call *handler.GRPCCall) handler.Status

func (f grpcFunc) HandleGRPC(ctx context.Context, call *handler.GRPCCall) handler.Status {
	return f(ctx, call)
}

// echo answers every request message with itself, then OK.
func echo(ctx context.Context, call *handler.GRPCCall) handler.Status {
	for {
		m, err := call.In.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return handler.OK()
		}
		if err != nil {
			return handler.NewStatus(13, err.Error())
		}
		if err := call.Out.Send(ctx, m); err != nil {
			return handler.NewStatus(13, err.Error())
		}
	}
}

// Configurations.

func mustPath(t testing.TB, raw string) *config.PathTemplate {
	t.Helper()
	p, err := config.ParsePathTemplate(raw)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func with(c config.Capability, topic string) *config.With {
	return &config.With{Capability: c, Topic: config.Template{Raw: topic, Parts: []config.TemplatePart{{Literal: topic}}}}
}

// testConfig has one http-kafka and one grpc-kafka binding.
func testConfig(t testing.TB) *config.Config {
	return &config.Config{
		Source: "test",
		Bindings: []*config.Binding{
			{Name: "http0", Type: config.HTTPKafka, Routes: []*config.Route{
				{Index: 0, When: []config.Condition{{Method: "POST", Path: mustPath(t, "/items")}}, With: with(config.Produce, "items-requests")},
				{Index: 1, When: []config.Condition{{Method: "GET", Path: mustPath(t, "/items/{id}")}}, With: with(config.Fetch, "items-snapshots")},
				{Index: 2, When: []config.Condition{{Path: mustPath(t, "/echo")}}, With: with(config.Produce, "echo")},
				{Index: 3, Guarded: []config.GuardRequirement{{Guard: "jwt0", Roles: []string{"admin"}}},
					When: []config.Condition{{Path: mustPath(t, "/admin")}}, With: with(config.Produce, "admin")},
			}},
			{Name: "grpc0", Type: config.GRPCKafka, Routes: []*config.Route{
				{Index: 0, When: []config.Condition{{GRPCMethod: "example.Echo/*"}}, With: with(config.Produce, "echo-requests")},
				{Index: 1, When: []config.Condition{{Service: "example.Fetch"}}, With: with(config.Fetch, "events")},
				{Index: 2, Guarded: []config.GuardRequirement{{Guard: "jwt0", Roles: []string{"admin"}}},
					When: []config.Condition{{Service: "example.Admin"}}, With: with(config.Produce, "admin")},
			}},
		},
		Limits: config.Limits{MaxBody: 64},
	}
}

// Request header sets as Envoy sends them.

func httpReq(method, path string, extra ...string) []string {
	return append([]string{":authority", "example.com", ":path", path, ":method", method, ":scheme", "http",
		"x-forwarded-proto", "http", "x-request-id", "req-1"}, extra...)
}

func grpcReq(path string, extra ...string) []string {
	return append([]string{":authority", "example.com", ":path", path, ":method", "POST", ":scheme", "http",
		"content-type", "application/grpc", "te", "trailers", "x-request-id", "req-2"}, extra...)
}

// counter reads kafka_ext_proc_exchanges_total by binding, kind and answer
// (the HTTP code, else the gRPC code, else the outcome: cancelled or
// protocol), summed over routes and capabilities, less the warm-up.
func (h *harness) counter(binding, kind, status string) float64 {
	h.t.Helper()
	k := binding + "/" + kind + "/" + status
	return h.counters()[k] - h.base[k]
}

func (h *harness) counters() map[string]float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kafka_ext_proc_exchanges_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			answer := l["code"]
			if answer == labelNone {
				answer = l["grpc_code"]
			}
			if answer == labelNone {
				answer = l["outcome"]
			}
			out[l["binding"]+"/"+l["kind"]+"/"+answer] += m.GetCounter().GetValue()
		}
	}
	return out
}

func (h *harness) gauge(name string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
