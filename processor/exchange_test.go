package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger logs through t, so a test's log shows its exchanges.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// problemOf checks an ImmediateResponse is an RFC 9457 problem with status.
func problemOf(t *testing.T, ir *extprocv3.ImmediateResponse, status int) problem {
	t.Helper()
	if int(ir.GetStatus().GetCode()) != status {
		t.Fatalf("status %d, want %d (body %s)", ir.GetStatus().GetCode(), status, ir.GetBody())
	}
	if ct, _ := header(t, mutationHeaders(ir), "content-type"); ct != "application/problem+json" {
		t.Fatalf("content-type %q", ct)
	}
	var p problem
	if err := json.Unmarshal(ir.GetBody(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "about:blank" || p.Title == "" || p.Status != status || p.Detail == "" || strings.Contains(p.Detail, "\n") {
		t.Fatalf("problem %+v", p)
	}
	if ir.GetGrpcStatus() != nil {
		t.Fatal("grpc_status on an HTTP answer")
	}
	return p
}

// grpcError checks an ImmediateResponse to a gRPC client.
func grpcError(t *testing.T, ir *extprocv3.ImmediateResponse, code codes.Code) string {
	t.Helper()
	if ir.GetGrpcStatus() == nil {
		t.Fatal("ImmediateResponse to a gRPC client without grpc_status")
	}
	if got := codes.Code(ir.GetGrpcStatus().GetStatus()); got != code {
		t.Fatalf("grpc_status %v, want %v (%s)", got, code, ir.GetBody())
	}
	if len(ir.GetBody()) == 0 {
		t.Fatal("no message")
	}
	return string(ir.GetBody())
}

func TestHTTPNoRoute(t *testing.T) {
	h := newHarness(t, testConfig(t))
	s := h.open()
	s.headers(true, httpReq("GET", "/nothing?x=1")...)
	p := problemOf(t, s.immediate(), 404)
	if !strings.Contains(p.Detail, "GET /nothing") {
		t.Fatalf("detail %q", p.Detail)
	}
	s.finish()
	waitIdle(t, h.srv)
	if h.counter("http0", "http", "404") != 1 {
		t.Fatal("exchanges_total{http0,http,404} not counted")
	}
	if h.gauge("kafka_ext_proc_exchanges_in_flight") != 0 {
		t.Fatal("in-flight gauge not back to 0")
	}
}

func TestHTTPMatchedRouteAnswers501(t *testing.T) {
	h := newHarness(t, testConfig(t))
	s := h.open()
	s.headers(true, httpReq("GET", "/items/42")...)
	p := problemOf(t, s.immediate(), 501)
	if !strings.Contains(p.Detail, "fetch") || !strings.Contains(p.Detail, "items-snapshots") {
		t.Fatalf("detail %q should name capability and topic", p.Detail)
	}
	s.finish()
}

func TestHTTPChunkedBody(t *testing.T) {
	got := make(chan *handler.HTTPRequest, 1)
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.HTTP = httpFunc(func(_ context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
			got <- req
			return &handler.HTTPResponse{Status: 201, Headers: []route.Header{
				{Name: "Content-Type", Value: "text/plain"}, {Name: "set-cookie", Value: "a=1"}, {Name: "set-cookie", Value: "b=2"},
				{Name: "content-length", Value: "999"}, {Name: ":status", Value: "200"},
			}, Body: []byte("created")}
		})
	})
	for _, end := range []string{"eos", "trailers", "empty-eos", "one-chunk", "one-chunk-length", "length"} {
		t.Run(end, func(t *testing.T) {
			s := h.open()
			extra := []string{"content-type", "application/json"}
			if strings.HasSuffix(end, "length") {
				extra = append(extra, "content-length", "12")
			}
			s.headers(false, httpReq("POST", "/items?a=b", extra...)...)
			if !strings.HasPrefix(end, "one-chunk") {
				s.body([]byte(`{"na`), false)
				s.body([]byte(`me":`), false)
			}
			switch end {
			case "one-chunk", "one-chunk-length": // the body taken as it came
				s.body([]byte(`{"name":"x"}`), true)
			case "length": // the body gathered in a buffer of its length
				s.body([]byte(`"x"}`), true)
			case "eos":
				s.body([]byte(`"x"}`), true)
			case "trailers":
				s.body([]byte(`"x"}`), false)
				s.send(extproctest.RequestTrailers("x-checksum", "abc"))
			case "empty-eos":
				s.body([]byte(`"x"}`), false)
				s.body(nil, true)
			}
			req := <-got
			if string(req.Body) != `{"name":"x"}` || req.Method != "POST" || req.Path != "/items" || req.RawQuery != "a=b" ||
				req.Authority != "example.com" || req.Match.Route.Index != 0 || req.Limits.MaxBody != 64 || req.Drain == nil {
				t.Fatalf("request %+v", req)
			}
			if end == "trailers" && req.Trailers.Get("x-checksum") != "abc" {
				t.Fatalf("trailers %v", req.Trailers)
			}
			ir := s.immediate()
			if ir.GetStatus().GetCode() != 201 || string(ir.GetBody()) != "created" {
				t.Fatalf("answer %v", ir)
			}
			hs := mutationHeaders(ir)
			if ct, _ := header(t, hs, "content-type"); ct != "text/plain" {
				t.Fatalf("content-type %q (names are lower-cased)", ct)
			}
			if _, ok := header(t, hs, "content-length"); ok {
				t.Fatal("content-length is Envoy's to set")
			}
			if _, ok := header(t, hs, ":status"); ok {
				t.Fatal("pseudo-header in a mutation")
			}
			opts := ir.GetHeaders().GetSetHeaders()
			var cookies int
			for _, o := range opts {
				if o.GetHeader().GetKey() == "set-cookie" {
					cookies++
					//nolint:staticcheck // SA1019: Envoy reads the deprecated append.
					if app := o.GetAppend(); (cookies == 2) != (app != nil && app.GetValue()) {
						t.Fatalf("set-cookie %d append %v", cookies, app)
					}
				}
			}
			if cookies != 2 {
				t.Fatal("both set-cookie values must be sent")
			}
			s.finish()
		})
	}
}

