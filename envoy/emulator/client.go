package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
)

// ErrFinished is returned by Exchange.Next after the terminal action.
var ErrFinished = errors.New("emulator: exchange finished")

// Client is the ext_proc client side of the emulator: it drives one
// Process stream per downstream request as Envoy's ext_proc filter does for
// the emulated settings (FULL_DUPLEX_STREAMED request body, response
// processing skipped, fail-closed). It knows nothing of HTTP serving, so a
// load generator can drive it directly.
type Client struct {
	settings      envoy.Settings
	endpoints     []extprocv3.ExternalProcessorClient
	rr            atomic.Uint64 // the round robin's next index
	authority     string
	statusOnError int
	log           *slog.Logger
}

// NewClient checks the settings (see Validate) and returns a client that
// opens Process streams on processor, Envoy's ext_proc cluster.
func NewClient(settings envoy.Settings, processor grpc.ClientConnInterface, logger *slog.Logger) (*Client, error) {
	return NewClusterClient(settings, []grpc.ClientConnInterface{processor}, logger)
}

// NewClusterClient is NewClient for an ext_proc cluster of several
// endpoints (processor replicas), which it picks in turn per Process
// stream.
func NewClusterClient(settings envoy.Settings, endpoints []grpc.ClientConnInterface, logger *slog.Logger) (*Client, error) {
	if err := Validate(settings); err != nil {
		return nil, err
	}
	if len(endpoints) == 0 || slices.Contains(endpoints, nil) {
		return nil, errors.New("emulator: no processor connection")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		settings:      settings,
		authority:     settings.ExtProc.ClusterName,
		statusOnError: settings.ExtProc.StatusOnError,
		log:           logger,
	}
	for _, e := range endpoints {
		c.endpoints = append(c.endpoints, extprocv3.NewExternalProcessorClient(e))
	}
	// [rule round-robin-endpoints] Each Process stream goes to the next
	// endpoint of the ext_proc cluster in turn (lb_policy ROUND_ROBIN, the
	// default, with equal weights), starting at a random one. The emulator
	// has no health checks or outlier detection: an endpoint that is down
	// keeps its turn, and its streams fail (status_on_error).
	// source: source/extensions/load_balancing_policies/round_robin/round_robin_lb.h RoundRobinLoadBalancer::unweightedHostPick, RoundRobinLoadBalancer::refreshHostSource
	// envoy-test: RoundRobinLoadBalancerTest.Normal (test/extensions/load_balancing_policies/round_robin/round_robin_lb_test.cc)
	// ours: TestRoundRobinEndpoints
	c.rr.Store(rand.Uint64())
	// :authority of the Process call is envoy_grpc.authority, else the
	// cluster name ([code]).
	// [rule process-stream-authority] One Process stream per request; its
	// :authority is envoy_grpc.authority, else the cluster name; the
	// route's grpc_initial_metadata is merged over the filter's.
	// source: source/common/grpc/async_client_impl.cc (the envoy_grpc authority); source/common/grpc/common.cc Common::prepareHeaders
	// envoy-test: none
	// ours: TestHeaderEncodingHTTP1, TestHeaderEncodingH2C
	if settings.ExtProc.Authority != "" {
		c.authority = settings.ExtProc.Authority
	}
	if c.statusOnError == 0 {
		c.statusOnError = 500 // Envoy's default status_on_error [code]
	}
	return c, nil
}

// Route returns the first route of the settings that matches the request
// headers, as the HCM selects it before the filter chain runs, or nil.
func (c *Client) Route(h Headers) *envoy.Route {
	path, ok := h.Get(":path")
	if !ok {
		return nil // a CONNECT: path matchers never match it
	}
	for i := range c.settings.Routes {
		r := &c.settings.Routes[i]
		if routeMatches(r, path, h) {
			return r
		}
	}
	return nil
}

