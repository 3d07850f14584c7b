package processor

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
)

// The linger after the answer ends on the drain, long before CloseWait:
// an HTTP exchange's within its quiet time (no reader yet), a gRPC
// exchange's with its reader running since the request.
func TestLingerEndsOnDrain(t *testing.T) {
	for _, kind := range []string{"http", "grpc"} {
		t.Run(kind, func(t *testing.T) {
			drain, stop := context.WithCancel(context.Background())
			defer stop()
			h := newHarness(t, testConfig(t), func(o *Options) {
				o.Drain = drain
				o.CloseWait = time.Hour
				o.HTTP = httpFunc(func(context.Context, *capability.HTTPRequest) *capability.HTTPResponse {
					return &capability.HTTPResponse{Status: 204}
				})
				o.GRPC = grpcFunc(func(context.Context, *capability.GRPCCall) capability.Status { return capability.OK() })
			})
			s := h.open()
			if kind == "http" {
				s.headers(true, httpReq("GET", "/items/1")...)
				if ir := s.immediate(); ir.GetStatus().GetCode() != 204 {
					t.Fatal(ir)
				}
			} else {
				s.headers(false, grpcReq("/example.Echo/Say")...)
				if _, tr := readGRPC(t, s, nil); tr["grpc-status"] != "0" {
					t.Fatal(tr)
				}
			}
			stop()
			if _, err := s.s.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("after the drain: %v, want the server to end the stream", err)
			}
			s.finish()
			waitIdle(t, h.srv)
		})
	}
}

// A half-close after the answer, with request chunks still arriving first,
// ends the exchange without another message, however long the quiet time.
func TestLingerNoticesHalfClose(t *testing.T) {
	h := newHarness(t, testConfig(t), func(o *Options) {
		o.CloseWait = time.Hour
		o.HTTP = httpFunc(func(context.Context, *capability.HTTPRequest) *capability.HTTPResponse {
			return &capability.HTTPResponse{Status: 204}
		})
	})
	s := h.open()
	s.headers(true, httpReq("GET", "/items/1")...)
	if ir := s.immediate(); ir.GetStatus().GetCode() != 204 {
		t.Fatal(ir)
	}
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
}
