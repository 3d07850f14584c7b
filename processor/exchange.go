package processor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"go.opentelemetry.io/otel/trace"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// inboundQueue is how many ext_proc messages the reader may hold ahead of the
// exchange; beyond it the reader stops calling Recv and gRPC flow control
// pushes back on Envoy.
const inboundQueue = 16

// exchange is one Process stream: one request, one answer.
type exchange struct {
	s      *Server
	stream extprocv3.ExternalProcessor_ProcessServer
	ctx    context.Context // the stream's: done when Envoy cancels (client gone, or answer complete)
	snap   *snapshot
	log    *slog.Logger // the server's; see logger
	w      *writer

	// logAttrs describe the request in log lines. The logger carrying them
	// is built on first use: most exchanges log nothing, and slog's With
	// formats its attributes eagerly.
	logMu    sync.Mutex   // the handler goroutine of a gRPC call logs too
	logAttrs []slog.Attr  // not yet in logged
	attrBuf  [4]slog.Attr // logAttrs' first storage: no allocation per exchange
	logged   *slog.Logger
	// cause, when set, is why the exchange failed in the processor's own
	// terms (a panic, a protocol error), logged in place of what the answer
	// says; causeAttrs go with it. Guarded by logMu.
	cause      string
	causeAttrs []any

	// The request's messages are read by the exchange's goroutine itself
	// until it must wait for them and for something else at once (a gRPC
	// call's handler, the linger after the answer); only then does a reader
	// goroutine start. A long poll is thus one goroutine, not two.
	reading     bool                              // the reader goroutine runs: messages come through in
	in          chan *extprocv3.ProcessingRequest // from the reader; closed when Recv fails
	recvErr     error                             // why Recv failed; written before in is closed, read only after
	inClosed    bool                              // Recv failed: the request stream ended
	stop        chan struct{}                     // closed when the exchange ends (with a reader)
	readerDone  chan struct{}
	start       time.Time
	kind        string // metrics: http or grpc
	span        trace.Span
	binding     string // metrics: the binding chosen
	route       string // metrics: the matched route's index in its binding
	capability  string // metrics: the matched route's capability
	protocolErr bool   // the stream failed without an answer: Envoy broke the protocol
}

// failure is an answer the exchange makes itself (DESIGN §6.6), rendered as
// problem+json for HTTP and as a status for gRPC.
type failure struct {
	http    int
	grpc    codes.Code
	detail  string
	headers []route.Header
}

// debugging reports whether debug lines are logged. Callers check it first:
// the exchange's logger formats the request's attributes on first use, and
// the arguments of a line are allocated even if it is not written.
func (x *exchange) debugging() bool { return x.log.Enabled(x.ctx, slog.LevelDebug) }

// logger is the exchange's logger, with the request's attributes.
func (x *exchange) logger() *slog.Logger {
	x.logMu.Lock()
	defer x.logMu.Unlock()
	if x.logged == nil || len(x.logAttrs) > 0 {
		base := x.logged
		if base == nil {
			base = x.log
		}
		if len(x.logAttrs) > 0 {
			// A handler may keep the slice it is given; attrBuf is reused.
			base = slog.New(base.Handler().WithAttrs(slices.Clone(x.logAttrs)))
			x.logAttrs = x.attrBuf[:0]
		}
		x.logged = base
	}
	return x.logged
}

func newExchange(s *Server, stream extprocv3.ExternalProcessor_ProcessServer) *exchange {
	return &exchange{
		s:      s,
		stream: stream,
		ctx:    stream.Context(),
		snap:   s.snap.Load(),
		log:    s.log,
		w:      newWriter(stream),
		start:  time.Now(),
	}
}

// startReader hands Recv to a reader goroutine from now on. Only the
// exchange's goroutine calls it.
func (x *exchange) startReader() {
	if x.reading || x.inClosed {
		return
	}
	x.reading = true
	x.in = make(chan *extprocv3.ProcessingRequest, inboundQueue)
	x.stop = make(chan struct{})
	x.readerDone = make(chan struct{})
	x.s.live.Add(1)
	go x.read()
}

// read is the reader goroutine: once started, the only caller of Recv.
func (x *exchange) read() {
	defer x.s.live.Done()
	defer close(x.readerDone)
	defer close(x.in)
	for {
		req, err := x.stream.Recv()
		if err != nil {
			x.recvErr = err
			return
		}
		select {
		case x.in <- req:
		case <-x.stop:
			return
		}
	}
}

