package emulator

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
)

// Rules settled against Envoy's source (the emulator had the first five
// wrong); each test names the Envoy function, and test where one exists,
// that it reproduces.

// ProcessorState::handleTrailersResponse: in FULL_DUPLEX_STREAMED a
// request_trailers reply before the header reply continues the request,
// unmodified, to its route and closes the ext_proc stream (no Envoy test
// sends trailers first).
func TestTrailersReplyBeforeHeaderReply(t *testing.T) {
	trailersReply := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
	p := startProcessor(t, func(ps *procStream) error {
		ps.next()
		if err := ps.send(trailersReply); err != nil {
			return nil
		}
		<-ps.ctx.Done()
		return nil
	})
	addr := startEmulator(t, baseSettings(), p.addr)
	if code, h, body := get(t, addr); code != 503 || body != "no answer from kafka-ext-proc\n" || h.Get("Content-Type") != "text/plain" {
		t.Errorf("HTTP: %d %q, want the route's direct_response", code, body)
	}
	if !p.stream(t).cancelled() {
		t.Error("Process stream not closed after the trailers reply")
	}
	if st := status.Convert(invoke(t, addr)); st.Code() != codes.Unavailable || st.Message() != "no healthy upstream" {
		t.Errorf("gRPC: %v %q, want the route's no healthy upstream", st.Code(), st.Message())
	}

	// After request trailers the reply's mutation is applied: an invalid
	// one fails the request (status_on_error), a valid one lets it through.
	for name, c := range map[string]struct {
		mutation *extprocv3.HeaderMutation
		body     string
	}{
		"invalid mutation": {extproctest.SetHeaders("bad name", "v"), ""},
		"valid mutation":   {extproctest.SetHeaders("x-t", "2"), "no answer from kafka-ext-proc\n"},
	} {
		t.Run(name, func(t *testing.T) {
			p := startProcessor(t, func(ps *procStream) error {
				if _, ok := ps.readUntilEOS(); !ok {
					return nil
				}
				_ = ps.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
					RequestTrailers: &extprocv3.TrailersResponse{HeaderMutation: c.mutation}}})
				<-ps.ctx.Done()
				return nil
			})
			addr := startEmulator(t, baseSettings(), p.addr)
			h2 := dialRawH2(t, addr)
			h2.headers(1, false, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/m", "trailer", "x-t")
			h2.data(1, false, []byte("x"))
			h2.headers(1, true, "x-t", "1")
			evs := h2.read(1, endOrReset)
			var body []byte
			for _, e := range evs[1:] {
				body = append(body, e.data...)
			}
			if evs[0].kind != "headers" || evs[0].fields[":status"] != "503" || string(body) != c.body {
				t.Errorf("got %v, want 503 with body %q", evs, c.body)
			}
		})
	}
}

// MutationUtils::isValidHttpStatus is only code >= 200: an ImmediateResponse
// status above 999 goes out as is, on HTTP/1 a status line net/http's
// client refuses (ResponseEncoderImpl::encodeHeaders, reason "Unknown").
// gRPC requests still get a trailers-only reply with grpc-status mapped
// from it (httpToGrpcStatus(1000) = UNKNOWN). No Envoy test covers it.
func TestImmediateStatusAbove999(t *testing.T) {
	p := startProcessor(t, sendAll(extproctest.Immediate(1000, "odd", nil, nil)))
	addr := startEmulator(t, baseSettings(), p.addr)
	line, rest := rawStatusLine(t, addr, "GET /m HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	if line != "HTTP/1.1 1000 Unknown" || !strings.Contains(rest, "\r\n\r\nodd") || !strings.Contains(strings.ToLower(rest), "content-type: text/plain") {
		t.Errorf("HTTP/1: %q %q, want the status line 1000 Unknown and the body", line, rest)
	}
	if _, err := h1Client(t).Get("http://" + addr + "/m"); err == nil || !strings.Contains(err.Error(), "malformed HTTP status code") {
		t.Errorf("net/http client: %v, want it to refuse the status", err)
	}
	c := dialRawH2(t, addr)
	c.headers(1, true, ":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/m")
	if evs := c.read(1, endOrReset); len(evs) != 1 || evs[0].kind != "rst" {
		t.Errorf("HTTP/2: %v, want a reset and no answer", evs)
	}
	if st := status.Convert(invoke(t, addr)); st.Code() != codes.Unknown || st.Message() != "odd" {
		t.Errorf("gRPC: %v %q, want UNKNOWN odd", st.Code(), st.Message())
	}
}

