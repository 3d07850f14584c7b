package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
//
// Started with answers by path (startNoopByPath) it answers each request
// with the answer captured for its :path: the baseline of many routes, a
// server that holds per-route state and does no other work.
type noop struct {
	extprocv3.UnimplementedExternalProcessorServer
	answer []*extprocv3.ProcessingResponse            // read-only once serving
	byPath map[string][]*extprocv3.ProcessingResponse // by :path; nil: answer for every path
	served

	hold     bool
	release  chan struct{}
	releaser sync.Once
	held     atomic.Int64
}

// startNoop listens on a free loopback port and serves answer.
func startNoop(answer []*extprocv3.ProcessingResponse, hold bool) (*noop, error) {
	return (&noop{answer: answer, hold: hold, release: make(chan struct{})}).listen("no-op server")
}

// listen serves n as name on a free loopback port.
func (n *noop) listen(name string) (*noop, error) {
	var err error
	n.served, err = serve(name, func(s grpc.ServiceRegistrar) { extprocv3.RegisterExternalProcessorServer(s, n) })
	if err != nil {
		return nil, err
	}
	return n, nil
}

// startNoopByPath listens on a free loopback port and answers a request
// for a path of answers with that path's answer, any other with an error.
func startNoopByPath(answers map[string][]*extprocv3.ProcessingResponse) (*noop, error) {
	if len(answers) == 0 {
		return nil, errors.New("starting the no-op server: no answers")
	}
	return (&noop{byPath: answers, release: make(chan struct{})}).listen("no-op server (by path)")
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
	headers, err := readRequest(stream)
	if err != nil {
		return nil
	}
	answer := n.answer
	if n.byPath != nil {
		path := pathOf(headers)
		if answer = n.byPath[path]; answer == nil {
			return status.Errorf(codes.InvalidArgument, "the no-op server answers the scenario's paths, not %q", path)
		}
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
	answerAndEnd(stream, answer)
	return nil
}

// pathOf is the :path of request headers, "" without one.
func pathOf(headers *extprocv3.HttpHeaders) string {
	for _, hv := range headers.GetHeaders().GetHeaders() {
		if hv.GetKey() == ":path" {
			return string(hv.GetRawValue())
		}
	}
	return ""
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

// take returns the messages recorded so far and starts a new record.
func (r *recorder) take() []*extprocv3.ProcessingResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	msgs := r.msgs
	r.msgs = nil
	return msgs
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
	msgs := rec.take()
	if len(msgs) == 0 {
		return nil, rep, errors.New("capturing the processor's answer: nothing was recorded")
	}
	return msgs, rep, nil
}

// captureEach GETs each path once through the processor at addr, on one
// connection that records what the processor sent, checks each answer, and
// returns the recorded messages by path for the no-op server to replay.
func (e *env) captureEach(ctx context.Context, addr string, paths []string, check func(path string, r reply) error) (map[string][]*extprocv3.ProcessingResponse, error) {
	rec := &recorder{}
	s, err := e.dial("processor (capture)", addr, 1, grpc.WithStreamInterceptor(rec.interceptor()))
	if err != nil {
		return nil, err
	}
	defer s.close()
	out := make(map[string][]*extprocv3.ProcessingResponse, len(paths))
	for _, p := range paths {
		rep, err := exchange(ctx, s.client(0), newRequest(s.client(0), p))
		if err == nil {
			err = check(p, rep)
		}
		if err != nil {
			return nil, fmt.Errorf("capturing the processor's answer to %s: %w", p, err)
		}
		msgs := rec.take() // the stream has ended: everything it received is recorded
		if len(msgs) == 0 {
			return nil, fmt.Errorf("capturing the processor's answer to %s: nothing was recorded", p)
		}
		out[p] = msgs
	}
	return out, nil
}
