package processor

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"go.opentelemetry.io/otel/trace"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// inboundQueue is how many ext_proc messages the reader may hold ahead of the
// exchange; beyond it the reader stops calling Recv and gRPC flow control
// pushes back on Envoy.
const inboundQueue = 16

// exchange is one Process stream: one request, one answer.
//
// A long poll holds its exchange for the whole wait, so the fields are laid
// out for size: what only some exchanges need (the reader, a failure's
// cause) is out of line, and the metric labels are small codes and pointers
// into the route snapshot the exchange holds anyway.
type exchange struct {
	s     *Server
	ctx   context.Context // the stream's: done when Envoy cancels (client gone, or answer complete)
	snap  *snapshot
	w     writer // in the exchange's own allocation; its stream is the exchange's
	span  trace.Span
	start time.Time
	// The HTTP request handed to a handler is not kept here: a long poll
	// holds its exchange for the whole wait, and the request would keep its
	// header list and path parameters alive with it (≈ 600 B per waiter).

	log exchangeLog // the request's attributes in log lines, and a failure's cause

	kind        uint8 // kindHTTP or kindGRPC; 0 before the request headers
	mode        uint8 // metrics: modeCodeLongPoll or modeCodeStream; 0 for a request
	inClosed    bool  // Recv failed: the request stream ended
	halfClosed  bool  // ... by Envoy's half-close (io.EOF), not a cancel
	protocolErr bool  // the stream failed without an answer: Envoy broke the protocol
	// reqEnded: Envoy has sent the whole request (end_of_stream on headers
	// or a body chunk, or trailers), so it sends nothing more on the stream
	// and the exchange ends with its answer (see linger).
	reqEnded bool

	// The request's messages are read by the exchange's goroutine itself
	// until it must wait for them and for something else at once (a gRPC
	// call's handler, a linger after the answer that Envoy's cancel did not
	// end within lingerQuiet); only then does a reader goroutine start. A
	// long poll is thus one goroutine, not two, and a fetch answered from a
	// view usually never starts one.
	rd *reader // nil until the reader goroutine runs: messages come through rd.in

	binding *config.Binding // metrics: the binding chosen
	// series is the matched route (series.cfg) with its metric series, in
	// snap; nil until a route matched.
	series *routeSeries
}

// The request's kinds (exchange.kind).
const (
	kindHTTP uint8 = 1 + iota
	kindGRPC
)

// The exchange's duration modes (exchange.mode); 0 is modeRequest.
const (
	modeCodeLongPoll uint8 = 1 + iota
	modeCodeStream
)

func newExchange(s *Server, stream extprocv3.ExternalProcessor_ProcessServer) *exchange {
	return &exchange{
		s:    s,
		ctx:  stream.Context(),
		snap: s.snap.Load(),
		w:    writer{stream: stream},
	}
}

// close ends the exchange: the reader stops, and the outcome is counted.
func (x *exchange) close() {
	if x.rd != nil {
		close(x.rd.stop)
		if x.inClosed || x.ctx.Err() != nil {
			// Recv has returned or returns at once on the cancelled stream.
			<-x.rd.done
		}
		// Otherwise Recv is still blocked (Envoy neither cancelled nor
		// half-closed within closeWait); it returns when gRPC cancels the
		// stream as Process returns, and the reader ends then.
	}
	st, cause, at, ok := x.w.answered()
	switch {
	case ok:
	case x.protocolErr:
		st = outcomeProtocol
	default:
		st = outcomeCancelled
	}
	binding, rt := x.bindingLabel(), x.routeLabel()
	if r := x.series; r != nil {
		if ok {
			r.duration(x.mode).Observe(at.Sub(x.start).Seconds())
		}
		r.exchange(st).Inc()
	} else {
		capab, kind := x.capabilityLabel(), kindLabel(x.kind)
		if ok {
			x.s.metrics.durationOf(durationLabels{binding, rt, capab, kind, modeLabel(x.mode)}).Observe(at.Sub(x.start).Seconds())
		}
		outcome, code, grpcCode := outcomeLabels(kind, st)
		x.s.metrics.exchange(exchangeLabels{binding, rt, capab, kind, outcome, code, grpcCode}).Inc()
	}
	endSpan(x.span, binding, rt, st, !ok || failedStatus(st))
	x.logEnd(st, cause, ok)
}

