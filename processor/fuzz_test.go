package processor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
)

// fuzzHeaderSets are the request_headers a fuzz input can choose from; the
// x-fuzz-mode header selects the test handler's behaviour.
var fuzzHeaderSets = [][]string{
	httpReq("GET", "/items/1"),                              // matched: 501
	httpReq("POST", "/items", "content-type", "text/plain"), // matched: 501 after the body
	httpReq("GET", "/nothing"),                              // no route: 404
	grpcReq("/example.Echo/Say", "x-fuzz-mode", "echo"),     // streams the request back
	grpcReq("/example.Fetch/Events"),                        // matched: UNIMPLEMENTED
	grpcReq("/nope.Svc/X"),                                  // no route
	httpReq("POST", "/echo", "x-fuzz-mode", "big"),          // answer above maxChunk: streamed
	grpcReq("/example.Echo/Stream", "x-fuzz-mode", "early"), // answers before reading, then errors
	httpReq("POST", "/items", "content-length", "1000"),     // 413 at once
	grpcReq("/example.Echo/Say", "x-fuzz-mode", "echo", "grpc-timeout", "1n"),
	{":method", "GET", ":authority", "x"}, // no :path
	httpReq("GET", "/admin"),              // guarded, no guard checker: 401
	grpcReq("/example.Echo/Say", "x-fuzz-mode", "echo", "content-type", "application/grpc+proto"),
}

// decodeFuzz turns bytes into a sequence of ext_proc messages, as a (possibly
// misbehaving) Envoy would send them.
func decodeFuzz(data []byte) []*extprocv3.ProcessingRequest {
	var msgs []*extprocv3.ProcessingRequest
	i := 0
	next := func() byte {
		if i >= len(data) {
			return 0
		}
		i++
		return data[i-1]
	}
	for i < len(data) && len(msgs) < 64 {
		op := next()
		eos := op&0x80 != 0
		switch int(op&0x7f) % 9 {
		case 0, 7:
			msgs = append(msgs, extproctest.RequestHeaders(eos, fuzzHeaderSets[int(next())%len(fuzzHeaderSets)]...))
		case 1:
			n := min(int(next())%32, len(data)-i)
			msgs = append(msgs, extproctest.RequestBody(bytes.Clone(data[i:i+n]), eos))
			i += n
		case 2:
			msgs = append(msgs, extproctest.RequestBody(grpcwire.Frame(bytes.Repeat([]byte("m"), int(next())%80)), eos))
		case 3:
			msgs = append(msgs, extproctest.RequestTrailers("x-t", "1"))
		case 4:
			msgs = append(msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
				ResponseHeaders: &extprocv3.HttpHeaders{Headers: extproctest.HeaderMap(":status", "200")}}})
		case 5:
			msgs = append(msgs, &extprocv3.ProcessingRequest{})
		case 6:
			msgs = append(msgs, extproctest.RequestBody(nil, true))
		case 8:
			frame := grpcwire.Frame(bytes.Repeat([]byte("s"), int(next())%40))
			cut := int(next()) % len(frame)
			msgs = append(msgs, extproctest.RequestBody(frame[:cut], false), extproctest.RequestBody(frame[cut:], eos))
		}
	}
	return msgs
}

type fuzzHTTP struct{ stub handler.HTTPHandler }

func (f fuzzHTTP) HandleHTTP(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
	if req.Headers.Get("x-fuzz-mode") == "big" {
		return &handler.HTTPResponse{Status: 200, Body: bytes.Repeat([]byte("b"), maxChunk+10)}
	}
	return f.stub.HandleHTTP(ctx, req)
}

type fuzzGRPC struct{ stub handler.GRPCHandler }

func (f fuzzGRPC) HandleGRPC(ctx context.Context, call *handler.GRPCCall) handler.Status {
	switch call.Headers.Get("x-fuzz-mode") {
	case "echo":
		return echo(ctx, call)
	case "early":
		if err := call.Out.Send(ctx, []byte("hi")); err != nil {
			return handler.NewStatus(codes.Internal, err.Error())
		}
		for {
			if _, err := call.In.Recv(ctx); err != nil {
				return handler.NewStatus(codes.NotFound, "done: "+err.Error())
			}
		}
	}
	return f.stub.HandleGRPC(ctx, call)
}