func TestHTTPBodyOverLimit(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.HTTP = httpFunc(func(context.Context, *handler.HTTPRequest) *handler.HTTPResponse {
			t.Error("handler called for a body over the limit")
			return nil
		})
	})
	t.Run("chunks", func(t *testing.T) {
		s := h.open()
		s.headers(false, httpReq("POST", "/items")...)
		s.body(bytes.Repeat([]byte("a"), 40), false)
		s.body(bytes.Repeat([]byte("b"), 40), false) // 80 > 64: answered now, before the end
		problemOf(t, s.immediate(), 413)
		s.body([]byte("more"), false) // still arriving: never answered
		s.body(nil, true)
		s.finish()
	})
	t.Run("content-length", func(t *testing.T) {
		s := h.open()
		s.headers(false, httpReq("POST", "/items", "content-length", "65")...)
		problemOf(t, s.immediate(), 413)
		s.finish()
	})
	t.Run("exactly the limit", func(t *testing.T) {
		h := newHarness(t, testConfig(t))
		s := h.open()
		s.headers(false, httpReq("POST", "/items", "content-length", "64")...)
		s.body(bytes.Repeat([]byte("a"), 64), true)
		problemOf(t, s.immediate(), 501)
		s.finish()
	})
}

func TestHTTPLargeBodyStreams(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), (maxChunk*2+1000)/16)
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.HTTP = httpFunc(func(_ context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
			return &handler.HTTPResponse{Status: 200, Headers: []route.Header{{Name: "content-type", Value: "application/json"}}, Body: big}
		})
	})
	t.Run("GET", func(t *testing.T) {
		s := h.open()
		s.headers(true, httpReq("GET", "/items/1")...)
		hr := s.streamed().GetHeadersResponse()
		if hr == nil || hr.GetEndOfStream() {
			t.Fatalf("headers_response %v", hr)
		}
		hs := hr.GetHeaders().GetHeaders()
		if st, _ := header(t, hs, ":status"); st != "200" {
			t.Fatalf(":status %q", st)
		}
		if cl, _ := header(t, hs, "content-length"); cl != itoa(len(big)) {
			t.Fatalf("content-length %q", cl)
		}
		var got []byte
		for {
			br := s.streamed().GetBodyResponse()
			if br == nil || len(br.GetBody()) > maxChunk {
				t.Fatalf("body_response %d bytes", len(br.GetBody()))
			}
			got = append(got, br.GetBody()...)
			if br.GetEndOfStream() {
				break
			}
		}
		if !bytes.Equal(got, big) {
			t.Fatal("body differs")
		}
		s.finish()
	})
	t.Run("HEAD", func(t *testing.T) {
		s := h.open()
		s.headers(true, httpReq("HEAD", "/items/1")...)
		hr := s.streamed().GetHeadersResponse()
		if !hr.GetEndOfStream() {
			t.Fatal("HEAD answer must end with its headers")
		}
		if cl, _ := header(t, hr.GetHeaders().GetHeaders(), "content-length"); cl != itoa(len(big)) {
			t.Fatalf("content-length %q", cl)
		}
		s.finish()
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestHTTPUndefinedStatusStreams(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.HTTP = httpFunc(func(context.Context, *handler.HTTPRequest) *handler.HTTPResponse {
			return &handler.HTTPResponse{Status: 299, Body: []byte("x")}
		})
	})
	s := h.open()
	s.headers(true, httpReq("GET", "/items/1")...)
	hr := s.streamed().GetHeadersResponse()
	if st, _ := header(t, hr.GetHeaders().GetHeaders(), ":status"); st != "299" {
		t.Fatalf(":status %q", st)
	}
	if br := s.streamed().GetBodyResponse(); string(br.GetBody()) != "x" || !br.GetEndOfStream() {
		t.Fatalf("body %v", br)
	}
	s.finish()
}