func (x *exchange) run() error {
	first, ok := x.next()
	// Durations count from the request's first message (Envoy opens the
	// stream to send it).
	x.start = time.Now()
	if !ok {
		if x.debugging() {
			x.logger().Debug("ext_proc stream ended before any message", "cancelled", x.ctx.Err() != nil)
		}
		return nil
	}
	rh := first.GetRequestHeaders()
	if rh == nil {
		// Nothing can be answered: every answer is a reply to request_headers.
		x.protocolErr = true
		x.failedBecause("the first ext_proc message is " + messageKind(first) + ", not request_headers; is request_header_mode SEND?")
		return status.Error(codes.FailedPrecondition, "kafka-ext-proc: the first message of a stream must be request_headers (request_header_mode: SEND)")
	}
	x.reqEnded = rh.GetEndOfStream()
	headers := headerList(rh.GetHeaders())
	ctype := headers.Get("content-type")
	isGRPC := grpcwire.IsGRPCContentType(ctype)
	x.w.grpc = isGRPC
	x.kind = kindHTTP
	if isGRPC {
		x.kind = kindGRPC
		x.w.ctype = "application/grpc"
		if strings.HasPrefix(ctype, "application/grpc+") {
			x.w.ctype = ctype
		}
	} else {
		x.w.head = headers.Get(":method") == http.MethodHead
	}
	logPath, _ := route.SplitPath(headers.Get(":path")) // a query may carry credentials
	x.ctx, x.span = x.s.tracing.start(x.ctx, kindLabel(x.kind), logPath, headers)
	x.log.requestKnown(logPath, headers.Get("x-request-id"))

	if pc := first.GetProtocolConfig(); pc != nil && pc.GetRequestBodyMode() != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return x.failAndLinger(&failure{http: http.StatusInternalServerError, grpc: codes.Internal,
			detail: fmt.Sprintf("Envoy's ext_proc filter uses request_body_mode %s; kafka-ext-proc needs FULL_DUPLEX_STREAMED (with request_trailer_mode SEND)", pc.GetRequestBodyMode())})
	}

	typ := config.HTTPKafka
	if isGRPC {
		typ = config.GRPCKafka
	}
	b, f := x.chooseBinding(typ, logPath)
	if f != nil {
		return x.failAndLinger(f)
	}
	x.binding = b.Config
	x.log.known(logKnownBinding)
	md := first.GetMetadataContext().GetFilterMetadata()
	if isGRPC {
		return x.runGRPC(rh, headers, md, b)
	}
	return x.runHTTP(rh, headers, md, b)
}

// chooseBinding picks the binding of the request's type: the one the stream's
// x-kafka-ext-proc-binding metadata names, or the only one.
func (x *exchange) chooseBinding(typ config.BindingType, path string) (*route.Binding, *failure) {
	if names := metadata.ValueFromIncomingContext(x.ctx, BindingMetadata); len(names) > 0 {
		b := x.snap.table.Binding(names[0])
		switch {
		case b == nil:
			return nil, &failure{http: http.StatusInternalServerError, grpc: codes.Internal,
				detail: fmt.Sprintf("binding %q named by Envoy's %s metadata is not in the processor's configuration", names[0], BindingMetadata)}
		case b.Config.Type == config.GRPCKafka && typ == config.HTTPKafka:
			// A route of a gRPC binding also takes what is not gRPC when it
			// has CORS (a preflight must match a route with a route action):
			// such a request is the client's mistake, not a broken setup.
			return nil, &failure{http: http.StatusUnsupportedMediaType, grpc: codes.Internal,
				detail: fmt.Sprintf("this path belongs to gRPC binding %q: send content-type application/grpc (gRPC-Web needs Envoy's grpc_web filter before ext_proc)", names[0])}
		case b.Config.Type == config.SSEKafka && typ == config.HTTPKafka:
			return b, nil
		case b.Config.Type != typ:
			return nil, &failure{http: http.StatusInternalServerError, grpc: codes.Internal,
				detail: fmt.Sprintf("binding %q named by Envoy's %s metadata is %s, but the request is %s", names[0], BindingMetadata, b.Config.Type, kindOf(typ))}
		}
		return b, nil
	}
	bs := x.snap.table.OfType(typ)
	if typ == config.HTTPKafka {
		if b := x.sseBinding(path, len(bs)); b != nil {
			return b, nil
		}
	}
	switch len(bs) {
	case 0:
		return nil, &failure{http: http.StatusNotFound, grpc: codes.Unimplemented,
			detail: fmt.Sprintf("no %s binding is configured for %s requests", typ, kindOf(typ))}
	case 1:
		return bs[0], nil
	default:
		return nil, &failure{http: http.StatusInternalServerError, grpc: codes.Internal,
			detail: fmt.Sprintf("%d %s bindings are configured; set %s in the Envoy route's ext_proc grpc_initial_metadata to choose one", len(bs), typ, BindingMetadata)}
	}
}

