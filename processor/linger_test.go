package processor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/logbuf"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
)

// answerIncomplete opens a stream whose request is still incomplete when the
// processor answers: an HTTP POST whose content-length is over max-body (413
// at once), or a gRPC call whose handler answers before the client's
// half-close. It returns once the whole answer arrived.
func answerIncomplete(t *testing.T, h *harness, kind string) *stream {
	t.Helper()
	s := h.open()
	if kind == "http" {
		s.headers(false, httpReq("POST", "/items", "content-length", "65")...)
		problemOf(t, s.immediate(), 413)
	} else {
		s.headers(false, grpcReq("/example.Echo/Say")...)
		if _, tr := readGRPC(t, s, nil); tr["grpc-status"] != "0" {
			t.Fatal(tr)
		}
	}
	return s
}

func answerOK(o *Options) {
	o.HTTP = httpFunc(func(context.Context, *handler.HTTPRequest) *handler.HTTPResponse {
		return &handler.HTTPResponse{Status: 204}
	})
	o.GRPC = grpcFunc(func(context.Context, *handler.GRPCCall) handler.Status { return handler.OK() })
}

// debugLogger logs at debug level into a buffer.
func debugLogger() (*slog.Logger, *logbuf.Buffer) {
	var b logbuf.Buffer
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), &b
}

// lingerTimedOut is the linger's log line when closeWait ends it.
const lingerTimedOut = "Envoy did not close the ext_proc stream after the answer"

// The linger after an answer to an incomplete request ends on the drain,
// long before CloseWait: an HTTP exchange's within its quiet time (no reader
// yet), a gRPC exchange's with its reader running since the request.
func TestLingerEndsOnDrain(t *testing.T) {
	for _, kind := range []string{"http", "grpc"} {
		t.Run(kind, func(t *testing.T) {
			drain, stop := context.WithCancel(context.Background())
			defer stop()
			h := newHarness(t, testConfig(t), answerOK, func(o *Options) {
				o.Drain = drain
				o.CloseWait = time.Hour
			})
			s := answerIncomplete(t, h, kind)
			stop()
			if _, err := s.s.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("after the drain: %v, want the server to end the stream", err)
			}
			s.finish()
			waitIdle(t, h.srv)
		})
	}
}

// A half-close after the answer to an incomplete request, with request
// chunks still arriving first, ends the exchange without another message,
// however long the quiet time.
func TestLingerNoticesHalfClose(t *testing.T) {
	logger, logs := debugLogger()
	h := newHarness(t, testConfig(t), answerOK, func(o *Options) {
		o.CloseWait = time.Hour
		o.Logger = logger
	})
	s := answerIncomplete(t, h, "http")
	s.body([]byte("late"), false)
	s.body([]byte("later"), true)
	if err := s.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, %v after the half-close; want the stream ended", r, err)
	}
	s.finish()
	waitIdle(t, h.srv)
	if strings.Contains(logs.String(), "unexpected ext_proc message") {
		t.Fatalf("a chunk after the answer was not ignored quietly:\n%s", logs)
	}
}

// An answer to an incomplete request keeps the stream open until Envoy
// cancels or closes it: here nobody does, so closeWait ends the linger, and
// says so.
func TestIncompleteRequestLingers(t *testing.T) {
	for _, kind := range []string{"http", "grpc"} {
		t.Run(kind, func(t *testing.T) {
			logger, logs := debugLogger()
			h := newHarness(t, testConfig(t), answerOK, func(o *Options) {
				o.CloseWait = 20 * time.Millisecond
				o.Logger = logger
			})
			s := answerIncomplete(t, h, kind)
			if r, err := s.s.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("got %v, %v; want the stream ended after closeWait", r, err)
			}
			if !strings.Contains(logs.String(), lingerTimedOut) {
				t.Fatalf("the stream ended without lingering until closeWait; log:\n%s", logs)
			}
			s.finish()
			waitIdle(t, h.srv)
		})
	}
}

// An answer to a complete request ends the stream at once: the client sees
// the server's end (OK) right after the answer without cancelling or
// half-closing, however long closeWait is. Complete means end_of_stream on
// the headers or on the last body chunk, or trailers; for gRPC, the request
// stream's end seen before the handler's status.
func TestAnswerEndsCompleteRequest(t *testing.T) {
	frame := grpcwire.AppendFrame(nil, []byte("hi"))
	cases := []struct {
		name string
		send func(s *stream)
		grpc bool
	}{
		{"http headers end", func(s *stream) { s.headers(true, httpReq("GET", "/items/1")...) }, false},
		{"http body end", func(s *stream) {
			s.headers(false, httpReq("POST", "/items")...)
			s.body([]byte("{}"), false)
			s.body(nil, true)
		}, false},
		{"http trailers", func(s *stream) {
			s.headers(false, httpReq("POST", "/items")...)
			s.body([]byte("{}"), false)
			s.send(extproctest.RequestTrailers("x-t", "1"))
		}, false},
		{"http 413 on the last chunk", func(s *stream) {
			s.headers(false, httpReq("POST", "/items")...)
			s.body(bytes.Repeat([]byte("a"), 65), true)
		}, false},
		{"http route failure, no body", func(s *stream) { s.headers(true, httpReq("GET", "/nowhere")...) }, false},
		{"grpc body end", func(s *stream) {
			s.headers(false, grpcReq("/example.Echo/Say")...)
			s.body(frame, true)
		}, true},
		{"grpc trailers", func(s *stream) {
			s.headers(false, grpcReq("/example.Echo/Say")...)
			s.body(frame, false)
			s.send(extproctest.RequestTrailers())
		}, true},
	}
	logger, logs := debugLogger()
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.CloseWait = time.Hour
		o.Logger = logger
		o.HTTP = httpFunc(func(context.Context, *handler.HTTPRequest) *handler.HTTPResponse {
			return &handler.HTTPResponse{Status: 204}
		})
		o.GRPC = grpcFunc(echo)
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := h.open()
			c.send(s)
			if c.grpc {
				msgs, tr := readGRPC(t, s, nil)
				if tr["grpc-status"] != "0" || len(msgs) != 1 || string(msgs[0]) != "hi" {
					t.Fatal(msgs, tr)
				}
			} else if ir := s.immediate(); ir == nil {
				t.Fatal("no answer")
			}
			if r, err := s.s.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("got %v, %v after the answer; want the server's end (OK) at once", r, err)
			}
			waitIdle(t, h.srv)
			s.finish()
		})
	}
	if strings.Contains(logs.String(), lingerTimedOut) {
		t.Fatalf("an exchange lingered:\n%s", logs)
	}
}