// routeMatches applies a route's match: prefix on the whole :path, path
// exactly on :path without its query, and match.grpc on the content-type
// (Envoy route matching [api]; case-sensitive by default).
func routeMatches(r *envoy.Route, path string, h Headers) bool {
	switch {
	case r.Path != "":
		p := path
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		if p != r.Path {
			return false
		}
	case !strings.HasPrefix(path, r.Prefix):
		return false
	}
	if r.GRPC {
		ct, _ := h.Get("content-type")
		return isGRPCContentType(ct)
	}
	return true
}

// Request is a downstream request as the HCM presents it to the filter.
type Request struct {
	// Headers as DownstreamHeaders builds them.
	Headers Headers
	// EndOfStream: the request has neither body nor trailers.
	EndOfStream bool
	// Route is the selected route (Client.Route), nil when none matched.
	Route *envoy.Route
}

// ActionKind says what the filter asks of the downstream side.
type ActionKind int

const (
	// ActionLocalReply: send Reply as a complete response. Terminal.
	ActionLocalReply ActionKind = iota + 1
	// ActionContinue: the request continued to the route, which answers
	// with Reply (direct_response, "no healthy upstream" or 404). Terminal.
	ActionContinue
	// ActionHeaders: streamed local response headers (Status, Headers);
	// terminal when EndOfStream.
	ActionHeaders
	// ActionBody: streamed local response bytes, verbatim; terminal when
	// EndOfStream.
	ActionBody
	// ActionTrailers: streamed local response trailers (Headers). Terminal.
	ActionTrailers
	// ActionReset: reset the downstream stream. Terminal.
	ActionReset
)

func (k ActionKind) String() string {
	switch k {
	case ActionLocalReply:
		return "local_reply"
	case ActionContinue:
		return "continue"
	case ActionHeaders:
		return "headers"
	case ActionBody:
		return "body"
	case ActionTrailers:
		return "trailers"
	case ActionReset:
		return "reset"
	}
	return "action(" + strconv.Itoa(int(k)) + ")"
}

// Action is one instruction from the filter to the downstream side.
type Action struct {
	Kind        ActionKind
	Reply       LocalReply
	Status      int
	Headers     Headers
	Body        []byte
	EndOfStream bool
	// Details explains a reset or a continue (logs only).
	Details string
}

// Terminal reports whether the action ends the response.
func (a Action) Terminal() bool {
	switch a.Kind {
	case ActionHeaders, ActionBody:
		return a.EndOfStream
	}
	return true
}

// Exchange is one request's ext_proc filter state and Process stream.
// Body and Trailers must be called from one goroutine, in request order;
// Next from one goroutine; Close from any.
type Exchange struct {
	c          *Client
	req        Request
	grpc, head bool
	log        *slog.Logger
	ctx        context.Context
	cancel     context.CancelFunc
	stream     extprocv3.ExternalProcessor_ProcessClient
	recvDone   chan struct{}
	notify     chan struct{}

	mu sync.Mutex
	// complete is Envoy's processing_complete_: nothing more is sent to
	// or accepted from the processor.
	complete bool
	// localStarted: StreamedImmediateResponse headers went downstream.
	localStarted bool
	// hadTrailers: request_trailers were sent (Envoy's trailers_ is set).
	hadTrailers bool
	queue       []Action
	terminalOut bool
}