// next waits for the next ext_proc message; false once the stream ended.
func (x *exchange) next() (*extprocv3.ProcessingRequest, bool) {
	if x.inClosed {
		return nil, false
	}
	if !x.reading {
		// Recv returns when the stream is cancelled, so this waits no longer
		// than the select below would.
		req, err := x.stream.Recv()
		if err != nil {
			x.recvErr = err
			x.inClosed = true
			return nil, false
		}
		return req, true
	}
	select {
	case m, ok := <-x.in:
		if !ok {
			x.inClosed = true
		}
		return m, ok
	case <-x.ctx.Done():
		return nil, false
	}
}

// clientGone reports whether the stream ended because Envoy cancelled it (the
// client went away) rather than by a half-close.
func (x *exchange) clientGone() bool {
	return x.ctx.Err() != nil || (x.inClosed && !errors.Is(x.recvErr, io.EOF))
}

// close ends the exchange: the reader stops, and the outcome is counted.
func (x *exchange) close() {
	if x.reading {
		close(x.stop)
		if x.inClosed || x.ctx.Err() != nil {
			// Recv has returned or returns at once on the cancelled stream.
			<-x.readerDone
		}
		// Otherwise Recv is still blocked (Envoy neither cancelled nor
		// half-closed within closeWait); it returns when gRPC cancels the
		// stream as Process returns, and the reader ends then.
	}
	st, cause, at, ok := x.w.answered()
	binding, rt, capab := orNone(x.binding), orNone(x.route), orNone(x.capability)
	switch {
	case ok:
		x.s.metrics.duration.WithLabelValues(binding, rt, capab, kindLabel(x.kind)).Observe(at.Sub(x.start).Seconds())
	case x.protocolErr:
		st = statusProtocol
	default:
		st = statusCancelled
	}
	x.s.metrics.exchanges.WithLabelValues(binding, rt, capab, kindLabel(x.kind), st).Inc()
	endSpan(x.span, binding, st, !ok || failedStatus(st))
	x.logEnd(st, cause, ok)
}

// logEnd writes the exchange's one line when it failed (an error answer or
// a protocol error), with its cause: warn for the processor's or Kafka's
// failures, info for the client's mistakes, error for a panic. Nothing of
// the request's body or credentials is in it.
func (x *exchange) logEnd(st, answerCause string, answered bool) {
	x.logMu.Lock()
	cause, attrs := x.cause, x.causeAttrs
	x.logMu.Unlock()
	failed := (answered && answerCause != "") || x.protocolErr
	if !failed {
		if x.debugging() {
			x.logger().Debug("exchange ended", "status", st, "duration", time.Since(x.start))
		}
		return
	}
	level := slog.LevelInfo
	switch {
	case len(attrs) > 0:
		level = slog.LevelError
	case x.protocolErr || failedStatus(st):
		level = slog.LevelWarn
	}
	if cause == "" {
		cause = answerCause
	}
	x.logger().Log(context.Background(), level, "exchange failed",
		append([]any{"status", st, "cause", cause, "duration", time.Since(x.start)}, attrs...)...)
}

// failedBecause records the cause logged when the exchange ends.
func (x *exchange) failedBecause(cause string, attrs ...any) {
	x.logMu.Lock()
	defer x.logMu.Unlock()
	x.cause, x.causeAttrs = cause, attrs
}

// failedStatus tells server errors (5xx, and gRPC codes other than OK and
// the client's own mistakes) from answers that went as planned.
func failedStatus(st string) bool {
	if len(st) == 3 && st[0] == '5' {
		return true
	}
	switch st {
	case "UNKNOWN", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS":
		return true
	}
	return false
}

func orNone(label string) string {
	if label == "" {
		return labelNone
	}
	return label
}

// matched records the route an exchange matched, for its metrics.
func (x *exchange) matched(m *route.Match) {
	x.route = strconv.Itoa(m.Route.Index)
	if m.Route.With != nil {
		x.capability = string(m.Route.With.Capability)
	}
	if x.debugging() {
		x.logger().Debug("route matched", "route", m.Route.Index)
	}
}

func kindLabel(kind string) string {
	if kind == "" {
		return "unknown" // the stream ended before its request headers
	}
	return kind
}