// rawStatusLine sends a raw HTTP/1.1 request and returns the response's
// status line and everything after it until the server closes.
func rawStatusLine(t *testing.T, addr, request string) (string, string) {
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
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, b)
	}
	line, rest, _ := strings.Cut(string(b), "\r\n")
	return line, rest
}

// FilterManager::encodeHeaders runs HeaderUtility::checkRequiredResponseHeaders
// on streamed headers without :status and answers 502 with the check's
// message as body [test ProtocolIntegrationTest.RemoveResponseHeadersFilter].
func TestStreamedHeadersWithoutStatus(t *testing.T) {
	p := startProcessor(t, sendAll(extproctest.StreamedHeaders(false, "content-type", "application/json")))
	addr := startEmulator(t, baseSettings(), p.addr)
	code, h, body := get(t, addr)
	if code != 502 || body != "missing required header: :status" || h.Get("Content-Type") != "text/plain" {
		t.Errorf("HTTP: %d %q %q, want 502 text/plain with the check's message", code, h.Get("Content-Type"), body)
	}
	if st := status.Convert(invoke(t, addr)); st.Code() != codes.Unavailable || st.Message() != "missing required header: :status" {
		t.Errorf("gRPC: %v %q, want UNAVAILABLE with the message", st.Code(), st.Message())
	}
}

// max_request_headers_kb as Envoy's codecs count it: HTTP/1
// (ConnectionImpl::checkMaxHeadersSize and the raw header block limit)
// answers 431 and closes the connection; HTTP/2 (ConnectionImpl::saveHeader)
// resets the stream; the processor is never contacted
// [test DownstreamProtocolIntegrationTest.LargeRequestHeadersRejected].
// net/http's MaxHeaderBytes allowed 4 KiB more on HTTP/1 and answered 431
// on HTTP/2.
func TestRequestHeadersLimit(t *testing.T) {
	paths := make(chan string, 8)
	p := startProcessor(t, func(ps *procStream) error {
		m := ps.next()
		if v := headerOf(t, m.GetRequestHeaders().GetHeaders(), "x-big"); len(v) == 1 {
			paths <- fmt.Sprint(len(v[0]))
		}
		return ps.send(extproctest.Immediate(200, "ok", nil, nil))
	})
	s := baseSettings()
	s.MaxRequestHeadersKB = 8
	const limit = 8 * 1024
	addr := startEmulator(t, s, p.addr)

	// HTTP/1: "GET /m HTTP/1.1\r\n" (17), "Host: h\r\n" (9), the x-big line
	// (7 + n + 2), the connection line and the final CRLF (2).
	h1 := func(n int) string {
		return "GET /m HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("a", n) + "\r\nConnection: close\r\n\r\n"
	}
	atLimit := limit - 17 - 9 - 9 - 2 - len("Connection: close\r\n")
	if line, rest := rawStatusLine(t, addr, h1(atLimit)); line != "HTTP/1.1 200 OK" || !strings.HasSuffix(rest, "ok") {
		t.Errorf("HTTP/1 at the limit: %q, want the processor's answer", line)
	}
	if got := <-paths; got != fmt.Sprint(atLimit) {
		t.Errorf("processor saw x-big of %s bytes", got)
	}
	line, rest := rawStatusLine(t, addr, h1(atLimit+1))
	if line != "HTTP/1.1 431 Request Header Fields Too Large" || !strings.HasSuffix(rest, "\r\n\r\nRequest Header Fields Too Large") ||
		!strings.Contains(strings.ToLower(rest), "connection: close") {
		t.Errorf("HTTP/1 one byte over: %q %q, want 431 with Envoy's body and a close", line, rest)
	}

	// HTTP/2: pseudo-headers (7+3, 7+4, 10+1, 5+2 = 39) and x-big (5 + n).
	c := dialRawH2(t, addr)
	h2 := func(id uint32, n int) []h2Event {
		c.bigHeaders(id, ":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/m", "x-big", strings.Repeat("b", n))
		return c.read(id, endOrReset)
	}
	if evs := h2(1, limit-39-5); evs[0].kind != "headers" || evs[0].fields[":status"] != "200" {
		t.Errorf("HTTP/2 at the limit: %v, want the processor's answer", evs)
	}
	<-paths
	if evs := h2(3, limit-39-5+1); len(evs) != 1 || evs[0].kind != "rst" {
		t.Errorf("HTTP/2 one byte over: %v, want a reset without a response", evs)
	}
	select {
	case n := <-paths:
		t.Errorf("a request over the limit (x-big %s bytes) reached the processor", n)
	default:
	}
}