// Start opens the Process stream and sends request_headers. Failures to
// reach the processor surface as actions, as in Envoy (status_on_error).
//
// [rule request-headers-message] request_headers carries end_of_stream
// only when the request has neither body nor trailers; protocol_config is
// in the first message only; metadata_context is always set.
// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onHeaders, Filter::encodeProtocolConfig, Filter::addDynamicMetadata
// envoy-test: none
// ours: TestHeaderEncodingHTTP1, TestHeaderEncodingH2C
func (c *Client) Start(ctx context.Context, req Request) *Exchange {
	ctx, cancel := context.WithCancel(ctx)
	rid, _ := req.Headers.Get("x-request-id")
	x := &Exchange{
		c:        c,
		req:      req,
		grpc:     isGRPCRequest(req.Headers),
		log:      c.log.With("x_request_id", rid),
		ctx:      ctx,
		cancel:   cancel,
		recvDone: make(chan struct{}),
		notify:   make(chan struct{}, 1),
	}
	m, _ := req.Headers.Get(":method")
	x.head = m == "HEAD"

	if req.Route != nil && req.Route.ExtProcDisabled {
		// ExtProcPerRoute.disabled: the filter does nothing [code].
		close(x.recvDone)
		x.mu.Lock()
		x.complete = true
		x.emit(Action{Kind: ActionContinue, Reply: c.routeReply(req.Route, x.grpc, x.head), Details: "ext_proc disabled on route"})
		x.mu.Unlock()
		return x
	}

	md := c.initialMetadata(req.Route)
	if c.settings.Tracing {
		injectTraceContext(md, req.Headers)
	}
	ext := c.endpoints[c.rr.Add(1)%uint64(len(c.endpoints))]
	stream, err := ext.Process(metadata.NewOutgoingContext(x.ctx, md), grpc.CallAuthority(c.authority))
	if err != nil {
		close(x.recvDone)
		x.mu.Lock()
		x.onStreamEnd(fmt.Errorf("open Process stream: %w", err))
		x.mu.Unlock()
		return x
	}
	x.stream = stream
	first := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: req.Headers.proto(),
			// end_of_stream = no body and no trailers ([code]).
			EndOfStream: req.EndOfStream,
		}},
		// metadata_context is always set, possibly empty; the emulator has
		// no jwt_authn, so forwarding namespaces are always empty ([code]).
		MetadataContext: &corev3.Metadata{},
		// protocol_config only in the first message ([code]).
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_NONE,
		},
	}
	// A failed Send ends the stream; Recv reports the status.
	if err := stream.Send(first); err != nil {
		x.log.Debug("send request_headers", "err", err)
	}
	go x.recvLoop()
	return x
}

// initialMetadata is grpc_service.initial_metadata merged with the route's
// ExtProcPerRoute overrides.grpc_initial_metadata; the route's value wins
// for a key in both ([api]: the per-route field may "partially override
// inherited metadata").
func (c *Client) initialMetadata(route *envoy.Route) metadata.MD {
	md := metadata.MD{}
	for k, v := range c.settings.ExtProc.InitialMetadata {
		md.Set(k, v)
	}
	if route != nil {
		for k, v := range route.ExtProcInitialMetadata {
			md.Set(k, v)
		}
	}
	return md
}

// Body sends one request body chunk as it arrives: in FULL_DUPLEX_STREAMED
// every chunk goes out at once, before and during the answer, with no message
// timer, until processing is complete ([code][test]). eos marks the chunk that
// ended the request.
//
// [rule fds-chunks-at-once] In FULL_DUPLEX_STREAMED every request body
// chunk goes to the processor as it arrives, before the header reply and
// during a streamed answer, with no message timer; after processing is
// complete chunks are dropped.
// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onData; processor_state.cc ProcessorState::onStartProcessorCall
// envoy-test: ServerWaitForBodyBeforeSendsHeaderRespDuplexStreamed (ext_proc_integration_test.cc)
// ours: TestFDSChunksBeforeAndDuringStreamedAnswer
func (x *Exchange) Body(chunk []byte, eos bool) error {
	return x.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: eos}},
	})
}

// Trailers sends request_trailers; with FDS the trailer mode is SEND and
// they are sent only when the request really has trailers ([api]).
func (x *Exchange) Trailers(trailers Headers) error {
	x.mu.Lock()
	x.hadTrailers = true
	x.mu.Unlock()
	return x.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{Trailers: trailers.proto()}},
	})
}

func (x *Exchange) send(m *extprocv3.ProcessingRequest) error {
	x.mu.Lock()
	skip := x.complete || x.stream == nil
	x.mu.Unlock()
	if skip {
		// After processing is complete request data is dropped ([code]).
		return nil
	}
	m.MetadataContext = &corev3.Metadata{}
	if err := x.stream.Send(m); err != nil {
		return fmt.Errorf("emulator: send to processor: %w", err)
	}
	return nil
}

