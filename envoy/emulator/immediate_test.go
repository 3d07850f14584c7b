package emulator

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
)

// answerAfterEOS reads the whole request, then sends resp; it records how
// the stream ended afterwards.
func answerAfterEOS(resp *extprocv3.ProcessingResponse, ends chan<- error) func(ps *procStream) error {
	return func(ps *procStream) error {
		if _, ok := ps.readUntilEOS(); !ok {
			return errors.New("request did not end")
		}
		if err := ps.send(resp); err != nil {
			return err
		}
		if ends != nil {
			ends <- ps.recvEnd()
		}
		<-ps.ctx.Done()
		return nil
	}
}

// ImmediateResponse -> local reply for HTTP clients, on
// HTTP/1.1 and h2c; then the Process stream is cancelled, not half-closed.
func TestImmediateResponseHTTP(t *testing.T) {
	//nolint:staticcheck // SA1019: Envoy's ext_proc reads only the deprecated append field.
	appendOpt := &corev3.HeaderValueOption{Header: extproctest.Header("x-custom", "w"), Append: wrapperspbBool(true)}
	mut := extproctest.SetHeaders("x-custom", "v", "x-envoy-foo", "bar", "host", "evil", "server", "mine")
	mut.SetHeaders = append(mut.SetHeaders, appendOpt)
	cases := []struct {
		name, method string
		resp         *extprocv3.ProcessingResponse
		status       int
		body, ctype  string
		clen         string
		check        func(t *testing.T, h http.Header)
	}{
		{name: "body gets text/plain and content-length", method: "POST", resp: extproctest.Immediate(201, "created", nil, mut),
			status: 201, body: "created", ctype: "text/plain", clen: "7",
			check: func(t *testing.T, h http.Header) {
				if g := h.Values("X-Custom"); strings.Join(g, ",") != "v,w" {
					t.Errorf("x-custom = %q, want set then appended", g)
				}
				if g := h.Get("X-Envoy-Foo"); g != "" {
					t.Errorf("x-envoy-foo = %q: the mutation rules refuse x-envoy-*", g)
				}
				if g := h.Get("Server"); g != "envoy" {
					t.Errorf("server = %q, want envoy", g)
				}
			}},
		{name: "mutation content-type kept", method: "GET", resp: extproctest.Immediate(200, `{"a":1}`, nil, extproctest.SetHeaders("content-type", "application/json")),
			status: 200, body: `{"a":1}`, ctype: "application/json", clen: "7"},
		{name: "empty body drops content-type", method: "GET", resp: extproctest.Immediate(404, "", nil, extproctest.SetHeaders("content-type", "application/json", "content-length", "99")),
			status: 404, body: "", ctype: "", clen: "0"},
		{name: "304 keeps etag, loses content-type", method: "GET", resp: extproctest.Immediate(304, "", nil, extproctest.SetHeaders("etag", `"0:1"`, "content-type", "application/json")),
			status: 304, body: "", ctype: "", clen: "",
			check: func(t *testing.T, h http.Header) {
				if g := h.Get("Etag"); g != `"0:1"` {
					t.Errorf("etag = %q, want the mutation's", g)
				}
			}},
		{name: "HEAD has no body", method: "HEAD", resp: extproctest.Immediate(200, "abcd", nil, nil),
			status: 200, body: "", ctype: "text/plain", clen: "4"},
		{name: "status below 200 becomes 200", method: "GET", resp: extproctest.Immediate(100, "x", nil, nil),
			status: 200, body: "x", ctype: "text/plain", clen: "1"},
		{name: "unset status is 200", method: "GET", resp: extproctest.Immediate(0, "y", nil, nil),
			status: 200, body: "y", ctype: "text/plain", clen: "1"},
	}
	for _, proto := range []string{"HTTP/1.1", "h2c"} {
		for _, c := range cases {
			t.Run(proto+"/"+c.name, func(t *testing.T) {
				ends := make(chan error, 1)
				p := startProcessor(t, answerAfterEOS(c.resp, ends))
				addr := startEmulator(t, baseSettings(), p.addr)
				client := h1Client(t)
				if proto == "h2c" {
					client = h2cClient(t)
				}
				var body io.Reader
				if c.method == "POST" {
					body = strings.NewReader("payload")
				}
				req, _ := http.NewRequest(c.method, "http://"+addr+"/r", body)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != c.status || string(b) != c.body {
					t.Errorf("got %d %q, want %d %q", resp.StatusCode, b, c.status, c.body)
				}
				if g := resp.Header.Get("Content-Type"); g != c.ctype {
					t.Errorf("content-type %q, want %q", g, c.ctype)
				}
				wantLen := c.clen
				if proto == "h2c" && c.clen == "0" {
					wantLen = "" // only Envoy's HTTP/1 codec adds content-length: 0
				}
				if g, ok := resp.Header["Content-Length"]; strings.Join(g, ",") != wantLen || ok != (wantLen != "") {
					t.Errorf("content-length %q, want %q", g, wantLen)
				}
				if c.check != nil {
					c.check(t, resp.Header)
				}
				if err := <-ends; errors.Is(err, io.EOF) || status.Code(err) != codes.Canceled {
					t.Errorf("Process stream ended with %v, want a cancel (RST), never a half-close", err)
				}
			})
		}
	}
}

