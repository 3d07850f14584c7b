package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
)

// noop is the baseline of every scenario: an ext_proc server with the same
// gRPC plumbing as the processor (grpc.NewServer with
// stack.GRPCServerOptions, as stack.StartProcessor builds it) that does no
// work. It reads the request to
// its end as the processor does for HTTP, then sends the ProcessingResponses
// captured from one real answer of the processor, so the same bytes travel.
//
// In hold mode it keeps every answer until release is called, counting the
// streams it holds: the baseline of a long poll.
type noop struct {
	extprocv3.UnimplementedExternalProcessorServer
	answer []*extprocv3.ProcessingResponse // read-only once serving
	served

	hold     bool
	release  chan struct{}
	releaser sync.Once
	held     atomic.Int64
}

// startNoop listens on a free loopback port and serves answer.
func startNoop(answer []*extprocv3.ProcessingResponse, hold bool) (*noop, error) {
	n := &noop{answer: answer, hold: hold, release: make(chan struct{})}
	var err error
	n.served, err = serve("no-op server", func(s grpc.ServiceRegistrar) { extprocv3.RegisterExternalProcessorServer(s, n) })
	if err != nil {
		return nil, err
	}
	return n, nil
}

// releaseAll answers every held stream, and every later one at once.
func (n *noop) releaseAll() { n.releaser.Do(func() { close(n.release) }) }

// heldNow is the number of streams waiting for releaseAll.
func (n *noop) heldNow() int64 { return n.held.Load() }

func (n *noop) stop() {
	n.releaseAll()
	n.served.stop()
}

// Process answers one stream.
func (n *noop) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	if _, err := readRequest(stream); err != nil {
		return nil
	}
	if n.hold {
		n.held.Add(1)
		select {
		case <-n.release:
		case <-ctx.Done():
		}
		n.held.Add(-1)
		if ctx.Err() != nil {
			return nil
		}
	}
	answerAndEnd(stream, n.answer)
	return nil
}

// readRequest reads a request to its end and returns its headers: the
// answer goes after the whole request, as the processor answers an HTTP
// request (bodyless GETs end with their headers).
func readRequest(stream extprocv3.ExternalProcessor_ProcessServer) (*extprocv3.HttpHeaders, error) {
	m, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	headers := m.GetRequestHeaders()
	for eos := headers.GetEndOfStream(); !eos; {
		if m, err = stream.Recv(); err != nil {
			return nil, err
		}
		eos = m.GetRequestBody().GetEndOfStream() || m.GetRequestTrailers() != nil
	}
	return headers, nil
}

// answerAndEnd sends answer and returns, ending the stream with OK right
// behind it, as the processor does after answering a complete request (and
// readRequest has read it to its end): Envoy handles the answer first and
// ignores the close.
func answerAndEnd(stream extprocv3.ExternalProcessor_ProcessServer, answer []*extprocv3.ProcessingResponse) {
	for _, a := range answer {
		if err := stream.Send(a); err != nil {
			return
		}
	}
}

// recorder keeps the ProcessingResponses one client stream received.
type recorder struct {
	mu   sync.Mutex
	msgs []*extprocv3.ProcessingResponse
}

func (r *recorder) interceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &recordingStream{ClientStream: s, r: r}, nil
	}
}

type recordingStream struct {
	grpc.ClientStream
	r *recorder
}

func (s *recordingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if p, ok := m.(*extprocv3.ProcessingResponse); ok && err == nil {
		s.r.mu.Lock()
		s.r.msgs = append(s.r.msgs, proto.Clone(p).(*extprocv3.ProcessingResponse))
		s.r.mu.Unlock()
	}
	return err
}

// capture runs req (with body, when req.EndOfStream is false) once through the processor on a connection of its own
// that records what the processor sent, checks the answer, and returns the
// recorded messages for the no-op server to replay.
func (e *env) capture(ctx context.Context, req emulator.Request, body []byte, check func(reply) error) ([]*extprocv3.ProcessingResponse, reply, error) {
	rec := &recorder{}
	s, err := e.dial("processor (capture)", e.srv.processorAddr(), 1, grpc.WithStreamInterceptor(rec.interceptor()))
	if err != nil {
		return nil, reply{}, err
	}
	defer s.close()
	rep, err := exchangeBody(ctx, s.client(0), req, body)
	if err == nil {
		err = check(rep)
	}
	if err != nil {
		return nil, rep, fmt.Errorf("capturing the processor's answer: %w", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.msgs) == 0 {
		return nil, rep, errors.New("capturing the processor's answer: nothing was recorded")
	}
	return rec.msgs, rep, nil
}