// Next returns the next action, waiting for it; ErrFinished after the
// terminal one.
func (x *Exchange) Next(ctx context.Context) (Action, error) {
	for {
		x.mu.Lock()
		if len(x.queue) > 0 {
			a := x.queue[0]
			x.queue = x.queue[1:]
			x.mu.Unlock()
			return a, nil
		}
		out := x.terminalOut
		x.mu.Unlock()
		if out {
			return Action{}, ErrFinished
		}
		select {
		case <-x.notify:
		case <-ctx.Done():
			return Action{}, fmt.Errorf("emulator: waiting for processor: %w", ctx.Err())
		}
	}
}

// Close ends the exchange like Filter::onDestroy: the Process stream is
// cancelled (RST, never a half-close [code]) and nothing
// more is sent or accepted. It waits for the receive loop to stop.
//
// [rule close-is-reset] Envoy never half-closes the Process stream: once
// processing is complete, or the downstream stream goes away, it resets it.
// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::closeStream, Filter::onDestroy; source/extensions/filters/common/ext_proc/grpc_client_impl.h (closeStream, then resetStream)
// envoy-test: none
// ours: TestImmediateResponseHTTP, TestClientDisconnectCancelsProcessStream
func (x *Exchange) Close() {
	x.mu.Lock()
	x.complete = true
	x.mu.Unlock()
	x.cancel()
	<-x.recvDone
}

// emit queues an action; once a terminal action is queued nothing follows.
// Called with mu held.
func (x *Exchange) emit(a Action) {
	if x.terminalOut {
		return
	}
	x.queue = append(x.queue, a)
	if a.Terminal() {
		x.terminalOut = true
	}
	select {
	case x.notify <- struct{}{}:
	default:
	}
}

// closeStream is Envoy's closeStream on the processing side: processing is
// complete and the stream is reset. Called with mu held.
func (x *Exchange) closeStream() {
	x.complete = true
	x.cancel()
}

func (x *Exchange) recvLoop() {
	defer close(x.recvDone)
	for {
		resp, err := x.stream.Recv()
		x.mu.Lock()
		if err != nil {
			x.onStreamEnd(err)
			x.mu.Unlock()
			return
		}
		x.onResponse(resp)
		x.mu.Unlock()
	}
}

// onStreamEnd handles the end of the Process stream. Called with mu held.
func (x *Exchange) onStreamEnd(err error) {
	if x.complete {
		return // we closed it, or a terminal answer came first
	}
	st := status.Convert(err)
	if errors.Is(err, io.EOF) {
		st = status.New(codes.OK, "")
	}
	if x.ctx.Err() != nil {
		// Only the caller's context can be done here (we cancel ours after
		// setting complete): the downstream went away, Envoy destroys the
		// filter and nobody is left to answer.
		x.complete = true
		return
	}
	x.closeStream()
	if st.Code() == codes.OK {
		// [rule close-ok-continues] A processor that closes the stream
		// with OK before answering lets the request continue unprocessed
		// to its route.
		// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onGrpcCloseWithStatus
		// envoy-test: none
		// ours: TestProcessorLetsRequestThrough
		if x.localStarted {
			// [rule close-ok-during-streamed-answer] A close with OK while
			// a streamed local answer runs leaves it unfinished: the filter
			// never continues, later request data is dropped, and only the
			// stream idle timeout (a reset) or the client ends it.
			// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onGrpcCloseWithStatus; processor_state.cc DecodingProcessorState::continueProcessing
			// envoy-test: TimeoutWaitingForLocalResponseEndStream (ext_proc_local_reply_streaming_integration_test.cc)
			// ours: TestMisbehavingCloseOKDuringStreamedAnswer
			x.log.Debug("processor closed the stream OK during a streamed local response")
			return
		}
		x.emit(Action{Kind: ActionContinue, Reply: x.c.routeReply(x.req.Route, x.grpc, x.head), Details: "processor closed the stream with OK"})
		return
	}
	// onGrpcError, fail-closed: status_on_error, or a reset once the local
	// response started ([code][test]).
	// [rule stream-error-status-on-error] A failed Process stream
	// (non-OK status, unreachable processor) before response headers:
	// a local reply with status_on_error (default 500) and no body; gRPC
	// clients get trailers-only with grpc-status mapped from it.
	// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onGrpcError
	// envoy-test: ExtProcStatusOnErrorIntegrationTest.GrpcStreamErrorCustomStatus, ExtProcStatusOnErrorIntegrationTest.GrpcStreamErrorDefaultStatus
	// ours: TestProcessorErrorIsStatusOnError, TestStreamFailure
	details := fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", st.Code(), strings.ReplaceAll(st.Message(), " ", "_"))
	x.fail(details)
}