func wrapperspbBool(v bool) *wrapperspb.BoolValue { return wrapperspb.Bool(v) }

func invoke(t *testing.T, addr string) error {
	t.Helper()
	conn := grpcClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out wrapperspb.StringValue
	return conn.Invoke(ctx, "/pkg.Svc/Method", wrapperspb.String("req"), &out)
}

// GRPC requests get a trailers-only reply; grpc-status
// precedence mutation > grpc_status > HTTP mapping; grpc-message is the
// percent-encoded body. A real grpc-go client sees the code and the decoded
// message.
func TestImmediateResponseGRPC(t *testing.T) {
	msg := "not found: ~x% \u00e9\n"
	cases := []struct {
		name string
		resp *extprocv3.ProcessingResponse
		code codes.Code
		msg  string
	}{
		{"grpc_status and message", extproctest.Immediate(404, msg, u32(5), nil), codes.NotFound, msg},
		{"mutation grpc-status wins", extproctest.Immediate(200, "m", u32(5), extproctest.SetHeaders("grpc-status", "9")), codes.FailedPrecondition, "m"},
		{"mapping 403", extproctest.Immediate(403, "", nil, nil), codes.PermissionDenied, ""},
		{"mapping 401", extproctest.Immediate(401, "", nil, nil), codes.Unauthenticated, ""},
		{"mapping 404", extproctest.Immediate(404, "", nil, nil), codes.Unimplemented, ""},
		{"mapping 429", extproctest.Immediate(429, "", nil, nil), codes.Unavailable, ""},
		{"mapping 400", extproctest.Immediate(400, "", nil, nil), codes.Internal, ""},
		{"grpc_status OK", extproctest.Immediate(200, "", u32(0), nil), codes.OK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := startProcessor(t, answerAfterEOS(c.resp, nil))
			addr := startEmulator(t, baseSettings(), p.addr)
			err := invoke(t, addr)
			st := status.Convert(err)
			if c.code == codes.OK {
				// Trailers-only OK carries no message: grpc-go reports the
				// missing response message.
				if st.Code() != codes.Internal && st.Code() != codes.OK {
					t.Errorf("got %v", err)
				}
				return
			}
			if st.Code() != c.code || st.Message() != c.msg {
				t.Errorf("got %v %q, want %v %q", st.Code(), st.Message(), c.code, c.msg)
			}
		})
	}
}

