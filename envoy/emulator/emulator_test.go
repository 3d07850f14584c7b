package emulator

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
)

func TestNewRefusesSettingsItDoesNotEmulate(t *testing.T) {
	conn := grpcClient(t, "127.0.0.1:1")
	cases := map[string]struct {
		edit func(*envoy.Settings)
		want string
	}{
		"buffered body":       {func(s *envoy.Settings) { s.ExtProc.RequestBodyMode = "BUFFERED" }, "request_body_mode"},
		"streamed body":       {func(s *envoy.Settings) { s.ExtProc.RequestBodyMode = "STREAMED" }, "request_body_mode"},
		"response headers":    {func(s *envoy.Settings) { s.ExtProc.ResponseHeaderMode = "SEND" }, "response_header_mode"},
		"response default":    {func(s *envoy.Settings) { s.ExtProc.ResponseHeaderMode = "DEFAULT" }, "response_header_mode"},
		"request header skip": {func(s *envoy.Settings) { s.ExtProc.RequestHeaderMode = "SKIP" }, "request_header_mode"},
		"fds without trailer": {func(s *envoy.Settings) { s.ExtProc.RequestTrailerMode = "SKIP" }, "request_trailer_mode has to be SEND"},
		"response body":       {func(s *envoy.Settings) { s.ExtProc.ResponseBodyMode = "STREAMED" }, "response_body_mode"},
		"fail open":           {func(s *envoy.Settings) { s.ExtProc.FailureModeAllow = true }, "failure_mode_allow"},
		"status_on_error 200": {func(s *envoy.Settings) { s.ExtProc.StatusOnError = 200 }, "status_on_error"},
		"no cluster":          {func(s *envoy.Settings) { s.ExtProc.ClusterName = "" }, "cluster_name"},
		"request_timeout":     {func(s *envoy.Settings) { s.RequestTimeout = time.Second }, "request_timeout"},
		"http3":               {func(s *envoy.Settings) { s.CodecType = "HTTP3" }, "codec_type"},
		"route without match": {func(s *envoy.Settings) { s.Routes[0].Prefix = "" }, "prefix and path"},
		"route two actions":   {func(s *envoy.Settings) { s.Routes[1].Cluster = "x" }, "direct_response and a cluster"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := baseSettings()
			c.edit(&s)
			_, err := New(Options{Settings: s, Processor: conn})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want an error mentioning %q", err, c.want)
			}
		})
	}
	if _, err := New(Options{Settings: baseSettings(), Processor: conn}); err != nil {
		t.Fatalf("New(base settings): %v", err)
	}
	if _, err := New(Options{Settings: baseSettings()}); err == nil {
		t.Fatal("New without a processor connection succeeded")
	}
}

// One Process stream per request, :authority = cluster name,
// initial metadata (route over filter); headers as RawValue, lower case,
// repeated entries, pseudo-headers, x-request-id, x-forwarded-proto,
// end_of_stream, protocol_config, metadata_context.
func TestHeaderEncodingHTTP1(t *testing.T) {
	got := make(chan *extprocv3.ProcessingRequest, 1)
	p := startProcessor(t, func(ps *procStream) error {
		got <- ps.next()
		return ps.send(extproctest.Immediate(200, "ok", nil, nil))
	})
	addr := startEmulator(t, baseSettings(), p.addr)

	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/items/1?q=a%20b", nil)
	req.Host = "api.example.com"
	req.Header.Add("X-Multi", "one")
	req.Header.Add("X-Multi", "two")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("Proxy-Connection", "keep-alive")
	req.Header.Set("Connection", "x-hop")
	resp, err := h1Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("response %d %q", resp.StatusCode, body)
	}

	ps := p.stream(t)
	m := <-got
	if m == nil {
		t.Fatal("no request_headers")
	}
	rh := m.GetRequestHeaders()
	if rh == nil {
		t.Fatalf("first message is %T, want request_headers", m.GetRequest())
	}
	if !rh.GetEndOfStream() {
		t.Error("end_of_stream false for a GET without body")
	}
	h := rh.GetHeaders()
	want := map[string][]string{
		":authority":        {"api.example.com"},
		":path":             {"/items/1?q=a%20b"},
		":method":           {"GET"},
		":scheme":           {"http"},
		"x-forwarded-proto": {"http"},
		"x-multi":           {"one", "two"},
	}
	for k, v := range want {
		if g := headerOf(t, h, k); strings.Join(g, "|") != strings.Join(v, "|") {
			t.Errorf("%s = %q, want %q", k, g, v)
		}
	}
	for _, k := range []string{"host", "keep-alive", "proxy-connection", "connection"} {
		if g := headerOf(t, h, k); len(g) > 0 {
			t.Errorf("%s present (%q); the HCM removes it", k, g)
		}
	}
	for _, e := range h.GetHeaders() {
		if e.GetKey() != strings.ToLower(e.GetKey()) {
			t.Errorf("key %q not lower case", e.GetKey())
		}
	}
	if id := headerOf(t, h, "x-request-id"); len(id) != 1 || len(id[0]) != 36 {
		t.Errorf("x-request-id = %q, want a generated UUID", id)
	}
	pc := m.GetProtocolConfig()
	if pc.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED || pc.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_NONE {
		t.Errorf("protocol_config = %v", pc)
	}
	if m.GetMetadataContext() == nil {
		t.Error("metadata_context is nil")
	}
	if a := ps.md.Get(":authority"); len(a) != 1 || a[0] != "kafka_ext_proc" {
		t.Errorf("Process :authority = %q, want the cluster name", a)
	}
	if v := ps.md.Get("x-filter-md"); len(v) != 1 || v[0] != "filter" {
		t.Errorf("filter initial metadata = %q", v)
	}
	if v := ps.md.Get("x-kafka-ext-proc-binding"); len(v) != 1 || v[0] != "http0" {
		t.Errorf("x-kafka-ext-proc-binding = %q, want the route's http0", v)
	}
}