func kindOf(typ config.BindingType) string {
	if typ == config.GRPCKafka {
		return "gRPC"
	}
	return "HTTP"
}

// lingerQuiet is how long the linger waits for Envoy's cancel alone before
// it starts reading the stream. Envoy resets the stream as soon as it has the
// answer, and half-closes it only with its ext_proc_graceful_grpc_close
// runtime flag (off by default), so nearly every exchange ends within this
// without a reader: no goroutine, channels or Recv after the answer. A
// half-close is noticed at most this much later than with a reader from the
// start.
const lingerQuiet = 5 * time.Millisecond

// linger follows the terminal answer.
//
// When Envoy has sent the whole request, the exchange ends at once: Process
// returns and gRPC closes the stream with OK right behind the answer. Envoy
// has nothing more to send, and the frames of one HTTP/2 stream arrive in
// order, so it handles the answer first: an ImmediateResponse, or the last
// chunk of a streamed one, completes processing and closes its side (a reset,
// or a half-close with ext_proc_graceful_grpc_close), and the OK close that
// follows finds processing complete and is ignored. Waiting for Envoy's
// cancel instead held a timer and, past lingerQuiet, a reader goroutine per
// answered stream for nothing.
//
//	source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onReceiveMessage
//	  (kImmediateResponse: processing_complete_ = true; closeStreamMaybeGraceful),
//	  Filter::closeStreamMaybeGraceful (closeStream, or halfCloseAndWaitForRemoteClose),
//	  Filter::onGrpcCloseWithStatus (returns if processing_complete_)
//	emulator: Exchange.onStreamEnd ignores an end after a terminal answer
//	ours: TestAnswerEndsCompleteRequest
//
// When the request is still incomplete (an early 413, a route failure with a
// body pending, a gRPC answer before the client's half-close), Envoy may
// still be sending it, so the exchange does not end a stream Envoy has not
// finished with: it waits for Envoy to cancel or close it, ignoring (never
// answering) request chunks still arriving, bounded by closeWait and the
// drain.
func (x *exchange) linger() {
	if x.reqEnded || x.inClosed || x.ctx.Err() != nil {
		return
	}
	wait := x.s.closeWait
	first := wait
	if x.rd == nil {
		// Only reading notices a half-close (io.EOF); it starts once the
		// quiet time passed without a cancel.
		first = min(lingerQuiet, wait)
	}
	t := x.s.timers.Get(first)
	defer x.s.timers.Put(t)
	for {
		select {
		case _, ok := <-x.inOrNil(): // nil, never ready, until the reader runs
			if !ok {
				x.recvEnded(x.rd.err)
				return
			}
		case <-x.ctx.Done():
			return
		case <-x.s.drain.Done():
			return
		case <-t.C:
			if x.rd == nil {
				x.startReader()
				t.Reset(wait - first)
				continue
			}
			if x.debugging() {
				x.logger().Debug("Envoy did not close the ext_proc stream after the answer", "waited", x.s.closeWait)
			}
			return
		}
	}
}