// A CONNECT is not refused by the HCM: the processor gets its headers with
// no :path, and when it lets the request through no route matches, so
// Envoy answers 404 [test DownstreamProtocolIntegrationTest.ConnectIsBlocked:
// "CONNECT requests do not include a path, they will fail to find a route
// match and return a 404"]. The HTTP/1 request never completes, so the
// connection closes after the answer.
func TestConnectReachesProcessor(t *testing.T) {
	seen := make(chan *extprocv3.HttpHeaders, 4)
	p := startProcessor(t, func(ps *procStream) error {
		seen <- ps.next().GetRequestHeaders()
		return ps.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}})
	})
	addr := startEmulator(t, baseSettings(), p.addr)
	checkHeaders := func(proto string) {
		t.Helper()
		var rh *extprocv3.HttpHeaders
		select {
		case rh = <-seen:
		case <-time.After(wait):
			t.Fatalf("%s: the processor never saw the CONNECT", proto)
		}
		h := rh.GetHeaders()
		if m, a := headerOf(t, h, ":method"), headerOf(t, h, ":authority"); len(m) != 1 || m[0] != "CONNECT" || len(a) != 1 || a[0] != "example.com:443" {
			t.Errorf("%s: :method %q :authority %q", proto, m, a)
		}
		if p := headerOf(t, h, ":path"); len(p) != 0 {
			t.Errorf("%s: :path %q, want none", proto, p)
		}
		if rh.GetEndOfStream() {
			t.Errorf("%s: end_of_stream set; a CONNECT request is a tunnel that stays open", proto)
		}
	}

	line, rest := rawStatusLine(t, addr, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	if line != "HTTP/1.1 404 Not Found" || !strings.Contains(strings.ToLower(rest), "connection: close") {
		t.Errorf("HTTP/1.1: %q %q, want 404 and the connection closed", line, rest)
	}
	checkHeaders("HTTP/1.1")

	c := dialRawH2(t, addr)
	c.headers(1, false, ":method", "CONNECT", ":authority", "example.com:443")
	evs := c.read(1, func(e h2Event) bool { return e.kind == "headers" || e.kind == "rst" })
	if evs[0].kind != "headers" || evs[0].fields[":status"] != "404" {
		t.Errorf("HTTP/2: %v, want 404", evs)
	}
	checkHeaders("HTTP/2")
}

// HeaderMapImpl::insertByKey appends a repeated inline header to the first
// copy with "," (HeaderMapImplTest.DoubleInlineAdd expects "foo,bar"); other
// headers stay separate entries. Both codecs build the map the same way.
func TestRepeatedInlineHeadersJoined(t *testing.T) {
	seen := make(chan *extprocv3.HttpHeaders, 4)
	p := startProcessor(t, func(ps *procStream) error {
		seen <- ps.next().GetRequestHeaders()
		return ps.send(extproctest.Immediate(200, "ok", nil, nil))
	})
	addr := startEmulator(t, baseSettings(), p.addr)
	check := func(proto string) {
		t.Helper()
		h := (<-seen).GetHeaders()
		want := map[string][]string{
			"user-agent":      {"a/1,b/2"},
			"x-forwarded-for": {"10.0.0.1,10.0.0.2"},
			"content-type":    {"application/json,text/plain"},
			"prefer":          {"respond-async", "wait=5"},
		}
		for k, v := range want {
			if g := headerOf(t, h, k); strings.Join(g, "|") != strings.Join(v, "|") {
				t.Errorf("%s: %s = %q, want %q", proto, k, g, v)
			}
		}
	}
	resp, _ := rawHTTP1(t, addr, "POST /m HTTP/1.1\r\nHost: h\r\nUser-Agent: a/1\r\nUser-Agent: b/2\r\n"+
		"X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\nContent-Type: application/json\r\nContent-Type: text/plain\r\n"+
		"Prefer: respond-async\r\nPrefer: wait=5\r\nContent-Length: 0\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP/1.1: %d", resp.StatusCode)
	}
	check("HTTP/1.1")
	c := dialRawH2(t, addr)
	c.headers(1, true, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/m",
		"user-agent", "a/1", "user-agent", "b/2", "x-forwarded-for", "10.0.0.1", "x-forwarded-for", "10.0.0.2",
		"content-type", "application/json", "content-type", "text/plain", "prefer", "respond-async", "prefer", "wait=5")
	c.read(1, endOrReset)
	check("HTTP/2")
}