func (x *exchange) run() error {
	first, ok := x.next()
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
	x.start = time.Now()
	headers := headerList(rh.GetHeaders())
	ctype := headers.Get("content-type")
	isGRPC := grpcwire.IsGRPCContentType(ctype)
	x.w.grpc = isGRPC
	x.kind = "http"
	if isGRPC {
		x.kind = "grpc"
		x.w.ctype = "application/grpc"
		if strings.HasPrefix(ctype, "application/grpc+") {
			x.w.ctype = ctype
		}
	} else {
		x.w.head = headers.Get(":method") == http.MethodHead
	}
	logPath, _ := route.SplitPath(headers.Get(":path")) // a query may carry credentials
	x.logMu.Lock()
	x.logAttrs = append(x.attrBuf[:0], slog.String("kind", x.kind), slog.String("path", logPath), slog.String("request_id", headers.Get("x-request-id")))
	x.logMu.Unlock()
	x.ctx, x.span = x.s.tracing.start(x.ctx, x.kind, headers)

	if pc := first.GetProtocolConfig(); pc != nil && pc.GetRequestBodyMode() != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return x.failAndLinger(&failure{http: http.StatusInternalServerError, grpc: codes.Internal,
			detail: fmt.Sprintf("Envoy's ext_proc filter uses request_body_mode %s; kafka-ext-proc needs FULL_DUPLEX_STREAMED (with request_trailer_mode SEND)", pc.GetRequestBodyMode())})
	}

	typ := config.HTTPKafka
	if isGRPC {
		typ = config.GRPCKafka
	}
	b, f := x.chooseBinding(typ)
	if f != nil {
		return x.failAndLinger(f)
	}
	x.binding = b.Config.Name
	x.logMu.Lock()
	x.logAttrs = append(x.logAttrs, slog.String("binding", x.binding))
	x.logMu.Unlock()
	md := first.GetMetadataContext().GetFilterMetadata()
	if isGRPC {
		return x.runGRPC(rh, headers, md, b)
	}
	return x.runHTTP(rh, headers, md, b)
}