func TestHTTPHeadOnFetchRoute(t *testing.T) {
	got := make(chan string, 1)
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.HTTP = httpFunc(func(_ context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
			got <- req.Method + " " + req.Match.Params["id"]
			return &handler.HTTPResponse{Status: 200, Body: []byte("v")}
		})
	})
	s := h.open()
	s.headers(true, httpReq("HEAD", "/items/7")...)
	if ir := s.immediate(); ir.GetStatus().GetCode() != 200 {
		t.Fatal(ir)
	}
	if g := <-got; g != "HEAD 7" {
		t.Fatal(g)
	}
	s.finish()
}

func TestHTTPHandlerFailures(t *testing.T) {
	for name, f := range map[string]httpFunc{
		"nil":   func(context.Context, *handler.HTTPRequest) *handler.HTTPResponse { return nil },
		"panic": func(context.Context, *handler.HTTPRequest) *handler.HTTPResponse { panic("boom") },
		"status": func(context.Context, *handler.HTTPRequest) *handler.HTTPResponse {
			return &handler.HTTPResponse{Status: 100}
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, testConfig(t), func(o *Options) { o.HTTP = f; o.Logger = slog.New(slog.DiscardHandler) })
			s := h.open()
			s.headers(true, httpReq("GET", "/items/1")...)
			problemOf(t, s.immediate(), 500)
			s.finish()
		})
	}
}

func TestHTTPRequestEndsEarly(t *testing.T) {
	h := newHarness(t, testConfig(t))
	s := h.open()
	s.headers(false, httpReq("POST", "/items")...)
	s.body([]byte("abc"), false)
	if err := s.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	problemOf(t, s.immediate(), 400)
	if _, err := s.s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the answer: %v, want the stream to end", err)
	}
}

func TestMissingPseudoHeaders(t *testing.T) {
	h := newHarness(t, testConfig(t))
	s := h.open()
	s.headers(true, ":authority", "x")
	problemOf(t, s.immediate(), 400)
	s.finish()
}

func TestBodyAfterEndOfStreamIgnored(t *testing.T) {
	calls := make(chan []byte, 2)
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.HTTP = httpFunc(func(_ context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
			calls <- req.Body
			return &handler.HTTPResponse{Status: 204}
		})
	})
	s := h.open()
	s.headers(false, httpReq("POST", "/items")...)
	s.body([]byte("x"), true)
	s.body([]byte("x"), true) // a duplicate final chunk, as Envoy may send (envoyproxy/envoy#46237)
	if ir := s.immediate(); ir.GetStatus().GetCode() != 204 {
		t.Fatal(ir)
	}
	// Half-close: the server must end without sending anything else.
	if err := s.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, %v after the answer", r, err)
	}
	if len(calls) != 1 {
		t.Fatalf("handler called %d times", len(calls))
	}
}

func TestFirstMessageMustBeRequestHeaders(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	s := h.open()
	s.body([]byte("x"), true)
	_, err := s.s.Recv()
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("err %v", err)
	}
	waitIdle(t, h.srv)
	if h.counter("none", "unknown", outcomeProtocol) != 1 {
		t.Fatal("protocol failure not counted")
	}
}