// The wire form: one HEADERS frame with END_STREAM, :status 200,
// content-type application/grpc, grpc-status and percent-encoded
// grpc-message, no DATA.
func TestImmediateResponseGRPCIsTrailersOnly(t *testing.T) {
	p := startProcessor(t, answerAfterEOS(extproctest.Immediate(404, "bad ~ % \u00e9", u32(5), extproctest.SetHeaders("x-extra", "1")), nil))
	addr := startEmulator(t, baseSettings(), p.addr)
	c := dialRawH2(t, addr)
	c.headers(1, false, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/pkg.Svc/M", "content-type", "application/grpc", "te", "trailers")
	c.data(1, true, []byte{0, 0, 0, 0, 0})
	evs := c.read(1, endOrReset)
	if len(evs) != 1 || evs[0].kind != "headers" || !evs[0].endStream {
		t.Fatalf("frames %v, want a single HEADERS with END_STREAM", evs)
	}
	f := evs[0].fields
	want := map[string]string{":status": "200", "content-type": "application/grpc", "grpc-status": "5",
		"grpc-message": "bad %7E %25 %C3%A9", "x-extra": "1"}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s = %q, want %q", k, f[k], v)
		}
	}
}

// The processor closes the stream with OK before answering ->
// the request continues to its route: the direct_response 503 for HTTP,
// "no healthy upstream" (503 -> UNAVAILABLE) on the gRPC placeholder
// route. A CONTINUE header reply does the same.
func TestProcessorLetsRequestThrough(t *testing.T) {
	closeOK := func(ps *procStream) error { ps.next(); return nil }
	headersContinue := func(ps *procStream) error {
		ps.next()
		return ps.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}})
	}
	for name, script := range map[string]func(*procStream) error{"close OK": closeOK, "CONTINUE": headersContinue} {
		t.Run(name, func(t *testing.T) {
			p := startProcessor(t, script)
			addr := startEmulator(t, baseSettings(), p.addr)
			resp, err := h1Client(t).Get("http://" + addr + "/items")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || string(b) != "no answer from kafka-ext-proc\n" || resp.Header.Get("Content-Type") != "text/plain" {
				t.Errorf("HTTP: %d %q %q, want the direct_response", resp.StatusCode, b, resp.Header.Get("Content-Type"))
			}
			st := status.Convert(invoke(t, addr))
			if st.Code() != codes.Unavailable || st.Message() != "no healthy upstream" {
				t.Errorf("gRPC: %v %q, want UNAVAILABLE no healthy upstream", st.Code(), st.Message())
			}
		})
	}
}

// A non-OK close or an unreachable processor -> status_on_error
// (503 in envoy.yaml: gRPC UNAVAILABLE), empty body.
func TestProcessorErrorIsStatusOnError(t *testing.T) {
	failing := startProcessor(t, func(ps *procStream) error {
		ps.next()
		return status.Error(codes.Internal, "boom")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := ln.Addr().String()
	ln.Close()
	for name, procAddr := range map[string]string{"non-OK close": failing.addr, "unreachable": unreachable} {
		t.Run(name, func(t *testing.T) {
			s := baseSettings()
			addr := startEmulator(t, s, procAddr)
			resp, err := h1Client(t).Get("http://" + addr + "/items")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || len(b) != 0 {
				t.Errorf("HTTP: %d %q, want 503 (status_on_error) with no body", resp.StatusCode, b)
			}
			if st := status.Convert(invoke(t, addr)); st.Code() != codes.Unavailable || st.Message() != "" {
				t.Errorf("gRPC: %v %q, want UNAVAILABLE without message", st.Code(), st.Message())
			}
		})
	}
	t.Run("default status_on_error is 500", func(t *testing.T) {
		s := baseSettings()
		s.ExtProc.StatusOnError = 0
		addr := startEmulator(t, s, failing.addr)
		resp, err := h1Client(t).Get("http://" + addr + "/items")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 500 {
			t.Errorf("got %d, want 500", resp.StatusCode)
		}
		if st := status.Convert(invoke(t, addr)); st.Code() != codes.Unknown {
			t.Errorf("gRPC: %v, want UNKNOWN (500)", st.Code())
		}
	})
}