// fail answers a processing error: a status_on_error local reply, or a
// reset once response headers went downstream. Called with mu held.
//
// [rule error-after-headers-resets] Any failure after streamed response
// headers went downstream (stream error, spurious reply, ImmediateResponse)
// resets the stream instead of answering: HTTP/2 RST_STREAM, HTTP/1 the
// connection closed mid-body.
// source: source/common/http/filter_manager.cc DownstreamFilterManager::sendLocalReply
// envoy-test: ExtProcLocalReplyStreamingIntegrationTest.SpuriousResponse
// ours: TestStreamFailure, TestMisbehavingReplyDuringStreamedAnswer
func (x *Exchange) fail(details string) {
	x.closeStream()
	x.log.Debug("ext_proc error", "details", details)
	if x.localStarted {
		x.emit(Action{Kind: ActionReset, Details: details})
		return
	}
	x.emit(Action{Kind: ActionLocalReply, Reply: buildLocalReply(replyInput{
		code: x.c.statusOnError, details: details, grpc: x.grpc, head: x.head,
	})})
}

// spurious handles an out-of-state reply: fail-closed (runtime
// ext_proc_fail_close_spurious_resp defaults to true), always a reset after
// the local response started ([code][test]). Called with mu held.
//
// [rule spurious-reply-fails-closed] A reply that does not fit the state
// (a body reply before the header reply, a response-direction reply, an
// empty ProcessingResponse, a second streamed headers_response) fails the
// request with status_on_error; later replies are ignored.
// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onReceiveMessage
// envoy-test: ServerSendOutOfOrderResponseDuplexStreamed (ext_proc_integration_test.cc)
// ours: TestMisbehavingSpuriousBeforeAnswer, TestMisbehavingPackedUnexpectedReplies
func (x *Exchange) spurious(why string) {
	x.log.Debug("spurious ext_proc response", "why", why)
	x.fail("spurious_message")
}

// onResponse applies one ProcessingResponse in arrival order, like
// Filter::onReceiveMessage. Called with mu held.
func (x *Exchange) onResponse(resp *extprocv3.ProcessingResponse) {
	if x.complete {
		// After processing_complete_ later responses are ignored; this is
		// also why packed unexpected responses after the first cannot do
		// harm (CVE-2026-47207 fix) ([code]).
		x.log.Debug("ignoring ext_proc response after processing complete")
		return
	}
	if resp.GetOverrideMessageTimeout() != nil {
		// Envoy ignores every other field of such a message; with FDS no
		// timer runs, so it has no effect at all ([code]).
		// [rule override-message-timeout-ignored] A message carrying
		// override_message_timeout is consumed whole: its other fields are
		// ignored, and in FULL_DUPLEX_STREAMED no timer runs to change.
		// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onReceiveMessage, Filter::onNewTimeout
		// envoy-test: none
		// ours: TestMisbehavingOverrideMessageTimeoutIgnored
		return
	}
	// mode_override is ignored when a configured body mode is FDS [code].
	switch r := resp.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		x.onHeadersReply(r.RequestHeaders)
	case *extprocv3.ProcessingResponse_RequestBody:
		// In FDS a body reply is valid only after the header reply (which
		// ends the exchange here) and never during a local response:
		// before the header reply -> 500, during one -> reset ([test
		// ServerSendOutOfOrderResponseDuplexStreamed,
		// InvalidBodyMessageAfterLocalResponseStarted]).
		x.spurious("request_body reply")
	case *extprocv3.ProcessingResponse_RequestTrailers:
		x.onTrailersReply(r.RequestTrailers)
	case *extprocv3.ProcessingResponse_ResponseHeaders, *extprocv3.ProcessingResponse_ResponseBody, *extprocv3.ProcessingResponse_ResponseTrailers:
		// Response processing is skipped, the encoding state is Idle.
		x.spurious("response-direction reply")
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		x.onImmediate(r.ImmediateResponse)
	case *extprocv3.ProcessingResponse_StreamedImmediateResponse:
		x.onStreamed(r.StreamedImmediateResponse)
	default:
		// Empty ProcessingResponse (or only fields Envoy does not act on):
		// "unhandled message" -> spurious ([code]).
		// [rule standalone-mode-override] A ProcessingResponse with only
		// mode_override is an unhandled message in <= 1.39: status_on_error.
		// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onReceiveMessage
		// envoy-test: none
		// ours: TestMisbehavingSpuriousBeforeAnswer
		// UNVERIFIED: Envoy 1.40 handles a standalone mode_override
		// (DecodingProcessorState::handleStandaloneModeOverride, PR 46318),
		// whose code could not be read here; its API says an override our
		// config cannot honour (FDS configured, no allow_mode_override) is
		// ignored or rejected as spurious. Processors must not send one.
		x.spurious("empty ProcessingResponse")
	}
}