func TestWrongBodyMode(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	s := h.open()
	m := extproctest.RequestHeaders(false, httpReq("POST", "/items")...)
	m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED}
	s.send(m)
	p := problemOf(t, s.immediate(), 500)
	if !strings.Contains(p.Detail, "FULL_DUPLEX_STREAMED") {
		t.Fatal(p.Detail)
	}
	s.finish()

	// gRPC requests get the same as INTERNAL, and FDS is accepted.
	s = h.open()
	m = extproctest.RequestHeaders(false, grpcReq("/example.Echo/Say")...)
	m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_NONE}
	s.send(m)
	grpcError(t, s.immediate(), codes.Internal)
	s.finish()
	s = h.open()
	m = extproctest.RequestHeaders(true, httpReq("GET", "/items/1")...)
	m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}
	s.send(m)
	problemOf(t, s.immediate(), 501)
	s.finish()
}

func TestBindingChoice(t *testing.T) {
	cfg := testConfig(t)
	cfg.Bindings = append(cfg.Bindings, &config.Binding{Name: "http1", Type: config.HTTPKafka, Routes: []*config.Route{
		{Index: 0, When: []config.Condition{{Path: mustPath(t, "/other")}}, With: with(config.Fetch, "other-topic")},
	}})
	h := newHarness(t, cfg)

	s := h.open(BindingMetadata, "http1")
	s.headers(true, httpReq("GET", "/other")...)
	if p := problemOf(t, s.immediate(), 501); !strings.Contains(p.Detail, "other-topic") {
		t.Fatal(p.Detail)
	}
	s.finish()

	s = h.open(BindingMetadata, "http0")
	s.headers(true, httpReq("GET", "/other")...)
	problemOf(t, s.immediate(), 404)
	s.finish()

	s = h.open(BindingMetadata, "nope")
	s.headers(true, httpReq("GET", "/other")...)
	if p := problemOf(t, s.immediate(), 500); !strings.Contains(p.Detail, "not in the processor's configuration") {
		t.Fatal(p.Detail)
	}
	s.finish()

	// An HTTP request on a gRPC binding's route (a CORS route takes any
	// content-type, gRPC-Web among them) is the client's mistake: 415.
	s = h.open(BindingMetadata, "grpc0")
	s.headers(true, httpReq("GET", "/other")...)
	if p := problemOf(t, s.immediate(), 415); !strings.Contains(p.Detail, `gRPC binding "grpc0"`) || !strings.Contains(p.Detail, "grpc_web") {
		t.Fatal(p.Detail)
	}
	s.finish()

	s = h.open()
	s.headers(true, httpReq("GET", "/other")...)
	if p := problemOf(t, s.immediate(), 500); !strings.Contains(p.Detail, BindingMetadata) {
		t.Fatal(p.Detail)
	}
	s.finish()

	// One gRPC binding: used without metadata.
	s = h.open()
	s.headers(true, grpcReq("/example.Fetch/Events")...)
	if msg := grpcError(t, s.immediate(), codes.Unimplemented); !strings.Contains(msg, "events") {
		t.Fatal(msg)
	}
	s.finish()

	// No binding of the type: no route.
	h2 := newHarness(t, &config.Config{Bindings: cfg.Bindings[:1]})
	s = h2.open()
	s.headers(true, grpcReq("/example.Echo/Say")...)
	grpcError(t, s.immediate(), codes.Unimplemented)
	s.finish()
}

type guardFunc func(guard string, h route.Headers) (route.Identity, error)

func (f guardFunc) Check(_ context.Context, guard string, h route.Headers, _ map[string]*structpb.Struct) (route.Identity, error) {
	return f(guard, h)
}

func TestGuardAnswers(t *testing.T) {
	guards := guardFunc(func(_ string, h route.Headers) (route.Identity, error) {
		switch h.Get("authorization") {
		case "Bearer admin":
			return route.Identity{Subject: "a", Roles: []string{"admin"}}, nil
		case "Bearer user":
			return route.Identity{Subject: "u"}, nil
		}
		return route.Identity{}, errors.New("no valid bearer token")
	})
	got := make(chan string, 1)
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.Guards = guards
		o.HTTP = httpFunc(func(_ context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
			got <- req.Match.Identities["jwt0"].Subject
			return &handler.HTTPResponse{Status: 204}
		})
	})
	s := h.open()
	s.headers(true, httpReq("GET", "/admin")...)
	ir := s.immediate()
	problemOf(t, ir, 401)
	if v, _ := header(t, mutationHeaders(ir), "www-authenticate"); v != "Bearer" {
		t.Fatalf("www-authenticate %q", v)
	}
	s.finish()

	s = h.open()
	s.headers(true, httpReq("GET", "/admin", "authorization", "Bearer user")...)
	problemOf(t, s.immediate(), 403)
	s.finish()

	s = h.open()
	s.headers(true, httpReq("GET", "/admin", "authorization", "Bearer admin")...)
	if ir := s.immediate(); ir.GetStatus().GetCode() != 204 || <-got != "a" {
		t.Fatal(ir)
	}
	s.finish()

	s = h.open()
	s.headers(true, grpcReq("/example.Admin/Do")...)
	grpcError(t, s.immediate(), codes.Unauthenticated)
	s.finish()
	s = h.open()
	s.headers(true, grpcReq("/example.Admin/Do", "authorization", "Bearer user")...)
	grpcError(t, s.immediate(), codes.PermissionDenied)
	s.finish()
}

