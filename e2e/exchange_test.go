package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const exchangeConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: "/things/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: things, key: "${params.id}" }
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ method: example.Echo/* }]
        exit: kafka0
        with: { capability: produce, topic: echo-requests }
limits: { max-body: 1KiB }
`

// recorder wraps the capability handlers and keeps what reached them.
type recorder struct {
	mu    sync.Mutex
	http  []*handler.HTTPRequest
	grpc  []*handler.GRPCCall
	inner handler.HTTPHandler
	ginn  handler.GRPCHandler
}

func (r *recorder) HandleHTTP(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
	r.mu.Lock()
	r.http = append(r.http, req)
	r.mu.Unlock()
	return r.inner.HandleHTTP(ctx, req)
}

func (r *recorder) HandleGRPC(ctx context.Context, call *handler.GRPCCall) handler.Status {
	r.mu.Lock()
	r.grpc = append(r.grpc, call)
	r.mu.Unlock()
	return r.ginn.HandleGRPC(ctx, call)
}

func (r *recorder) lastHTTP(t *testing.T) *handler.HTTPRequest {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.http) == 0 {
		t.Fatal("no request reached the http-kafka handler")
	}
	return r.http[len(r.http)-1]
}

func recording(rec *recorder) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) {
		o.WrapHTTP = func(h handler.HTTPHandler) handler.HTTPHandler { rec.inner = h; return rec }
		o.WrapGRPC = func(h handler.GRPCHandler) handler.GRPCHandler { rec.ginn = h; return rec }
	}
}

// checkEncoding asserts the documented header encoding: lower-case names,
// the pseudo-headers, the HCM's x-request-id and x-forwarded-proto, and a
// repeated header as repeated entries in order.
func checkEncoding(t *testing.T, h route.Headers, method, path string) {
	t.Helper()
	for _, hd := range h {
		if hd.Name != strings.ToLower(hd.Name) {
			t.Errorf("header name %q is not lower case", hd.Name)
		}
	}
	for name, want := range map[string]string{":method": method, ":path": path, ":scheme": "http", "x-forwarded-proto": "http"} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if !strings.HasPrefix(h.Get(":authority"), "127.0.0.1:") {
		t.Errorf(":authority = %q", h.Get(":authority"))
	}
	if h.Get("x-request-id") == "" {
		t.Error("no x-request-id")
	}
	if got := h.Values("x-multi"); len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Errorf("x-multi = %q, want [one two]", got)
	}
	if got := h.Get("x-custom"); got != "Mixed Case Value" {
		t.Errorf("x-custom = %q", got)
	}
}

func TestRequestsReachTheProcessorEncodedAsEnvoyDoes(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := startEnv(t, exchangeConfig, recording(rec))

	for _, c := range []struct {
		name   string
		client *http.Client
		proto  int
	}{{"HTTP/1.1", e.h1, 1}, {"h2c", e.h2c, 2}} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.request(c.client, "POST", "/things/7?x=1", `{"a":1}`,
				"X-Custom", "Mixed Case Value", "X-Multi", "one", "X-Multi", "two", "content-type", "application/json")
			if resp.ProtoMajor != c.proto {
				t.Fatalf("spoke HTTP/%d", resp.ProtoMajor)
			}
			// A oneway produce: 204 once the record is acknowledged.
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("%d %s %q", resp.StatusCode, resp.Header.Get("content-type"), body)
			}
			req := rec.lastHTTP(t)
			checkEncoding(t, req.Headers, "POST", "/things/7?x=1")
			if string(req.Body) != `{"a":1}` || req.Match.Params["id"] != "7" || req.Path != "/things/7" || req.RawQuery != "x=1" {
				t.Errorf("body %q params %v path %q query %q", req.Body, req.Match.Params, req.Path, req.RawQuery)
			}
		})
	}

	t.Run("gRPC", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-custom", "Mixed Case Value", "x-multi", "one", "x-multi", "two")
		err := e.grpcConn().Invoke(ctx, "/example.Echo/Say", &emptypb.Empty{}, &emptypb.Empty{})
		// A oneway produce: OK once the record is acknowledged.
		if status.Code(err) != codes.OK {
			t.Fatalf("err = %v, want OK", err)
		}
		rec.mu.Lock()
		n := len(rec.grpc)
		rec.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d calls reached the grpc-kafka handler", n)
		}
		call := rec.grpc[0]
		checkEncoding(t, call.Headers, "POST", "/example.Echo/Say")
		if call.Service != "example.Echo" || call.Method != "Say" || call.Headers.Get("content-type") != "application/grpc" {
			t.Errorf("service %q method %q content-type %q", call.Service, call.Method, call.Headers.Get("content-type"))
		}
	})
}

func TestNoRoute(t *testing.T) {
	t.Parallel()
	e := startEnv(t, exchangeConfig)
	resp, body := e.request(e.h1, "DELETE", "/nowhere", "")
	var p handler.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || resp.StatusCode != 404 || p.Status != 404 || p.Detail == "" ||
		resp.Header.Get("content-type") != "application/problem+json" {
		t.Fatalf("no HTTP route: %d %q (%v)", resp.StatusCode, body, err)
	}
	err := e.grpcConn().Invoke(context.Background(), "/other.Service/Call", &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.Unimplemented || status.Convert(err).Message() == "" {
		t.Fatalf("no gRPC route: %v", err)
	}
}

// draining reads every request message before answering, as streaming
// capabilities do, so the exchange's per-message limit is what ends the call.
type draining struct{}

func (draining) HandleGRPC(ctx context.Context, call *handler.GRPCCall) handler.Status {
	var last []byte
	for {
		msg, err := call.In.Recv(ctx)
		if err != nil {
			if err := call.Out.Send(ctx, last); err != nil {
				return handler.Status{Code: codes.Internal, Message: err.Error()}
			}
			return handler.Status{Code: codes.OK}
		}
		last = msg
	}
}

func TestBodyOverTheLimit(t *testing.T) {
	t.Parallel()
	e := startEnv(t, exchangeConfig, func(o *stack.DevOptions) {
		o.WrapGRPC = func(handler.GRPCHandler) handler.GRPCHandler { return draining{} }
	})
	for _, c := range []*http.Client{e.h1, e.h2c} {
		resp, body := e.request(c, "POST", "/things/1", strings.Repeat("x", 2048))
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "1KiB") && !strings.Contains(body, "1024") {
			t.Errorf("HTTP/%d: %d %q", resp.ProtoMajor, resp.StatusCode, body)
		}
	}
	big := &rawMessage{b: make([]byte, 2048)}
	err := e.grpcConn().Invoke(context.Background(), "/example.Echo/Say", big, &rawMessage{}, grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() == "" {
		t.Fatalf("gRPC message over the limit: %v", err)
	}
	// A message within the limit goes through the same handler.
	if err := e.grpcConn().Invoke(context.Background(), "/example.Echo/Say", &rawMessage{b: make([]byte, 100)}, &rawMessage{}, grpc.ForceCodecV2(rawCodec{})); status.Code(err) != codes.OK {
		t.Fatalf("gRPC message within the limit: %v", err)
	}
}

// A client that goes away cancels its exchange: every goroutine the request
// started (emulator exchange, processor exchange, long poll) ends.
func TestClientDisconnectEndsTheExchange(t *testing.T) {
	// Serial: it counts the process's request goroutines.
	e := startEnv(t, exchangeConfig)
	e.put("items", 0, "k", []byte("v"))
	resp, _ := e.request(e.h2c, "GET", "/items/k", "", "prefer", "wait=10")
	if resp.StatusCode != 200 {
		t.Fatalf("warm-up: %d", resp.StatusCode)
	}
	etag := resp.Header.Get("etag")
	e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0)
	if n := requestGoroutines(); n != 0 {
		t.Fatalf("%d request goroutines before the request", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/items/k", nil)
	req.Header.Set("if-none-match", etag)
	req.Header.Set("prefer", "wait=60")
	done := make(chan error, 1)
	go func() {
		_, err := e.h2c.Do(req)
		done <- err
	}()
	e.waitGauge("kafka_ext_proc_fetch_waiters", 1)
	if n := requestGoroutines(); n == 0 {
		t.Fatal("a held request shows no request goroutine: the measure is blind")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	e.waitGauge("kafka_ext_proc_fetch_waiters", 0)
	e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0)
	deadline := time.Now().Add(10 * time.Second)
	for n := requestGoroutines(); n != 0; n = requestGoroutines() {
		if time.Now().After(deadline) {
			t.Fatalf("%d request goroutines left after the client went away:\n%s", n, requestStacks())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requestFrames are the functions only a request's goroutines run: the
// processor's exchange and its reader, a capability serving it, and the
// emulator's side of the same request.
var requestFrames = []string{
	"processor.(*exchange)",
	"processor.(*Server).Process",
	"httpkafka.(*Fetch).Serve",
	"emulator.(*Exchange)",
	"emulator.(*Emulator).serveHTTP",
}

// requestGoroutines counts the goroutines running request code now.
func requestGoroutines() int {
	n := 0
	for _, g := range strings.Split(requestStacks(), "\n\n") {
		for _, f := range requestFrames {
			if strings.Contains(g, f) {
				n++
				break
			}
		}
	}
	return n
}

func requestStacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