// onHeadersReply applies a request_headers reply. Called with mu held.
func (x *Exchange) onHeadersReply(r *extprocv3.HeadersResponse) {
	if x.localStarted {
		x.spurious("request_headers reply after a local response started")
		return
	}
	// HeadersCallback -> the request continues to the router, which
	// answers at once (direct_response, no healthy upstream, 404);
	// header mutations apply to the request headers ([code]).
	// [rule header-reply-continues] A request_headers reply lets the
	// request continue, with its mutations, to the route; the stream
	// closes since nothing more is sent (response processing skipped).
	// source: source/extensions/filters/http/ext_proc/processor_state.cc ProcessorState::handleHeadersResponse; ext_proc.cc Filter::closeGrpcStreamIfLastRespReceived
	// envoy-test: GetAndSetHeaders (ext_proc_integration_test.cc)
	// ours: TestProcessorLetsRequestThrough
	h := append(Headers(nil), x.req.Headers...)
	if err := applyHeaderMutation(r.GetResponse().GetHeaderMutation(), &h); err != nil {
		x.fail(strings.ReplaceAll(err.Error(), " ", "_"))
		return
	}
	x.closeStream()
	x.emit(Action{Kind: ActionContinue, Reply: x.c.routeReply(x.req.Route, x.grpc, x.head), Details: "processor answered request_headers with CONTINUE"})
}

// onTrailersReply applies a request_trailers reply. Called with mu held.
func (x *Exchange) onTrailersReply(r *extprocv3.TrailersResponse) {
	if x.localStarted {
		x.spurious("request_trailers reply during a local response") // [code]
		return
	}
	// [rule trailers-reply-first] In FULL_DUPLEX_STREAMED a
	// request_trailers reply is accepted in any state: its mutation
	// applies only if the request had trailers, the unmodified request
	// continues to the route, and the ext_proc stream closes (no
	// response processing follows; a later header reply is never read).
	// source: source/extensions/filters/http/ext_proc/processor_state.cc ProcessorState::handleTrailersResponse, isValidTrailersCallbackState; ext_proc.cc Filter::closeGrpcStreamIfLastRespReceived
	// envoy-test: none
	// ours: TestTrailersReplyBeforeHeaderReply
	x.closeStream()
	if x.hadTrailers {
		var t Headers
		if err := applyHeaderMutation(r.GetHeaderMutation(), &t); err != nil {
			x.fail(strings.ReplaceAll(err.Error(), " ", "_"))
			return
		}
	}
	x.emit(Action{Kind: ActionContinue, Reply: x.c.routeReply(x.req.Route, x.grpc, x.head), Details: "processor answered request_trailers before request_headers"})
}