func TestGRPCNoRouteAndStub(t *testing.T) {
	h := newHarness(t, testConfig(t))
	s := h.open()
	s.headers(false, grpcReq("/other.Svc/Call")...)
	grpcError(t, s.immediate(), codes.Unimplemented)
	s.finish()

	s = h.open()
	s.headers(false, grpcReq("/bad-path")...)
	grpcError(t, s.immediate(), codes.Unimplemented)
	s.finish()

	s = h.open()
	s.headers(false, grpcReq("/example.Echo/Say", "content-type", "application/grpc+proto")...)
	msg := grpcError(t, s.immediate(), codes.Unimplemented)
	if !strings.Contains(msg, "produce") || !strings.Contains(msg, "echo-requests") {
		t.Fatal(msg)
	}
	s.finish()
	waitIdle(t, h.srv)
	if h.counter("grpc0", "grpc", "UNIMPLEMENTED") != 3 {
		t.Fatal("not counted")
	}
}

// readGRPC collects a streamed gRPC answer: messages and trailers.
func readGRPC(t *testing.T, s *stream, first *extprocv3.StreamedImmediateResponse) (msgs [][]byte, trailers map[string]string) {
	t.Helper()
	sr := first
	if sr == nil {
		sr = s.streamed()
	}
	hr := sr.GetHeadersResponse()
	if hr == nil || hr.GetEndOfStream() {
		t.Fatalf("want headers_response first, got %v", sr)
	}
	if st, _ := header(t, hr.GetHeaders().GetHeaders(), ":status"); st != "200" {
		t.Fatalf(":status %q", st)
	}
	if ct, _ := header(t, hr.GetHeaders().GetHeaders(), "content-type"); !grpcwire.IsGRPCContentType(ct) {
		t.Fatalf("content-type %q", ct)
	}
	dec := grpcwire.NewDecoder(0)
	for {
		sr := s.streamed()
		if tr := sr.GetTrailersResponse(); tr != nil {
			trailers = map[string]string{}
			for _, h := range tr.GetHeaders() {
				trailers[h.GetKey()] = string(h.GetRawValue())
			}
			if err := dec.End(); err != nil {
				t.Fatal(err)
			}
			return msgs, trailers
		}
		br := sr.GetBodyResponse()
		if br == nil || br.GetEndOfStream() {
			t.Fatalf("want body_response without end_of_stream, got %v", sr)
		}
		if err := dec.Feed(br.GetBody(), func(m grpcwire.Message) error { msgs = append(msgs, bytes.Clone(m.Data)); return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGRPCEchoAcrossChunks(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) { o.GRPC = grpcFunc(echo) })
	var stream []byte
	want := [][]byte{[]byte("first"), {}, bytes.Repeat([]byte("z"), 60), []byte("last")}
	for _, m := range want {
		stream = grpcwire.AppendFrame(stream, m)
	}
	for _, size := range []int{1, 3, 7, len(stream)} {
		t.Run(itoa(size), func(t *testing.T) {
			s := h.open()
			s.headers(false, grpcReq("/example.Echo/Say")...)
			for i := 0; i < len(stream); i += size {
				s.body(stream[i:min(i+size, len(stream))], false)
			}
			s.body(nil, true)
			msgs, tr := readGRPC(t, s, nil)
			if len(msgs) != len(want) {
				t.Fatalf("%d messages", len(msgs))
			}
			for i := range want {
				if !bytes.Equal(msgs[i], want[i]) {
					t.Fatalf("message %d = %q", i, msgs[i])
				}
			}
			if tr["grpc-status"] != "0" {
				t.Fatalf("trailers %v", tr)
			}
			s.finish()
		})
	}
}

func TestGRPCResponseStreamsWhileRequestArrives(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) { o.GRPC = grpcFunc(echo) })
	s := h.open()
	s.headers(false, grpcReq("/example.Echo/Say")...)
	s.body(grpcwire.Frame([]byte("one")), false)
	first := s.streamed()
	if first.GetHeadersResponse() == nil {
		t.Fatal(first)
	}
	if br := s.streamed().GetBodyResponse(); !bytes.Equal(br.GetBody(), grpcwire.Frame([]byte("one"))) {
		t.Fatalf("echo of the first message before the request ended: %v", br)
	}
	two := grpcwire.Frame([]byte("two"))
	s.body(two[:2], false)
	s.body(two[2:], false)
	if br := s.streamed().GetBodyResponse(); !bytes.Equal(br.GetBody(), two) {
		t.Fatal(br)
	}
	s.body(nil, true)
	if tr := s.streamed().GetTrailersResponse(); tr == nil {
		t.Fatal("trailers")
	}
	s.finish()
}

