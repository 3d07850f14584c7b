package processor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// inbox hands completed request messages to a gRPC handler.
type inbox struct {
	ch  chan []byte
	err error // why the request stream ended; written before ch is closed
}

// Recv implements handler.MessageReader.
func (in *inbox) Recv(ctx context.Context) ([]byte, error) {
	select {
	case m, ok := <-in.ch:
		if !ok {
			return nil, in.err
		}
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (x *exchange) runGRPC(rh *extprocv3.HttpHeaders, headers route.Headers, md metadataMap, b *route.Binding) error {
	svc, method, ok := route.ParseGRPCPath(headers.Get(":path"))
	if !ok {
		return x.failAndLinger(&failure{grpc: codes.Unimplemented, detail: fmt.Sprintf("malformed gRPC path %q", headers.Get(":path"))})
	}
	m, err := b.MatchGRPC(x.ctx, &route.GRPCRequest{Service: svc, Method: method, Headers: headers, Metadata: md}, x.s.guards)
	if err != nil {
		if x.ctx.Err() != nil {
			return nil
		}
		return x.failAndLinger(routeFailure(err, svc+"/"+method))
	}
	x.matched(m, headers)

	hctx, cancel := context.WithCancel(x.ctx)
	defer cancel()
	var timeout time.Duration
	if v, ok := headers.Lookup("grpc-timeout"); ok {
		d, err := grpcwire.ParseTimeout(v)
		if err != nil {
			return x.failAndLinger(&failure{grpc: codes.InvalidArgument, detail: fmt.Sprintf("malformed grpc-timeout %q", v)})
		}
		timeout = d
		hctx, cancel = context.WithTimeout(hctx, d)
		defer cancel()
	}

	x.startReader() // the request's messages and the handler are awaited together
	c := &call{x: x, in: &inbox{ch: make(chan []byte, 1)}, cancel: cancel, hdone: make(chan struct{}), open: true, timeout: timeout}
	c.dec = grpcwire.NewDecoder(x.snap.limits.MaxBody)
	c.start(hctx, &handler.GRPCCall{
		Service: svc, Method: method, Headers: headers,
		Match: m, Limits: x.snap.limits, Drain: x.s.drain,
		In: c.in, Out: &x.w,
	})
	if rh.GetEndOfStream() {
		if f := c.endRequest(); f != nil {
			return c.end(f)
		}
	}
	return c.serve(headers)
}

// start runs the handler apart from the exchange, which goes on feeding it
// the request's messages.
func (c *call) start(hctx context.Context, gc *handler.GRPCCall) {
	x := c.x
	x.s.live.Add(1)
	go func() {
		defer x.s.live.Done()
		defer close(c.hdone)
		c.result = x.handleGRPC(hctx, gc)
		c.timedOut = errors.Is(hctx.Err(), context.DeadlineExceeded) && x.ctx.Err() == nil
	}()
}

// serve feeds the request's messages to the handler until it returns, the
// client goes away, or the request fails.
func (c *call) serve(headers route.Headers) error {
	x := c.x
	for {
		select {
		case <-c.hdone:
			st := c.result
			if c.timedOut && st.Code != codes.OK {
				st = handler.Status{Code: codes.DeadlineExceeded, Message: fmt.Sprintf("the call's grpc-timeout (%v) elapsed", c.timeout)}
			}
			x.logSendErr(x.w.finishGRPC(st))
			x.linger()
			return nil
		case <-x.ctx.Done():
			return c.abandon()
		case msg, ok := <-x.inOrNil():
			if !ok {
				x.recvEnded(x.rd.err)
				switch {
				case x.clientGone():
					return c.abandon()
				case c.open:
					// Half-closed mid-request: the request can never complete.
					return c.end(&failure{grpc: codes.Canceled, detail: "the request stream ended before end_of_stream"})
				}
				continue
			}
			if f := c.receive(msg, headers); f != nil {
				if f == errAbandon {
					return c.abandon()
				}
				return c.end(f)
			}
		}
	}
}

// receive takes one ext_proc message of the request: a body chunk, or the
// trailers that end it.
func (c *call) receive(msg *extprocv3.ProcessingRequest, headers route.Headers) *failure {
	if !c.open {
		return nil // after end_of_stream (which Envoy may repeat, envoyproxy/envoy#46237) or trailers: ignored
	}
	var chunk []byte
	eos := false
	switch r := msg.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestBody:
		chunk, eos = r.RequestBody.GetBody(), r.RequestBody.GetEndOfStream()
	case *extprocv3.ProcessingRequest_RequestTrailers:
		eos = true
	default:
		c.x.logger().Warn("unexpected ext_proc message during a gRPC call; ignored", "got", messageKind(msg))
		return nil
	}
	if f := c.feed(chunk, headers); f != nil {
		return f
	}
	if eos {
		return c.endRequest()
	}
	return nil
}

// call is the exchange's side of one gRPC call: the decoder, the handler's
// inbox and the handler's lifetime.
type call struct {
	x      *exchange
	dec    *grpcwire.Decoder
	in     *inbox
	open   bool // the inbox is open: the request stream has not ended
	cancel context.CancelFunc
	hdone  chan struct{} // closed when the handler returned

	timeout  time.Duration  // grpc-timeout; 0: none
	result   handler.Status // the handler's; read once hdone is closed
	timedOut bool           // grpc-timeout elapsed before the handler returned

	pending []grpcwire.Message
}

// errAbandon is feed's signal that the client went away.
var errAbandon = &failure{}

// feed decodes one chunk and hands the messages it completes to the handler,
// waiting for the handler to take each one: a handler that does not read
// holds the exchange (and Envoy, through flow control) until it returns.
func (c *call) feed(chunk []byte, headers route.Headers) *failure {
	c.pending = c.pending[:0]
	err := c.dec.Feed(chunk, func(m grpcwire.Message) error { c.pending = append(c.pending, m); return nil })
	for _, m := range c.pending {
		if m.Compressed {
			return &failure{grpc: codes.Unimplemented,
				detail: fmt.Sprintf("compressed request messages (grpc-encoding %q) are not supported; send them uncompressed", headers.Get("grpc-encoding"))}
		}
		select {
		case c.in.ch <- m.Data:
		case <-c.hdone:
			return nil // the handler is finished: nobody reads the rest
		case <-c.x.ctx.Done():
			return errAbandon
		}
	}
	if err != nil {
		var se *grpcwire.SizeError
		if errors.As(err, &se) {
			return &failure{grpc: codes.ResourceExhausted,
				detail: fmt.Sprintf("a request message of %d bytes is larger than limits.max-body (%d bytes)", se.Size, se.Limit)}
		}
		return &failure{grpc: codes.InvalidArgument, detail: "malformed request message: " + err.Error()}
	}
	return nil
}

// endRequest marks the end of the request stream: the handler's Recv then
// returns io.EOF, unless the stream ended inside a message.
func (c *call) endRequest() *failure {
	c.x.reqEnded = true
	if err := c.dec.End(); err != nil {
		return &failure{grpc: codes.InvalidArgument, detail: "the request stream ended inside a message: " + err.Error()}
	}
	c.in.err = io.EOF
	close(c.in.ch)
	c.open = false
	return nil
}

// end ends the call on the exchange's initiative: the answer goes out at once,
// the handler is told through its context and Recv, and the exchange waits
// for it so that it never outlives the exchange.
func (c *call) end(f *failure) error {
	c.x.fail(f)
	if c.open {
		c.in.err = status.Error(f.grpc, f.detail)
		close(c.in.ch)
		c.open = false
	}
	c.cancel()
	<-c.hdone
	c.x.linger()
	return nil
}

// abandon ends the call because the client went away: nothing can be sent.
func (c *call) abandon() error {
	c.cancel()
	<-c.hdone
	return nil
}

func (x *exchange) handleGRPC(ctx context.Context, call *handler.GRPCCall) (st handler.Status) {
	defer func() {
		if p := recover(); p != nil {
			x.failedBecause(fmt.Sprintf("the grpc-kafka handler panicked: %v", p), "stack", string(debug.Stack()))
			st = handler.Status{Code: codes.Internal, Message: "the processor failed to answer; see its log"}
		}
	}()
	return x.s.grpc.HandleGRPC(ctx, call)
}