// onImmediate is the kImmediateResponse case: processing completes, the
// stream is closed at once, then sendLocalReply ([code]).
//
// [rule immediate-response] An ImmediateResponse closes the Process stream
// at once and becomes a local reply: its status (200 when unset or below
// 200), body, header mutations (under the mutation rules) and details.
// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onReceiveMessage, Filter::sendImmediateResponse
// envoy-test: ExtProcIntegrationTest.GetAndRespondImmediately
// ours: TestImmediateResponseHTTP, TestImmediateResponseGRPC
func (x *Exchange) onImmediate(ir *extprocv3.ImmediateResponse) {
	x.closeStream()
	if x.localStarted {
		// sendLocalReply after headers were sent resets the stream ([code]).
		x.emit(Action{Kind: ActionReset, Details: "immediate response after local response headers"})
		return
	}
	code := 200 // DefaultImmediateStatus
	if ir.GetStatus() != nil {
		code = int(ir.GetStatus().GetCode())
	}
	if code < 200 {
		// isValidHttpStatus is code >= 200 [code]: below, the default 200.
		// [rule immediate-status-above-999] An ImmediateResponse status
		// above 999 is sent as is: HTTP/1 writes a status line Go clients
		// reject; gRPC requests still get :status 200 and grpc-status
		// mapped from it (UNKNOWN).
		// source: source/extensions/filters/http/ext_proc/mutation_utils.cc MutationUtils::isValidHttpStatus; source/common/http/http1/codec_impl.cc ResponseEncoderImpl::encodeHeaders
		// envoy-test: none
		// ours: TestImmediateStatusAbove999
		code = 200
	}
	var gs *uint32
	if ir.GetGrpcStatus() != nil {
		v := ir.GetGrpcStatus().GetStatus()
		gs = &v
	}
	x.emit(Action{Kind: ActionLocalReply, Reply: buildLocalReply(replyInput{
		code: code,
		body: ir.GetBody(),
		mutate: func(h *Headers) {
			// A failing mutation stops the rest; the reply is still sent
			// (the mutation runs inside sendLocalReply's modify_headers).
			if err := applyHeaderMutation(ir.GetHeaders(), h); err != nil {
				x.log.Debug("immediate response header mutation failed", "err", err)
			}
		},
		grpcStatus: gs,
		details:    strings.ReplaceAll(ir.GetDetails(), " ", "_"),
		grpc:       x.grpc,
		head:       x.head,
	})})
}