func TestGRPCFrameErrors(t *testing.T) {
	compressed := grpcwire.Frame([]byte("zz"))
	compressed[0] = 1
	badFlag := grpcwire.Frame([]byte("zz"))
	badFlag[0] = 7
	big := grpcwire.Frame(make([]byte, 65))
	for _, tc := range []struct {
		name   string
		chunks [][]byte
		eos    bool
		code   codes.Code
		text   string
	}{
		{"compressed", [][]byte{compressed}, false, codes.Unimplemented, "gzip"},
		{"bad flag", [][]byte{badFlag}, false, codes.InvalidArgument, "flag"},
		{"too large, prefix only", [][]byte{big[:5]}, false, codes.ResourceExhausted, "65 bytes"},
		{"truncated", [][]byte{grpcwire.Frame([]byte("hello"))[:7]}, true, codes.InvalidArgument, "ended inside a message"},
		{"truncated prefix", [][]byte{{0, 0}}, true, codes.InvalidArgument, "ended inside a message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(t), func(o *Options) { o.GRPC = grpcFunc(echo) })
			s := h.open()
			s.headers(false, grpcReq("/example.Echo/Say", "grpc-encoding", "gzip")...)
			for _, c := range tc.chunks {
				s.body(c, false)
			}
			if tc.eos {
				s.body(nil, true)
			}
			if msg := grpcError(t, s.immediate(), tc.code); !strings.Contains(msg, tc.text) {
				t.Fatalf("message %q lacks %q", msg, tc.text)
			}
			s.finish()
		})
	}
}

func TestGRPCErrorAfterHeaders(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.GRPC = grpcFunc(func(ctx context.Context, call *handler.GRPCCall) handler.Status {
			if err := call.Out.SendHeader(ctx, []route.Header{{Name: "x-meta", Value: "1"}}); err != nil {
				return handler.NewStatus(codes.Internal, err.Error())
			}
			if err := call.Out.SendHeader(ctx, nil); err == nil {
				return handler.NewStatus(codes.Internal, "second SendHeader accepted")
			}
			return handler.Status{Code: codes.NotFound, Message: "topic \"x\" 100% gone\n", Trailers: []route.Header{{Name: "x-t", Value: "v"}, {Name: "grpc-status", Value: "0"}}}
		})
	})
	s := h.open()
	s.headers(true, grpcReq("/example.Echo/Say")...)
	hr := s.streamed().GetHeadersResponse()
	if v, _ := header(t, hr.GetHeaders().GetHeaders(), "x-meta"); v != "1" {
		t.Fatal(hr)
	}
	tr := s.streamed().GetTrailersResponse()
	got := map[string]string{}
	for _, h := range tr.GetHeaders() {
		got[h.GetKey()] = string(h.GetRawValue())
	}
	if got["grpc-status"] != "5" || got["grpc-message"] != "topic \"x\" 100%25 gone%0A" || got["x-t"] != "v" {
		t.Fatalf("trailers %v", got)
	}
	s.finish()
}

func TestGRPCSuccessWithoutMessages(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.GRPC = grpcFunc(func(context.Context, *handler.GRPCCall) handler.Status { return handler.OK() })
	})
	s := h.open()
	s.headers(false, grpcReq("/example.Echo/Say")...)
	msgs, tr := readGRPC(t, s, nil)
	if len(msgs) != 0 || tr["grpc-status"] != "0" {
		t.Fatal(msgs, tr)
	}
	if _, ok := tr["grpc-message"]; ok {
		t.Fatal("empty grpc-message sent")
	}
	s.finish()
}