// chooseBinding picks the binding of the request's type: the one the stream's
// x-kafka-ext-proc-binding metadata names, or the only one.
func (x *exchange) chooseBinding(typ config.BindingType) (*route.Binding, *failure) {
	if names := metadata.ValueFromIncomingContext(x.ctx, BindingMetadata); len(names) > 0 {
		b := x.snap.table.Binding(names[0])
		switch {
		case b == nil:
			return nil, &failure{http: http.StatusInternalServerError, grpc: codes.Internal,
				detail: fmt.Sprintf("binding %q named by Envoy's %s metadata is not in the processor's configuration", names[0], BindingMetadata)}
		case b.Config.Type != typ:
			return nil, &failure{http: http.StatusInternalServerError, grpc: codes.Internal,
				detail: fmt.Sprintf("binding %q named by Envoy's %s metadata is %s, but the request is %s", names[0], BindingMetadata, b.Config.Type, kindOf(typ))}
		}
		return b, nil
	}
	bs := x.snap.table.OfType(typ)
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

// routeFailure turns a matching error into the answer of DESIGN §6.1.
func routeFailure(err error, what string) *failure {
	var ge *route.GuardError
	switch {
	case errors.As(err, &ge) && ge.Forbidden:
		return &failure{http: http.StatusForbidden, grpc: codes.PermissionDenied,
			detail: fmt.Sprintf("the credentials lack role(s) %s required by guard %q", strings.Join(ge.Missing, ", "), ge.Guard)}
	case errors.As(err, &ge):
		return &failure{http: http.StatusUnauthorized, grpc: codes.Unauthenticated,
			detail:  fmt.Sprintf("send valid credentials (authorization: Bearer <token>) for guard %q: %v", ge.Guard, ge.Err),
			headers: []route.Header{{Name: "www-authenticate", Value: "Bearer"}}}
	default:
		return &failure{http: http.StatusNotFound, grpc: codes.Unimplemented, detail: "no route matches " + what}
	}
}

// fail sends the exchange's own terminal answer.
func (x *exchange) fail(f *failure) {
	var err error
	if x.w.grpc {
		code := f.grpc
		if code == codes.OK { // a failure written for HTTP only: never answer it as a success
			code = codes.Internal
			if f.http == http.StatusBadRequest {
				code = codes.InvalidArgument
			}
		}
		err = x.w.finishGRPC(capability.Status{Code: code, Message: f.detail, Trailers: f.headers})
	} else {
		st := f.http
		if st == 0 {
			st = grpcwire.HTTPStatus(f.grpc)
		}
		err = x.w.answerHTTP(capability.ProblemResponse(st, f.detail, f.headers...))
	}
	x.logSendErr(err)
}

func (x *exchange) failAndLinger(f *failure) error {
	x.fail(f)
	x.linger()
	return nil
}

func (x *exchange) logSendErr(err error) {
	if err == nil || errors.Is(err, errAnswered) {
		return
	}
	if x.ctx.Err() != nil || status.Code(err) == codes.Canceled {
		if x.debugging() {
			x.logger().Debug("answer not sent: the stream was cancelled", "err", err)
		}
		return
	}
	x.logger().Warn("sending the answer failed", "err", err)
}

// linger waits, after the terminal answer, for Envoy to cancel or close the
// stream, ignoring request chunks still arriving (a reply would reset the
// client's stream). The wait is bounded by closeWait and the drain.
func (x *exchange) linger() {
	if x.inClosed || x.ctx.Err() != nil {
		return
	}
	// Reading here is what notices a half-close (io.EOF) as well as a reset.
	x.startReader()
	t := time.NewTimer(x.s.closeWait)
	defer t.Stop()
	for {
		select {
		case _, ok := <-x.in:
			if !ok {
				x.inClosed = true
				return
			}
		case <-x.ctx.Done():
			return
		case <-x.s.drain.Done():
			return
		case <-t.C:
			if x.debugging() {
				x.logger().Debug("Envoy did not close the ext_proc stream after the answer", "waited", x.s.closeWait)
			}
			return
		}
	}
}

// --- HTTP ---

func (x *exchange) runHTTP(rh *extprocv3.HttpHeaders, headers route.Headers, md metadataMap, b *route.Binding) error {
	method, rawPath := headers.Get(":method"), headers.Get(":path")
	if method == http.MethodConnect && rawPath == "" {
		return x.failAndLinger(connectFailure())
	}
	if method == "" || rawPath == "" {
		return x.failAndLinger(&failure{http: http.StatusBadRequest, detail: "the request has no :method or :path"})
	}
	p, query := route.SplitPath(rawPath)
	m, err := b.MatchHTTP(x.ctx, &route.HTTPRequest{Method: method, Path: p, Headers: headers, Metadata: md}, x.s.guards)
	if err != nil {
		if x.ctx.Err() != nil {
			return nil
		}
		return x.failAndLinger(routeFailure(err, method+" "+p))
	}
	x.matched(m)

	limit := x.snap.limits.MaxBody
	tooLarge := &failure{http: http.StatusRequestEntityTooLarge,
		detail: fmt.Sprintf("the request body is larger than limits.max-body (%d bytes); send a smaller body", limit)}
	var body []byte
	if v, ok := headers.Lookup("content-length"); ok {
		if cl, err := strconv.ParseInt(v, 10, 64); err == nil && cl > limit {
			return x.failAndLinger(tooLarge)
		} else if err == nil && cl > 0 {
			body = make([]byte, 0, cl)
		}
	}
	var trailers route.Headers
	// This wait is the client's upload, not a long wait of ours, so it does
	// not end on drain: a request that completes within the grace period is
	// answered; one that does not is cut when the gRPC server stops.
	ended := rh.GetEndOfStream()
	for !ended {
		msg, ok := x.next()
		if !ok {
			if x.clientGone() {
				return nil
			}
			return x.failAndLinger(&failure{http: http.StatusBadRequest, detail: "the request ended before its body was complete"})
		}
		switch r := msg.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestBody:
			if int64(len(body))+int64(len(r.RequestBody.GetBody())) > limit {
				return x.failAndLinger(tooLarge)
			}
			body = append(body, r.RequestBody.GetBody()...)
			ended = r.RequestBody.GetEndOfStream()
		case *extprocv3.ProcessingRequest_RequestTrailers:
			trailers = headerList(r.RequestTrailers.GetTrailers())
			ended = true
		default:
			x.logger().Warn("unexpected ext_proc message while reading the request body; ignored", "got", messageKind(msg))
		}
	}

	req := &capability.HTTPRequest{
		Method: method, Path: p, RawQuery: query, Authority: headers.Get(":authority"),
		Headers: headers, Trailers: trailers, Body: body,
		Match: m, Limits: x.snap.limits, Drain: x.s.drain,
	}
	resp := x.handleHTTP(req)
	if x.ctx.Err() != nil {
		return nil // the client went away while the handler worked
	}
	x.logSendErr(x.w.answerHTTP(resp))
	x.linger()
	return nil
}

func (x *exchange) handleHTTP(req *capability.HTTPRequest) (resp *capability.HTTPResponse) {
	defer func() {
		if p := recover(); p != nil {
			x.failedBecause(fmt.Sprintf("the http-kafka handler panicked: %v", p), "stack", string(debug.Stack()))
			resp = nil
		}
		if resp == nil {
			resp = capability.ProblemResponse(http.StatusInternalServerError, "the processor failed to answer; see its log")
		} else if resp.Status < 200 || resp.Status > 599 {
			x.failedBecause(fmt.Sprintf("the http-kafka handler answered an invalid status %d", resp.Status))
			resp = capability.ProblemResponse(http.StatusInternalServerError, "the processor failed to answer; see its log")
		}
	}()
	return x.s.http.HandleHTTP(x.ctx, req)
}

