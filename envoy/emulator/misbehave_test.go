package emulator

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
)

// The misbehaving-processor suite: each case asserts what Envoy does when
// the processor breaks the protocol: a reply that does not fit the
// filter's state, a failed or early-closed stream, a reply during a
// streamed answer.

func get(t *testing.T, addr string) (int, http.Header, string) {
	t.Helper()
	resp, err := h1Client(t).Get("http://" + addr + "/m")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// sendAll answers request_headers (after the whole request) with msgs,
// back to back.
func sendAll(msgs ...*extprocv3.ProcessingResponse) func(ps *procStream) error {
	return func(ps *procStream) error {
		ps.readUntilEOS()
		for _, m := range msgs {
			if err := ps.send(m); err != nil {
				return nil // the emulator may already have cancelled
			}
		}
		<-ps.ctx.Done()
		return nil
	}
}

// Spurious replies before any response headers -> status_on_error (503
// here; gRPC UNAVAILABLE), and the Process stream is cancelled.
func TestMisbehavingSpuriousBeforeAnswer(t *testing.T) {
	cases := map[string]*extprocv3.ProcessingResponse{
		// [test ServerSendOutOfOrderResponseDuplexStreamed]
		"body reply before the header reply": bodyReply(),
		"empty ProcessingResponse":           {},
		"response_headers reply": {Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{}}},
		"streamed body before streamed headers": extproctest.StreamedBody([]byte("x"), true),
		"streamed trailers before headers":      extproctest.StreamedTrailers("grpc-status", "0"),
		// Unhandled in <=1.39; the v1.40 standalone form is not emulated.
		"standalone mode_override": {ModeOverride: &extprocfilterv3.ProcessingMode{RequestBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED}},
	}
	for name, resp := range cases {
		t.Run(name, func(t *testing.T) {
			p := startProcessor(t, sendAll(resp))
			addr := startEmulator(t, baseSettings(), p.addr)
			if code, _, body := get(t, addr); code != 503 || body != "" {
				t.Errorf("HTTP: %d %q, want status_on_error 503", code, body)
			}
			if !p.stream(t).cancelled() {
				t.Error("Process stream not cancelled")
			}
			if st := status.Convert(invoke(t, addr)); st.Code() != codes.Unavailable {
				t.Errorf("gRPC: %v, want UNAVAILABLE", st.Err())
			}
		})
	}
}

// Packed unexpected replies (CVE-2026-47207): the first spurious reply
// fails the request once; the rest are ignored; the emulator keeps
// serving.
func TestMisbehavingPackedUnexpectedReplies(t *testing.T) {
	p := startProcessor(t, sendAll(bodyReply(), bodyReply(), &extprocv3.ProcessingResponse{}, extproctest.Immediate(200, "late", nil, nil)))
	addr := startEmulator(t, baseSettings(), p.addr)
	for i := range 3 {
		if code, _, body := get(t, addr); code != 503 || body != "" {
			t.Fatalf("request %d: %d %q, want exactly the status_on_error reply", i, code, body)
		}
	}
	if !p.stream(t).cancelled() {
		t.Error("Process stream not cancelled")
	}
}

// A reply to a request chunk during a streamed answer resets the client's
// stream [test SpuriousResponse, InvalidBodyMessageAfterLocalResponseStarted];
// so do an ImmediateResponse after streamed headers and packed replies.
func TestMisbehavingReplyDuringStreamedAnswer(t *testing.T) {
	startStream := extproctest.StreamedHeaders(false, ":status", "200", "content-type", "application/grpc")
	cases := map[string][]*extprocv3.ProcessingResponse{
		"body reply":                     {startStream, bodyReply()},
		"trailers reply":                 {startStream, {Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}},
		"immediate after headers":        {startStream, extproctest.Immediate(500, "", nil, nil)},
		"second headers_response":        {startStream, startStream},
		"packed replies after headers":   {startStream, bodyReply(), bodyReply(), bodyReply()},
		"header reply after local start": {startStream, {Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}},
	}
	for name, msgs := range cases {
		t.Run(name, func(t *testing.T) {
			p := startProcessor(t, func(ps *procStream) error {
				ps.next()
				ps.next() // a request chunk arrived
				for _, m := range msgs {
					if err := ps.send(m); err != nil {
						return nil
					}
				}
				<-ps.ctx.Done()
				return nil
			})
			addr := startEmulator(t, baseSettings(), p.addr)
			c := dialRawH2(t, addr)
			c.headers(1, false, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/pkg.Svc/M", "content-type", "application/grpc")
			c.data(1, false, []byte{0, 0, 0, 0, 1, 'a'})
			evs := c.read(1, func(e h2Event) bool { return e.kind == "rst" || e.endStream })
			last := evs[len(evs)-1]
			if evs[0].kind != "headers" || evs[0].endStream || last.kind != "rst" || last.code != http2.ErrCodeInternal {
				t.Errorf("frames %v, want response headers then RST_STREAM", evs)
			}
			if !p.stream(t).cancelled() {
				t.Error("Process stream not cancelled")
			}
		})
	}
}

// Value instead of RawValue: Envoy reads raw_value only, so the header is
// set with an empty value ([code]).
func TestMisbehavingValueInsteadOfRawValue(t *testing.T) {
	t.Run("ImmediateResponse header", func(t *testing.T) {
		mut := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-foo", Value: "bar"}}}}
		p := startProcessor(t, sendAll(extproctest.Immediate(200, "ok", nil, mut)))
		addr := startEmulator(t, baseSettings(), p.addr)
		code, h, body := get(t, addr)
		if code != 200 || body != "ok" {
			t.Fatalf("%d %q", code, body)
		}
		if v, ok := h["X-Foo"]; !ok || len(v) != 1 || v[0] != "" {
			t.Errorf("x-foo = %q (present %v), want present and empty", v, ok)
		}
	})
	t.Run("both value and raw_value stop the mutation", func(t *testing.T) {
		mut := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			{Header: extproctest.Header("x-before", "1")},
			{Header: &corev3.HeaderValue{Key: "x-both", Value: "v", RawValue: []byte("r")}},
			{Header: extproctest.Header("x-after", "2")},
		}}
		p := startProcessor(t, sendAll(extproctest.Immediate(201, "ok", nil, mut)))
		addr := startEmulator(t, baseSettings(), p.addr)
		code, h, _ := get(t, addr)
		if code != 201 || h.Get("X-Before") != "1" || h.Get("X-Both") != "" || h.Get("X-After") != "" {
			t.Errorf("%d %v: want the reply with only the mutations before the invalid one", code, h)
		}
	})
	t.Run("streamed trailers", func(t *testing.T) {
		p := startProcessor(t, func(ps *procStream) error {
			ps.readUntilEOS()
			_ = ps.send(extproctest.StreamedHeaders(false, ":status", "200", "content-type", "application/grpc"))
			return ps.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_StreamedImmediateResponse{
				StreamedImmediateResponse: &extprocv3.StreamedImmediateResponse{Response: &extprocv3.StreamedImmediateResponse_TrailersResponse{
					TrailersResponse: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "grpc-status", Value: "0"}}},
				}},
			}})
		})
		addr := startEmulator(t, baseSettings(), p.addr)
		c := dialRawH2(t, addr)
		c.headers(1, true, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/pkg.Svc/M", "content-type", "application/grpc")
		evs := c.read(1, endOrReset)
		last := evs[len(evs)-1]
		if v, ok := last.fields["grpc-status"]; last.kind != "headers" || !ok || v != "" {
			t.Errorf("frames %v, want trailers with an empty grpc-status", evs)
		}
		// A grpc-go client cannot read that status.
		if st := status.Convert(invoke(t, addr)); st.Code() == codes.OK {
			t.Errorf("grpc-go saw OK from an empty grpc-status")
		}
	})
}