func TestGRPCHalfCloseMidRequest(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) { o.GRPC = grpcFunc(echo) })
	s := h.open()
	s.headers(false, grpcReq("/example.Echo/Say")...)
	if err := s.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	grpcError(t, s.immediate(), codes.Canceled)
	if _, err := s.s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
}

func TestGRPCTimeout(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.GRPC = grpcFunc(func(ctx context.Context, call *handler.GRPCCall) handler.Status {
			<-ctx.Done()
			return handler.NewStatus(codes.Canceled, ctx.Err().Error())
		})
	})
	s := h.open()
	s.headers(false, grpcReq("/example.Echo/Say", "grpc-timeout", "20m")...)
	grpcError(t, s.immediate(), codes.DeadlineExceeded)
	s.finish()

	s = h.open()
	s.headers(false, grpcReq("/example.Echo/Say", "grpc-timeout", "soon")...)
	grpcError(t, s.immediate(), codes.InvalidArgument)
	s.finish()
}

func TestGRPCHandlerPanics(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.Logger = slog.New(slog.DiscardHandler)
		o.GRPC = grpcFunc(func(context.Context, *handler.GRPCCall) handler.Status { panic("boom") })
	})
	s := h.open()
	s.headers(true, grpcReq("/example.Echo/Say")...)
	grpcError(t, s.immediate(), codes.Internal)
	s.finish()
}

// A handler that never reads request messages must not stall its answer, and
// is released when the exchange ends.
func TestGRPCHandlerNotReading(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.GRPC = grpcFunc(func(ctx context.Context, call *handler.GRPCCall) handler.Status {
			if err := call.Out.Send(ctx, []byte("hello")); err != nil {
				return handler.NewStatus(codes.Internal, err.Error())
			}
			select {
			case <-release:
				return handler.OK()
			case <-ctx.Done():
				return handler.NewStatus(codes.Canceled, "gone")
			}
		})
	})
	s := h.open()
	s.headers(false, grpcReq("/example.Fetch/Events")...)
	for range 5 {
		s.body(grpcwire.Frame([]byte("ignored")), false)
	}
	if s.streamed().GetHeadersResponse() == nil || s.streamed().GetBodyResponse() == nil {
		t.Fatal("expected headers and a message")
	}
	close(release)
	if s.streamed().GetTrailersResponse() == nil {
		t.Fatal("trailers")
	}
	s.finish()
}

// Envoy cancels the stream when the client goes away: every wait ends and no
// goroutine is left.
func TestClientCancel(t *testing.T) {
	for _, kind := range []string{"http-handler", "http-body", "grpc-handler", "grpc-recv"} {
		t.Run(kind, func(t *testing.T) {
			entered := make(chan struct{})
			sawCancel := make(chan struct{})
			h := newHarness(t, testConfig(t), func(o *Options) {
				// The guard of /admin runs when the headers are matched: the
				// exchange then waits for the body.
				o.Guards = guardFunc(func(string, route.Headers) (route.Identity, error) {
					close(entered)
					return route.Identity{Roles: []string{"admin"}}, nil
				})
				o.HTTP = httpFunc(func(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
					close(entered)
					<-ctx.Done()
					close(sawCancel)
					return nil
				})
				o.GRPC = grpcFunc(func(ctx context.Context, call *handler.GRPCCall) handler.Status {
					close(entered)
					if kind == "grpc-recv" {
						_, err := call.In.Recv(ctx)
						if err == nil {
							t.Error("Recv returned a message")
						}
					} else {
						<-ctx.Done()
					}
					close(sawCancel)
					return handler.OK()
				})
			})
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			s := h.open()
			switch kind {
			case "http-handler":
				s.headers(true, httpReq("GET", "/items/1")...)
			case "http-body":
				s.headers(false, httpReq("POST", "/admin")...)
				s.body([]byte("partial"), false)
			default:
				s.headers(false, grpcReq("/example.Echo/Say")...)
			}
			<-entered
			s.cancel()
			if kind != "http-body" {
				<-sawCancel
			}
			waitIdle(t, h.srv)
			if h.counter(map[bool]string{true: "grpc0", false: "http0"}[strings.HasPrefix(kind, "grpc")],
				map[bool]string{true: "grpc", false: "http"}[strings.HasPrefix(kind, "grpc")], outcomeCancelled) != 1 {
				t.Fatal("cancelled exchange not counted")
			}
		})
	}
}