// h2c: request with a body; an existing x-request-id is kept;
// protocol_config only in the first message; the gRPC route's metadata.
func TestHeaderEncodingH2C(t *testing.T) {
	got := make(chan []*extprocv3.ProcessingRequest, 1)
	p := startProcessor(t, func(ps *procStream) error {
		msgs, _ := ps.readUntilEOS()
		got <- msgs
		return ps.send(extproctest.Immediate(200, "", u32(0), nil))
	})
	addr := startEmulator(t, baseSettings(), p.addr)

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/pkg.Svc/Method", strings.NewReader("hello body"))
	req.Header.Set("Content-Type", "application/grpc+proto")
	req.Header.Set("X-Request-Id", "rid-1")
	req.Header.Add("Cookie", "a=1")
	req.Header.Add("Cookie", "b=2")
	resp, err := h2cClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("proto %s, want HTTP/2 (h2c prior knowledge)", resp.Proto)
	}
	ps := p.stream(t)
	msgs := <-got
	if len(msgs) < 2 {
		t.Fatalf("got %d messages, want headers and body", len(msgs))
	}
	h := msgs[0].GetRequestHeaders()
	if h == nil || h.GetEndOfStream() {
		t.Fatalf("first message %v, want request_headers without end_of_stream", msgs[0])
	}
	if g := headerOf(t, h.GetHeaders(), "x-request-id"); len(g) != 1 || g[0] != "rid-1" {
		t.Errorf("x-request-id = %q, want the client's", g)
	}
	if g := headerOf(t, h.GetHeaders(), ":authority"); len(g) != 1 || g[0] != addr {
		t.Errorf(":authority = %q", g)
	}
	if g := headerOf(t, h.GetHeaders(), "cookie"); len(g) != 1 || g[0] != "a=1; b=2" {
		t.Errorf("cookie = %q, want crumbs joined", g)
	}
	var body []byte
	for i, m := range msgs[1:] {
		if m.GetProtocolConfig() != nil {
			t.Errorf("message %d carries protocol_config; only the first may", i+1)
		}
		if m.GetMetadataContext() == nil {
			t.Errorf("message %d has no metadata_context", i+1)
		}
		body = append(body, m.GetRequestBody().GetBody()...)
	}
	if string(body) != "hello body" {
		t.Errorf("body %q", body)
	}
	if v := ps.md.Get("x-kafka-ext-proc-binding"); len(v) != 1 || v[0] != "grpc0" {
		t.Errorf("x-kafka-ext-proc-binding = %q, want the gRPC route's", v)
	}
}

// rawHTTP1 sends a raw HTTP/1.x request and reads the response.
func rawHTTP1(t *testing.T, addr, request string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Envoy strips `Upgrade: h2c` and serves the request as HTTP/1.1.
func TestUpgradeH2CIsStripped(t *testing.T) {
	got := make(chan *extprocv3.ProcessingRequest, 1)
	p := startProcessor(t, func(ps *procStream) error {
		got <- ps.next()
		return ps.send(extproctest.Immediate(200, "plain", nil, nil))
	})
	addr := startEmulator(t, baseSettings(), p.addr)
	resp, body := rawHTTP1(t, addr, "GET /x HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	if resp.StatusCode != 200 || body != "plain" || resp.ProtoMajor != 1 {
		t.Fatalf("response %s %d %q, want HTTP/1.1 200 from the processor", resp.Proto, resp.StatusCode, body)
	}
	m := <-got
	for _, k := range []string{"upgrade", "connection", "http2-settings"} {
		if g := headerOf(t, m.GetRequestHeaders().GetHeaders(), k); len(g) > 0 {
			t.Errorf("%s = %q reached the processor", k, g)
		}
	}
}

// Upgrade (other than h2c) is refused with 403 by the HCM, without contacting
// the processor (envoy.yaml has no upgrade_configs); so is HTTP/1.0 (426).
// CONNECT is not refused: TestConnectReachesProcessor.
func TestUpgradeRefused(t *testing.T) {
	paths := make(chan string, 16)
	p := startProcessor(t, func(ps *procStream) error {
		m := ps.next()
		for _, h := range m.GetRequestHeaders().GetHeaders().GetHeaders() {
			if h.GetKey() == ":path" {
				paths <- string(h.GetRawValue())
			}
		}
		return ps.send(extproctest.Immediate(200, "after", nil, nil))
	})
	addr := startEmulator(t, baseSettings(), p.addr)

	resp, _ := rawHTTP1(t, addr, "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if resp.StatusCode != 403 || !resp.Close {
		t.Errorf("websocket upgrade: %d close=%v, want 403 with connection close", resp.StatusCode, resp.Close)
	}
	resp, _ = rawHTTP1(t, addr, "GET /old HTTP/1.0\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 426 {
		t.Errorf("HTTP/1.0: %d, want 426", resp.StatusCode)
	}

	// The processor saw none of them: the first stream it gets is this one.
	resp, body := rawHTTP1(t, addr, "GET /after HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 200 || body != "after" {
		t.Fatalf("follow-up: %d %q", resp.StatusCode, body)
	}
	// Streams are opened before any answer, so a stream of a refused
	// request would have come first.
	if first := <-paths; first != "/after" {
		t.Errorf("first stream the processor saw is for %q, want /after", first)
	}
}