// gRPC ImmediateResponse without grpc_status: the HTTP status is mapped,
// so 200 and 500 become UNKNOWN ([code]).
func TestMisbehavingGRPCImmediateWithoutGRPCStatus(t *testing.T) {
	for code, want := range map[int]codes.Code{200: codes.Unknown, 500: codes.Unknown, 503: codes.Unavailable, 504: codes.Unavailable} {
		p := startProcessor(t, sendAll(extproctest.Immediate(code, "", nil, nil)))
		addr := startEmulator(t, baseSettings(), p.addr)
		if st := status.Convert(invoke(t, addr)); st.Code() != want {
			t.Errorf("HTTP %d without grpc_status: %v, want %v", code, st.Code(), want)
		}
	}
}

// Streamed headers with a bad :status -> status_on_error; without :status
// -> 502 with a body (TestStreamedHeadersWithoutStatus).
func TestMisbehavingStreamedStatus(t *testing.T) {
	for name, c := range map[string]struct {
		resp *extprocv3.ProcessingResponse
		code int
	}{
		"status 100":   {extproctest.StreamedHeaders(false, ":status", "100"), 503},
		"status text":  {extproctest.StreamedHeaders(false, ":status", "ok"), 503},
		"no status":    {extproctest.StreamedHeaders(false, "content-type", "text/plain"), 502},
		"status value": {&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_StreamedImmediateResponse{StreamedImmediateResponse: &extprocv3.StreamedImmediateResponse{Response: &extprocv3.StreamedImmediateResponse_HeadersResponse{HeadersResponse: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", Value: "200"}}}}}}}}, 503},
	} {
		t.Run(name, func(t *testing.T) {
			p := startProcessor(t, sendAll(c.resp))
			addr := startEmulator(t, baseSettings(), p.addr)
			if code, _, _ := get(t, addr); code != c.code {
				t.Errorf("got %d, want %d", code, c.code)
			}
		})
	}
}

// override_message_timeout: the whole message is ignored (no timer in
// FDS [code]); the real answer that follows works.
func TestMisbehavingOverrideMessageTimeoutIgnored(t *testing.T) {
	override := &extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(time.Second),
		Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{Body: []byte("ignored")}}}
	p := startProcessor(t, sendAll(override, extproctest.Immediate(202, "real", nil, nil)))
	addr := startEmulator(t, baseSettings(), p.addr)
	if code, _, body := get(t, addr); code != 202 || body != "real" {
		t.Errorf("got %d %q, want the answer after the override", code, body)
	}
}

// Close OK during a streamed answer: the response never finishes; only the
// idle timeout ends it with a reset (Filter::onGrpcCloseWithStatus).
func TestMisbehavingCloseOKDuringStreamedAnswer(t *testing.T) {
	p := startProcessor(t, func(ps *procStream) error {
		ps.readUntilEOS()
		_ = ps.send(extproctest.StreamedHeaders(false, ":status", "200", "content-type", "application/grpc"))
		_ = ps.send(extproctest.StreamedBody(frame(t, wrapperspb.String("one")), false))
		return nil
	})
	cs := watchStream(t, p, 150*time.Millisecond)
	var out wrapperspb.StringValue
	if err := cs.RecvMsg(&out); err != nil || out.GetValue() != "one" {
		t.Fatalf("first message %q %v", out.GetValue(), err)
	}
	if err := cs.RecvMsg(&out); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "RST_STREAM") {
		t.Errorf("got %v, want the idle-timeout reset", err)
	}
}