func TestDrainReachesHandlers(t *testing.T) {
	drain, stop := context.WithCancel(context.Background())
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.Drain = drain
		o.HTTP = httpFunc(func(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
			select {
			case <-req.Drain.Done():
				return &handler.HTTPResponse{Status: 304}
			case <-ctx.Done():
				return nil
			}
		})
	})
	s := h.open()
	s.headers(true, httpReq("GET", "/items/1")...)
	stop()
	if ir := s.immediate(); ir.GetStatus().GetCode() != 304 {
		t.Fatal(ir)
	}
	s.finish()
}

func TestSwap(t *testing.T) {
	entered := make(chan string, 2)
	release := make(chan struct{})
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.HTTP = httpFunc(func(_ context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
			entered <- req.Match.Route.With.Topic.Raw
			<-release
			return &handler.HTTPResponse{Status: 204}
		})
	})
	old := h.open()
	old.headers(true, httpReq("GET", "/items/1")...)
	if topic := <-entered; topic != "items-snapshots" {
		t.Fatal(topic)
	}

	next := testConfig(t)
	next.Bindings[0].Routes[1].With = with(config.Fetch, "items-v2")
	next.Bindings[0].Routes[1].When[0].Path = mustPath(t, "/v2/items/{id}")
	if err := h.srv.Swap(next); err != nil {
		t.Fatal(err)
	}
	bad := &config.Config{Bindings: []*config.Binding{{Name: "x", Type: "kafka"}}}
	if err := h.srv.Swap(bad); err == nil {
		t.Fatal("a bad configuration was installed")
	}
	if err := h.srv.Swap(nil); err == nil {
		t.Fatal("nil installed")
	}

	fresh := h.open()
	fresh.headers(true, httpReq("GET", "/v2/items/1")...)
	if topic := <-entered; topic != "items-v2" {
		t.Fatal(topic)
	}
	close(release)
	for _, s := range []*stream{old, fresh} {
		if ir := s.immediate(); ir.GetStatus().GetCode() != 204 {
			t.Fatal(ir)
		}
		s.finish()
	}
	s := h.open()
	s.headers(true, httpReq("GET", "/items/1")...)
	problemOf(t, s.immediate(), 404)
	s.finish()
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("no config accepted")
	}
	if _, err := New(Options{Config: testConfig(t)}); err == nil {
		t.Fatal("no handlers accepted")
	}
	h, g := httpkafka.New(nil, nil), grpckafka.New(nil, nil)
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Config: testConfig(t), Registerer: reg, HTTP: h, GRPC: g}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Config: testConfig(t), Registerer: reg, HTTP: h, GRPC: g}); err == nil {
		t.Fatal("two servers on one registry")
	}
	if _, err := New(Options{Config: testConfig(t), HTTP: h, GRPC: g}); err != nil {
		t.Fatalf("private registry: %v", err)
	}
}

// An answered exchange whose stream Envoy neither cancels nor closes ends
// after CloseWait.
func TestCloseWaitBound(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) { o.CloseWait = time.Millisecond })
	s := h.open()
	s.headers(false, httpReq("GET", "/nothing")...)
	problemOf(t, s.immediate(), 404)
	if _, err := s.s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("%v: the server should end the stream", err)
	}
}

// Reloads while exchanges run: each exchange sees one whole snapshot.
func TestSwapUnderLoad(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	stop := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cfg := testConfig(t)
			cfg.Bindings[0].Routes[1].With = with(config.Fetch, "topic-"+strconv.Itoa(i%2))
			if err := h.srv.Swap(cfg); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 50 {
		s := h.open()
		s.headers(true, httpReq("GET", "/items/1")...)
		p := problemOf(t, s.immediate(), 501)
		if !strings.Contains(p.Detail, "topic-0") && !strings.Contains(p.Detail, "topic-1") && !strings.Contains(p.Detail, "items-snapshots") {
			t.Fatal(p.Detail)
		}
		s.finish()
	}
	close(stop)
	<-swapped
}

// BenchmarkExchange measures one whole exchange over an in-memory gRPC
// connection: request headers in, a 501 problem out, the stream cancelled.
func BenchmarkExchange(b *testing.B) {
	for _, bc := range []struct {
		name string
		hdrs []string
	}{
		{"http", httpReq("GET", "/items/1")},
		{"grpc", grpcReq("/example.Echo/Say")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := newHarness(b, testConfig(b), func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				s, err := h.client.Process(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Send(extproctest.RequestHeaders(true, bc.hdrs...)); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Recv(); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		})
	}
}