// --- gRPC ---

// inbox hands completed request messages to a gRPC handler.
type inbox struct {
	ch  chan []byte
	err error // why the request stream ended; written before ch is closed
}

// Recv implements capability.MessageReader.
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
	x.matched(m)

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
	c := &call{x: x, in: &inbox{ch: make(chan []byte, 1)}, cancel: cancel, hdone: make(chan struct{}), open: true}
	c.dec = grpcwire.NewDecoder(x.snap.limits.MaxBody)
	gc := &capability.GRPCCall{
		Service: svc, Method: method, Headers: headers,
		Match: m, Limits: x.snap.limits, Drain: x.s.drain,
		In: c.in, Out: x.w,
	}
	var result capability.Status
	var timedOut bool
	x.s.live.Add(1)
	go func() {
		defer x.s.live.Done()
		defer close(c.hdone)
		result = x.handleGRPC(hctx, gc)
		timedOut = errors.Is(hctx.Err(), context.DeadlineExceeded) && x.ctx.Err() == nil
	}()

	if rh.GetEndOfStream() {
		if f := c.endRequest(); f != nil {
			return c.end(f)
		}
	}
	for {
		select {
		case <-c.hdone:
			st := result
			if timedOut && st.Code != codes.OK {
				st = capability.Status{Code: codes.DeadlineExceeded, Message: fmt.Sprintf("the call's grpc-timeout (%v) elapsed", timeout)}
			}
			x.logSendErr(x.w.finishGRPC(st))
			x.linger()
			return nil
		case <-x.ctx.Done():
			return c.abandon()
		case msg, ok := <-x.inOrNil():
			if !ok {
				x.inClosed = true
				switch {
				case x.clientGone():
					return c.abandon()
				case c.open:
					// Half-closed mid-request: the request can never complete.
					return c.end(&failure{grpc: codes.Canceled, detail: "the request stream ended before end_of_stream"})
				}
				continue
			}
			if !c.open {
				continue // after end_of_stream (Envoy issue #46237) or trailers: ignored
			}
			var chunk []byte
			eos := false
			switch r := msg.GetRequest().(type) {
			case *extprocv3.ProcessingRequest_RequestBody:
				chunk, eos = r.RequestBody.GetBody(), r.RequestBody.GetEndOfStream()
			case *extprocv3.ProcessingRequest_RequestTrailers:
				eos = true
			default:
				x.logger().Warn("unexpected ext_proc message during a gRPC call; ignored", "got", messageKind(msg))
				continue
			}
			if f := c.feed(chunk, headers); f != nil {
				if f == errAbandon {
					return c.abandon()
				}
				return c.end(f)
			}
			if eos {
				if f := c.endRequest(); f != nil {
					return c.end(f)
				}
			}
		}
	}
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

// inOrNil is the reader's channel until it is closed, then nil (never ready).
func (x *exchange) inOrNil() <-chan *extprocv3.ProcessingRequest {
	if x.inClosed {
		return nil
	}
	return x.in
}

func (x *exchange) handleGRPC(ctx context.Context, call *capability.GRPCCall) (st capability.Status) {
	defer func() {
		if p := recover(); p != nil {
			x.failedBecause(fmt.Sprintf("the grpc-kafka handler panicked: %v", p), "stack", string(debug.Stack()))
			st = capability.Status{Code: codes.Internal, Message: "the processor failed to answer; see its log"}
		}
	}()
	return x.s.grpc.HandleGRPC(ctx, call)
}

// --- ext_proc message helpers ---

type metadataMap = map[string]*structpb.Struct

// headerList converts ext_proc headers (values in raw_value; value is read
// only when raw_value is empty, for clients older than Envoy's).
func headerList(hm *corev3.HeaderMap) route.Headers {
	hs := hm.GetHeaders()
	out := make(route.Headers, 0, len(hs))
	for _, h := range hs {
		v := string(h.GetRawValue())
		if v == "" {
			v = h.GetValue()
		}
		out = append(out, route.Header{Name: lower(h.GetKey()), Value: v})
	}
	return out
}

// lower lower-cases a header name, allocating only if needed (Envoy already
// sends lower-case names).
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

func messageKind(m *extprocv3.ProcessingRequest) string {
	switch m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return "request_trailers"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body"
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return "response_trailers"
	default:
		return "empty"
	}
}