// A failed ext_proc stream (Filter::onGrpcError, fail-closed): before
// response headers, a local reply with status_on_error and no body, so no
// content-type; gRPC clients get a trailers-only reply whose grpc-status is
// mapped from that status (503, 502 and 504 all UNAVAILABLE) and no
// grpc-message [test ExtProcStatusOnErrorIntegrationTest.GrpcStreamErrorCustomStatus].
// After a streamed answer started, the stream is reset: RST_STREAM
// (INTERNAL_ERROR) on HTTP/2, the connection closed mid-body on HTTP/1
// (DownstreamFilterManager::sendLocalReply: "Prior headers have already
// been sent").
func TestStreamFailure(t *testing.T) {
	failing := func(ps *procStream) error {
		ps.readUntilEOS()
		return status.Error(codes.Unavailable, "processor gone")
	}
	for code, want := range map[int]string{503: "14", 502: "14", 504: "14", 500: "2", 429: "14", 400: "13"} {
		t.Run(fmt.Sprintf("before headers/%d", code), func(t *testing.T) {
			s := baseSettings()
			s.ExtProc.StatusOnError = code
			addr := startEmulator(t, s, startProcessor(t, failing).addr)
			st, h, body := get(t, addr)
			if st != code || body != "" || h.Get("Content-Type") != "" || h.Get("Content-Length") != "0" {
				t.Errorf("HTTP/1: %d %q content-type %q content-length %q, want %d with no body",
					st, body, h.Get("Content-Type"), h.Get("Content-Length"), code)
			}
			c := dialRawH2(t, addr)
			c.headers(1, true, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/pkg.Svc/M", "content-type", "application/grpc")
			evs := c.read(1, endOrReset)
			if len(evs) != 1 || evs[0].kind != "headers" || !evs[0].endStream {
				t.Fatalf("gRPC: %v, want one HEADERS frame ending the stream (trailers-only)", evs)
			}
			f := evs[0].fields
			if _, msg := f["grpc-message"]; f[":status"] != "200" || f["content-type"] != "application/grpc" || f["grpc-status"] != want || msg {
				t.Errorf("gRPC: %v, want :status 200, application/grpc, grpc-status %s, no grpc-message", f, want)
			}
		})
	}

	startedThenFails := func(ps *procStream) error {
		ps.readUntilEOS()
		_ = ps.send(extproctest.StreamedHeaders(false, ":status", "200", "content-type", "text/plain"))
		_ = ps.send(extproctest.StreamedBody([]byte("one"), false))
		return status.Error(codes.Unavailable, "processor gone")
	}
	t.Run("after headers/HTTP/2", func(t *testing.T) {
		addr := startEmulator(t, baseSettings(), startProcessor(t, startedThenFails).addr)
		c := dialRawH2(t, addr)
		c.headers(1, true, ":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/m")
		evs := c.read(1, endOrReset)
		if len(evs) != 3 || evs[0].kind != "headers" || evs[0].fields[":status"] != "200" || string(evs[1].data) != "one" ||
			evs[2].kind != "rst" || evs[2].code != http2.ErrCodeInternal {
			t.Errorf("frames %v, want HEADERS 200, DATA one, RST_STREAM(INTERNAL_ERROR)", evs)
		}
	})
	t.Run("after headers/HTTP/1.1", func(t *testing.T) {
		addr := startEmulator(t, baseSettings(), startProcessor(t, startedThenFails).addr)
		resp, err := h1Client(t).Get("http://" + addr + "/m")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "one" || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("got %d %q %v, want 200, the body so far, then the connection cut", resp.StatusCode, b, err)
		}
	})
}