// onStreamed is the StreamedImmediateResponse case ([code][test]).
func (x *Exchange) onStreamed(s *extprocv3.StreamedImmediateResponse) {
	switch r := s.GetResponse().(type) {
	case *extprocv3.StreamedImmediateResponse_HeadersResponse:
		// Only in HeadersCallback, i.e. before any header reply and once.
		// [rule streamed-headers] StreamedImmediateResponse headers start
		// the answer at once: only before the header reply and only once;
		// :status must be an integer >= 200 (else status_on_error); values
		// are read from raw_value, refused or invalid entries dropped,
		// repeated keys collapse to the last.
		// source: source/extensions/filters/http/ext_proc/processor_state.cc DecodingProcessorState::startLocalResponse; mutation_utils.cc MutationUtils::protoToHeaders
		// envoy-test: none
		// ours: TestFDSChunksBeforeAndDuringStreamedAnswer, TestMisbehavingStreamedStatus, TestMisbehavingValueInsteadOfRawValue
		if x.localStarted {
			x.spurious("second streamed headers_response")
			return
		}
		hm := r.HeadersResponse.GetHeaders()
		statusText, hasStatus := "", false
		for _, hv := range hm.GetHeaders() {
			if strings.ToLower(hv.GetKey()) == ":status" {
				statusText, hasStatus = string(hv.GetRawValue()), true
			}
		}
		if !hasStatus {
			// [rule streamed-headers-without-status] Streamed response
			// headers without :status end in a 502 local reply whose body
			// (text/plain; grpc-message for gRPC) is "missing required
			// header: :status".
			// source: source/common/http/filter_manager.cc FilterManager::encodeHeaders; source/common/http/header_utility.cc HeaderUtility::checkRequiredResponseHeaders
			// envoy-test: ProtocolIntegrationTest.RemoveResponseHeadersFilter
			// ours: TestStreamedHeadersWithoutStatus
			x.closeStream()
			x.emit(Action{Kind: ActionLocalReply, Reply: buildLocalReply(replyInput{
				code: 502, body: []byte("missing required header: :status"),
				details: "filter_removed_required_response_headers{missing_required_header:_:status}",
				grpc:    x.grpc, head: x.head,
			})})
			return
		}
		code, err := strconv.Atoi(statusText)
		if err != nil || code < 200 || code > 999 {
			// :status must be an integer >= 200 ([code]).
			x.fail("invalid_:status_in_streamed_headers_response")
			return
		}
		x.localStarted = true
		a := Action{Kind: ActionHeaders, Status: code, Headers: withoutPseudo(protoToHeaders(hm)), EndOfStream: r.HeadersResponse.GetEndOfStream()}
		if a.EndOfStream {
			x.closeStream()
		}
		x.emit(a)
	case *extprocv3.StreamedImmediateResponse_BodyResponse:
		if !x.localStarted {
			x.spurious("local response body received before headers")
			return
		}
		// Bytes verbatim; Envoy adds no framing ([code]).
		// [rule streamed-body-and-trailers] Streamed body bytes go out
		// verbatim (no framing added), each re-arming the stream idle timer
		// even when empty; trailers always end the answer (HTTP/1 drops them
		// without enable_trailers).
		// source: source/extensions/filters/http/ext_proc/processor_state.cc DecodingProcessorState::processLocalBodyResponse, processLocalTrailersResponse; source/common/http/filter_manager.cc FilterManager::encodeData
		// envoy-test: none
		// ours: TestStreamedImmediateResponseGRPC, TestStreamIdleTimeoutDuringStreamedResponse
		a := Action{Kind: ActionBody, Body: r.BodyResponse.GetBody(), EndOfStream: r.BodyResponse.GetEndOfStream()}
		if a.EndOfStream {
			x.closeStream()
		}
		x.emit(a)
	case *extprocv3.StreamedImmediateResponse_TrailersResponse:
		if !x.localStarted {
			x.spurious("local response trailers received before headers")
			return
		}
		// Trailers always end the response ([code]).
		x.closeStream()
		x.emit(Action{Kind: ActionTrailers, Headers: withoutPseudo(protoToHeaders(r.TrailersResponse))})
	default:
		x.spurious("empty StreamedImmediateResponse")
	}
}

// [rule route-reply] A request let through gets its route's answer at
// once: a direct_response route's status and body, "no healthy upstream"
// 503 for a cluster without endpoints, 404 when no route matched.
// source: source/common/router/router.cc Filter::decodeHeaders
// envoy-test: DownstreamProtocolIntegrationTest.ConnectIsBlocked
// ours: TestProcessorLetsRequestThrough, TestConnectReachesProcessor
//
// routeReply is the router's answer when a request continues past
// ext_proc: a direct_response route's status and inline body, "no healthy upstream" 503 for a cluster route (the
// emulator has no upstreams; envoy.yaml's placeholder cluster has no
// endpoints), or 404 without a route. Route timeouts are armed only when
// the router forwards upstream, which never happens here.
func (c *Client) routeReply(route *envoy.Route, grpc, head bool) LocalReply {
	in := replyInput{grpc: grpc, head: head}
	switch {
	case route == nil:
		in.code, in.details = 404, "route_not_found"
	case route.DirectResponseStatus != 0:
		in.code, in.body, in.details = route.DirectResponseStatus, []byte(route.DirectResponseBody), "direct_response"
	default:
		in.code, in.body, in.details = 503, []byte("no healthy upstream"), "no_healthy_upstream"
	}
	return buildLocalReply(in)
}