// FuzzExchange drives the server with arbitrary ext_proc message sequences
// and checks the answer protocol: exactly one terminal answer to a stream
// that starts with request_headers (none otherwise), nothing but
// ImmediateResponse and StreamedImmediateResponse (never a reply to a request
// chunk), streamed parts in order, grpc_status on every gRPC
// ImmediateResponse, and no goroutine left when the stream is over.
func FuzzExchange(f *testing.F) {
	f.Add([]byte{0x80, 0})                               // GET, no body
	f.Add([]byte{0x00, 1, 0x01, 3, 'a', 'b', 'c', 0x86}) // POST with a body
	f.Add([]byte{0x00, 3, 0x02, 5, 0x88, 7, 2})          // gRPC echo, frame split across chunks
	h := newHarness(f, testConfig(f), func(o *Options) {
		o.Logger = slog.New(slog.DiscardHandler) // f.Log is not allowed inside the fuzz target
		o.HTTP = fuzzHTTP{httpkafka.New(nil, nil)}
		o.GRPC = fuzzGRPC{grpckafka.New(nil, nil)}
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs := decodeFuzz(data)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := h.client.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			resps []*extprocv3.ProcessingResponse
			err   error
		}
		got := make(chan result, 1)
		go func() {
			var r result
			for {
				resp, err := s.Recv()
				if err != nil {
					r.err = err
					got <- r
					return
				}
				r.resps = append(r.resps, resp)
			}
		}()
		for _, m := range msgs {
			if err := s.Send(m); err != nil {
				break // the server ended the stream; Envoy would stop too
			}
		}
		_ = s.CloseSend()
		var r result
		select {
		case r = <-got:
		case <-ctx.Done():
			t.Fatalf("the exchange did not end: %d messages sent", len(msgs))
		}
		checkAnswers(t, msgs, r.resps, r.err)
		waitIdle(t, h.srv)
	})
}

func checkAnswers(t *testing.T, msgs []*extprocv3.ProcessingRequest, resps []*extprocv3.ProcessingResponse, end error) {
	t.Helper()
	if len(msgs) == 0 || msgs[0].GetRequestHeaders() == nil {
		if len(resps) != 0 {
			t.Fatalf("%d answers to a stream not starting with request_headers", len(resps))
		}
		if len(msgs) > 0 && status.Code(end) != codes.FailedPrecondition {
			t.Fatalf("stream ended with %v, want FailedPrecondition", end)
		}
		return
	}
	if !errors.Is(end, io.EOF) {
		t.Fatalf("stream ended with %v, want OK", end)
	}
	isGRPC := false
	for _, h := range msgs[0].GetRequestHeaders().GetHeaders().GetHeaders() {
		if h.GetKey() == "content-type" && grpcwire.IsGRPCContentType(string(h.GetRawValue())) {
			isGRPC = true
		}
	}
	terminal, headersSent := 0, false
	for i, r := range resps {
		if terminal > 0 {
			t.Fatalf("answer %d after the terminal answer: %v", i, r)
		}
		switch x := r.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			if headersSent {
				t.Fatal("ImmediateResponse after streamed headers")
			}
			if isGRPC && x.ImmediateResponse.GetGrpcStatus() == nil {
				t.Fatal("gRPC ImmediateResponse without grpc_status")
			}
			terminal++
		case *extprocv3.ProcessingResponse_StreamedImmediateResponse:
			sr := x.StreamedImmediateResponse
			switch {
			case sr.GetHeadersResponse() != nil:
				if headersSent {
					t.Fatal("two headers_response")
				}
				headersSent = true
				if sr.GetHeadersResponse().GetEndOfStream() {
					if isGRPC {
						t.Fatal("gRPC answer ended without trailers")
					}
					terminal++
				}
			case sr.GetBodyResponse() != nil:
				if !headersSent {
					t.Fatal("body_response before headers_response")
				}
				if len(sr.GetBodyResponse().GetBody()) > maxChunk {
					t.Fatal("body_response above maxChunk")
				}
				if sr.GetBodyResponse().GetEndOfStream() {
					if isGRPC {
						t.Fatal("gRPC answer ended without trailers")
					}
					terminal++
				}
			case sr.GetTrailersResponse() != nil:
				if !headersSent {
					t.Fatal("trailers_response before headers_response")
				}
				if isGRPC {
					if _, ok := header(t, sr.GetTrailersResponse().GetHeaders(), "grpc-status"); !ok {
						t.Fatal("gRPC trailers without grpc-status")
					}
				}
				terminal++
			default:
				t.Fatal("empty StreamedImmediateResponse")
			}
		default:
			t.Fatalf("reply that is not an answer to request_headers: %v", r)
		}
	}
	if terminal != 1 {
		t.Fatalf("%d terminal answers in %d messages", terminal, len(resps))
	}
}
