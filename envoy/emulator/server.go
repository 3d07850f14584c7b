package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
)

// downstream is one HTTP stream as the HCM sees it.
type downstream struct {
	w    http.ResponseWriter
	r    *http.Request
	rc   *http.ResponseController
	h1   bool
	log  *slog.Logger
	grpc bool
	head bool

	// started: response headers were written downstream.
	started bool
	// chunked: an HTTP/1.1 streamed response is using chunked encoding.
	chunked bool
	// requestComplete: the whole request was read (no body, or its end).
	requestComplete bool

	// lastActivity is nanoseconds since base of the last decode or encode
	// event (the stream idle timer's reset points).
	base         time.Time
	lastActivity atomic.Int64

	pumpRunning bool
	pumpDone    chan error

	// corsHeaders are set on every answer by the CORS filter's encodeHeaders.
	corsHeaders Headers
}

func (d *downstream) activity() { d.lastActivity.Store(int64(time.Since(d.base))) }

func (e *Emulator) serveHTTP(w http.ResponseWriter, r *http.Request) {
	d := &downstream{
		w: w, r: r, rc: http.NewResponseController(w),
		h1:   r.ProtoMajor < 2,
		log:  e.log,
		head: r.Method == http.MethodHead,
		base: time.Now(),
	}
	d.grpc = r.ProtoMajor > 0 && isGRPCContentType(r.Header.Get("Content-Type"))

	// HCM checks before the filter chain: the processor is never contacted.
	if rep, refused := d.hcmRefusal(e.headerLimit()); refused {
		d.writeReply(rep)
		return
	}

	headers := DownstreamHeaders(r)
	d.grpc = isGRPCRequest(headers)
	route := e.client.Route(headers)
	preflight, corsHeaders := e.corsDecode(headers, route)
	if preflight != nil {
		d.writeReply(*preflight)
		return
	}
	d.corsHeaders = corsHeaders
	idle := e.idleTimeout(route)
	eos, h1Connect := d.bodyless(), d.h1 && r.Method == http.MethodConnect
	if d.h1 {
		// Let the handler read the request while it writes the response
		// (FDS streams both ways at once).
		_ = d.rc.EnableFullDuplex()
	}

	x := e.client.Start(r.Context(), Request{Headers: headers, EndOfStream: eos, Route: route})
	actCtx, stopActs := context.WithCancel(r.Context())
	acts := make(chan Action)
	actsDone := make(chan struct{})
	go relayActions(actCtx, x, acts, actsDone)
	// Runs on return and on the panics that reset the stream: nothing of
	// this request outlives the handler.
	defer func() {
		stopActs()
		x.Close()
		d.stopPump()
		<-actsDone
	}()

	d.requestComplete = eos
	d.activity() // request headers: a decode event
	if !eos && !h1Connect {
		d.pumpRunning = true
		d.pumpDone = make(chan error, 1)
		go d.pump(x)
	}

	d.steps(acts, idle)

	// The response is complete: Envoy closes (resets) the Process stream
	// at once ([code]).
	x.Close()
	if !d.requestComplete {
		// A complete response with the request still incomplete: the HCM
		// resets the downstream stream ([test
		// FinishLocalResponseWithIncomplereRequestWithBodyDuplex]).
		d.resetAfterResponse()
	}
}

// bodyless reports whether the request comes without a body: HTTP/1
// without content-length or chunked encoding, HTTP/2 HEADERS with
// END_STREAM. An HTTP/2 request with content-length: 0 and a separate empty
// DATA frame is taken as bodyless too (net/http hides the difference).
//
// An HTTP/1 CONNECT is never bodyless: Envoy's codec takes what follows the
// headers as request body (the tunnel), so the request never completes and
// the connection closes after the response. net/http hides those bytes;
// none are sent on.
func (d *downstream) bodyless() bool {
	return d.r.ContentLength == 0 && !(d.h1 && d.r.Method == http.MethodConnect)
}

// steps runs the request's steps until its response is complete, with
// the route's idle timeout (0: none) over them.
func (d *downstream) steps(acts <-chan Action, idle time.Duration) {
	var (
		timerC <-chan time.Time
		rearm  func(time.Duration)
	)
	if idle > 0 {
		t := time.NewTimer(idle)
		defer t.Stop()
		timerC = t.C
		rearm = func(left time.Duration) { t.Reset(left) }
	}
	for done := false; !done; {
		done = d.step(acts, timerC, idle, rearm)
	}
}

// hcmRefusal is the local reply of the HCM's checks that come before the
// filter chain (the processor is never contacted), if the request fails one.
func (d *downstream) hcmRefusal(headerLimit int) (LocalReply, bool) {
	r := d.r
	if headersOverLimit(r, headerLimit) {
		// The codec refuses the request before the HCM sees it.
		if !d.h1 {
			d.log.Debug("request headers over max_request_headers_kb: reset")
			d.reset()
		}
		rep := buildLocalReply(replyInput{code: 431, body: []byte("Request Header Fields Too Large"), details: "http1.headers_too_large", grpc: d.grpc, head: d.head})
		rep.CloseConnection = true
		return rep, true
	}
	if d.h1 && r.ProtoMinor == 0 {
		// [rule http10-426] HTTP/1.0 without accept_http_10 is refused with
		// 426 before the filters run.
		// source: source/common/http/conn_manager_impl.cc ActiveStream::decodeHeaders
		// envoy-test: none
		// ours: TestUpgradeRefused
		return buildLocalReply(replyInput{code: 426, details: "low_version", grpc: d.grpc, head: d.head}), true
	}
	if d.h1 && isUpgrade(r.Header) {
		if !strings.EqualFold(strings.TrimSpace(r.Header.Get("Upgrade")), "h2c") {
			// [rule upgrade-403] An Upgrade request (other than h2c) that
			// matched a route, with no upgrade_configs, gets 403 and the
			// connection closes; the processor is never contacted. (Every
			// path matches envoy.yaml's prefix "/" routes; a CONNECT has no
			// path and is not refused, see connect-has-no-path.)
			// source: source/common/http/conn_manager_impl.cc ActiveStream::decodeHeaders
			// envoy-test: none
			// ours: TestUpgradeRefused
			rep := buildLocalReply(replyInput{code: 403, details: "upgrade_failed", grpc: d.grpc, head: d.head})
			rep.CloseConnection = true
			return rep, true
		}
		// [rule h2c-upgrade-stripped] An h2c Upgrade is stripped (Upgrade,
		// the Connection tokens, HTTP2-Settings) and the request is served
		// as HTTP/1.1; DownstreamHeaders drops those headers.
		// source: source/common/http/http1/codec_impl.cc ConnectionImpl::onHeadersComplete
		// envoy-test: none
		// ours: TestUpgradeH2CIsStripped
	}
	if r.Host == "" {
		// Host is required (HCM MissingHost [code, HCM]).
		return buildLocalReply(replyInput{code: 400, details: "missing_host_header", grpc: d.grpc, head: d.head}), true
	}
	return LocalReply{}, false
}

// relayActions hands the exchange's actions to the handler until the
// terminal one, an error or ctx's end; done is closed when it returns.
func relayActions(ctx context.Context, x *Exchange, acts chan<- Action, done chan<- struct{}) {
	defer close(done)
	for {
		a, err := x.Next(ctx)
		if err != nil {
			return
		}
		select {
		case acts <- a:
		case <-ctx.Done():
			return
		}
		if a.Terminal() {
			return
		}
	}
}

// step waits for one event and handles it; it reports whether the
// response is complete.
func (d *downstream) step(acts <-chan Action, timerC <-chan time.Time, idle time.Duration, rearm func(time.Duration)) bool {
	select {
	case a := <-acts:
		d.activity() // an encode event
		return d.apply(a)
	case err := <-d.pumpDone:
		d.pumpRunning = false
		d.pumpDone = nil
		if err != nil {
			// Downstream reset or disconnect: Envoy destroys the stream and
			// its filter, which cancels the Process stream ([code]).
			d.log.Debug("downstream request failed", "err", err)
			panic(http.ErrAbortHandler)
		}
		d.requestComplete = true
		return false
	case <-timerC:
		since := time.Since(d.base) - time.Duration(d.lastActivity.Load())
		if since < idle {
			rearm(idle - since)
			return false
		}
		// [rule stream-idle-timeout] The stream idle timer (route
		// idle_timeout for route actions, else stream_idle_timeout) is
		// re-armed by every decode and encode event; when it fires before
		// response headers the answer is 408 (request incomplete) or 504
		// with body "stream timeout", after them a reset.
		// source: source/common/http/conn_manager_impl.cc ActiveStream::onIdleTimeout, ActiveStream::resetIdleTimer; source/common/http/utility.cc Utility::maybeRequestTimeoutCode
		// envoy-test: IdleTimeoutIntegrationTest.PerStreamIdleTimeoutAfterDownstreamHeaders, ServerWaitTooLongBeforeSendRespDuplexStreamed, TimeoutWaitingForLocalResponseEndStream (ext_proc_local_reply_streaming_integration_test.cc)
		// ours: TestStreamIdleTimeoutBeforeResponse, TestStreamIdleTimeoutDuringStreamedResponse
		if d.started {
			// After response headers: the stream is reset [test
			// TimeoutWaitingForLocalResponseEndStream].
			d.log.Debug("stream idle timeout after response headers: reset")
			d.reset()
		}
		// Before: 408 if the request is incomplete, else 504.
		code := 504
		if !d.requestComplete {
			code = 408
		}
		d.writeReply(buildLocalReply(replyInput{code: code, body: []byte("stream timeout"), details: "stream_idle_timeout", grpc: d.grpc, head: d.head}))
		return true
	case <-d.r.Context().Done():
		// The client went away; the deferred Close cancels the Process
		// stream ([code]).
		// [rule client-gone-cancels] A client that resets or disconnects
		// destroys the filter, which resets the Process stream.
		// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::onDestroy
		// envoy-test: none
		// ours: TestClientDisconnectCancelsProcessStream
		panic(http.ErrAbortHandler)
	}
}

// apply carries out one filter action; it reports whether the response is
// complete.
func (d *downstream) apply(a Action) bool {
	switch a.Kind {
	case ActionLocalReply, ActionContinue:
		d.log.Debug("local reply", "kind", a.Kind, "status", a.Reply.Status, "details", a.Reply.Details)
		d.writeReply(a.Reply)
		return true
	case ActionHeaders:
		d.setHeaders(a.Headers)
		if a.EndOfStream {
			d.noContentLengthIfEmpty()
		}
		d.w.WriteHeader(a.Status)
		d.started = true
		if a.EndOfStream {
			return true
		}
		// [rule streamed-http-framing] A streamed answer without
		// content-length goes to an HTTP/1.1 client chunked, each body
		// message written as it arrives and the end a last chunk; to an
		// HTTP/2 client as DATA frames as they arrive. Nothing is held back,
		// so an event stream (text/event-stream) arrives event by event.
		// source: source/common/http/http1/codec_impl.cc StreamEncoderImpl::encodeHeadersBase (chunk_encoding_), StreamEncoderImpl::encodeData; source/common/http/filter_manager.cc FilterManager::encodeData
		// envoy-test: none
		// ours: e2e.TestSSERecordsAsEvents, e2e.TestSSEHeartbeatOutlivesIdleTimeout
		d.chunked = d.h1 && d.r.ProtoAtLeast(1, 1) && !d.head && d.w.Header().Get("Content-Length") == "" && bodyAllowed(a.Status)
		// Headers go downstream at once ([code]).
		d.flush()
		return false
	case ActionBody:
		if len(a.Body) > 0 {
			if _, err := d.w.Write(a.Body); err != nil {
				d.log.Debug("write response body", "err", err)
			}
		}
		d.flush()
		return a.EndOfStream
	case ActionTrailers:
		if d.h1 {
			// HTTP/1.1 drops trailers unless enable_trailers is set, which
			// Settings cannot express ([code]).
			return true
		}
		hdr := d.w.Header()
		for _, t := range a.Headers {
			hdr[http.TrailerPrefix+http.CanonicalHeaderKey(t.Key)] = append(hdr[http.TrailerPrefix+http.CanonicalHeaderKey(t.Key)], t.Value)
		}
		return true
	case ActionReset:
		d.log.Debug("reset downstream stream", "details", a.Details)
		d.reset()
	}
	return true
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != 204 && status != 304
}

func (d *downstream) flush() {
	if err := d.rc.Flush(); err != nil {
		d.log.Debug("flush", "err", err)
	}
}

// setHeaders copies response headers. net/http must not sniff a
// content-type Envoy would not add.
//
// [rule server-envoy] Every response, local replies and streamed answers
// alike, carries server: envoy (overwriting the processor's) and a date.
// source: source/common/http/conn_manager_impl.cc ActiveStream::encodeHeaders
// envoy-test: HttpConnectionManagerImplTest.ServerHeaderOverwritten
// ours: TestImmediateResponseHTTP
func (d *downstream) setHeaders(h Headers) {
	hdr := d.w.Header()
	for _, e := range h {
		if strings.HasPrefix(e.Key, ":") || !httpguts.ValidHeaderFieldName(e.Key) {
			continue
		}
		k := http.CanonicalHeaderKey(e.Key)
		hdr[k] = append(hdr[k], e.Value)
	}
	if _, ok := hdr["Content-Type"]; !ok {
		hdr["Content-Type"] = nil
	}
	for _, e := range d.corsHeaders {
		hdr.Set(e.Key, e.Value)
	}
	hdr.Set("Server", "envoy")
	if d.h1 && !d.requestComplete {
		// [rule h1-early-response-closes] A response that starts before
		// an HTTP/1 request is complete says connection: close.
		// source: source/common/http/conn_manager_impl.cc ActiveStream::encodeHeaders
		// envoy-test: none
		// ours: TestIncompleteRequestClosesHTTP1Connection
		hdr.Set("Connection", "close")
	}
}

// noContentLengthIfEmpty keeps net/http from adding content-length: 0 to
// a headers-only HTTP/2 response: Envoy sends none there (HTTP/1 does get
// one, from Envoy's codec as from net/http). A present but empty key stops
// net/http's own.
func (d *downstream) noContentLengthIfEmpty() {
	hdr := d.w.Header()
	if _, ok := hdr["Content-Length"]; !ok && !d.h1 {
		hdr["Content-Length"] = nil
	}
}

// writeReply sends a complete local reply. Without a flush net/http sends
// a bodyless reply as one HEADERS frame with END_STREAM on HTTP/2, which
// is what a gRPC trailers-only reply needs.
func (d *downstream) writeReply(rep LocalReply) {
	if d.started {
		// sendLocalReply after response headers: reset ([code]).
		d.reset()
	}
	d.setHeaders(rep.Headers)
	if rep.CloseConnection && d.h1 {
		d.w.Header().Set("Connection", "close")
	}
	if rep.Status > 999 {
		d.writeStatusAbove999(rep)
		return
	}
	d.noContentLengthIfEmpty()
	d.w.WriteHeader(rep.Status)
	d.started = true
	if len(rep.Body) > 0 && !d.head {
		if _, err := d.w.Write(rep.Body); err != nil {
			d.log.Debug("write local reply", "err", err)
		}
	}
}

// writeStatusAbove999 sends a reply whose status net/http refuses to
// write (it panics above 999). Envoy's HTTP/1 codec writes the number and
// the reason "Unknown"; the emulator writes that on the raw connection and
// closes it, since net/http cannot go on serving a hijacked connection.
// Whether Envoy's HTTP/2 codec library sends such a :status is not known
// (that code is outside Envoy's tree), so HTTP/2 gets a reset: a client
// never sees a plausible answer. It never returns.
func (d *downstream) writeStatusAbove999(rep LocalReply) {
	d.log.Warn("local reply status above 999: a client cannot read it", "status", rep.Status, "details", rep.Details)
	if !d.h1 {
		d.reset()
	}
	conn, bw, err := d.rc.Hijack()
	if err != nil {
		d.log.Debug("hijack", "err", err)
		d.reset()
	}
	hdr := d.w.Header().Clone()
	hdr.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	hdr.Set("Connection", "close")
	if len(rep.Body) == 0 && !d.head {
		hdr.Set("Content-Length", "0")
	}
	fmt.Fprintf(bw, "HTTP/1.1 %d Unknown\r\n", rep.Status)
	_ = hdr.Write(bw)
	_, _ = bw.WriteString("\r\n")
	if !d.head {
		_, _ = bw.Write(rep.Body)
	}
	if err := bw.Flush(); err != nil {
		d.log.Debug("write local reply", "err", err)
	}
	_ = conn.Close()
	panic(http.ErrAbortHandler) // nothing more is written on this connection
}

// reset resets the downstream stream: RST_STREAM on HTTP/2, a connection
// close on HTTP/1 ([code]). It never returns.
//
// [rule reset-internal-error] A reset of a response not yet ended is
// RST_STREAM(INTERNAL_ERROR) on HTTP/2 (Envoy >= 1.37; NO_ERROR before)
// and a connection close on HTTP/1.
// source: source/common/http/conn_manager_impl.cc ActiveStream::resetStream; source/common/http/http2/codec_impl.cc reasonToReset
// envoy-test: MultiplexedIntegrationTestWithSimulatedTimeHttp2Only.ResetPropogation
// ours: TestMisbehavingReplyDuringStreamedAnswer, TestStreamFailure
func (d *downstream) reset() {
	if d.h1 {
		// Unblock the body reader so net/http does not wait for the rest
		// of the request while closing.
		_ = d.rc.SetReadDeadline(time.Now())
	}
	panic(http.ErrAbortHandler)
}

// resetAfterResponse ends a complete response whose request is still
// incomplete: net/http sends RST_STREAM(NO_ERROR) when the handler
// returns with the request open.
//
// [rule complete-response-incomplete-request] A complete response while
// the request is still open ends the request: HTTP/2 RST_STREAM(NO_ERROR)
// after END_STREAM, HTTP/1 the connection closed after the response.
// source: source/common/http/conn_manager_impl.cc ActiveStream::doEndStream; source/common/http/http2/codec_impl.cc reasonToReset
// envoy-test: MultiplexedIntegrationTestWithSimulatedTimeHttp2Only.ResetPropogation, FinishLocalResponseWithIncomplereRequestWithBodyDuplex (ext_proc_local_reply_streaming_integration_test.cc)
// ours: TestStreamedResponseResetsIncompleteRequestH2, TestIncompleteRequestClosesHTTP1Connection
func (d *downstream) resetAfterResponse() {
	d.stopPump()
	if !d.h1 {
		return
	}
	d.flush()
	if d.chunked {
		// End the chunked body properly, then close: Envoy's codec
		// completes the response before closing.
		conn, _, err := d.rc.Hijack()
		if err != nil {
			d.log.Debug("hijack", "err", err)
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(conn, "0\r\n\r\n")
		_ = conn.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

// pump reads the request body and hands every chunk to the filter as it
// arrives ([code]). The last chunk carries end_of_stream, or
// request_trailers follow when the request has trailers ([code]).
// net/http only surfaces request trailers a client declared in a Trailer
// header; the end of an HTTP/2 body may come as a separate empty chunk.
func (d *downstream) pump(x *Exchange) {
	buf := make([]byte, 32<<10)
	remaining := int64(-1)
	if d.r.ContentLength > 0 && len(d.r.Trailer) == 0 {
		remaining = d.r.ContentLength
	}
	for {
		n, err := d.r.Body.Read(buf)
		if n > 0 {
			d.activity() // a decode event
		}
		last := errors.Is(err, io.EOF)
		if remaining > 0 {
			remaining -= int64(n)
			if remaining <= 0 {
				last = true
			}
		}
		if err != nil && !last {
			d.pumpDone <- err
			return
		}
		var trailers Headers
		if last {
			trailers = requestTrailers(d.r)
		}
		if n > 0 || (last && len(trailers) == 0) {
			if serr := x.Body(buf[:n], last && len(trailers) == 0); serr != nil {
				d.log.Debug("send request_body", "err", serr)
			}
		}
		if last {
			if len(trailers) > 0 {
				d.activity()
				if serr := x.Trailers(trailers); serr != nil {
					d.log.Debug("send request_trailers", "err", serr)
				}
			}
			d.pumpDone <- nil
			return
		}
	}
}

func requestTrailers(r *http.Request) Headers {
	keys := make([]string, 0, len(r.Trailer))
	for k := range r.Trailer {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var h Headers
	for _, k := range keys {
		for _, v := range r.Trailer[k] {
			h.add(strings.ToLower(k), v)
		}
	}
	return h
}

// stopPump makes a running body reader return and waits for it.
func (d *downstream) stopPump() {
	if !d.pumpRunning {
		return
	}
	_ = d.rc.SetReadDeadline(time.Now())
	<-d.pumpDone
	d.pumpRunning = false
}

// idleTimeout is the stream's idle timeout: a route's idle_timeout
// overrides the HCM stream_idle_timeout, but only for `route:` actions
// (direct_response routes have no RouteAction) ([code]).
func (e *Emulator) idleTimeout(route *envoy.Route) time.Duration {
	if route != nil && route.Cluster != "" && route.IdleTimeout > 0 {
		return route.IdleTimeout
	}
	return e.settings.StreamIdleTimeout
}

// headersOverLimit applies max_request_headers_kb (limit, in bytes) as
// Envoy's codecs count it.
//
// [rule request-headers-limit] max_request_headers_kb: HTTP/1 counts the
// raw header block and, separately, the URL plus header names and values;
// over either, 431 "Request Header Fields Too Large" and the connection
// closes. HTTP/2 counts decoded names and values (pseudo-headers
// included); over it, the stream is reset with no response.
// source: source/common/http/http1/codec_impl.cc ConnectionImpl::checkMaxHeadersSize; source/common/http/http2/codec_impl.cc ConnectionImpl::saveHeader
// envoy-test: DownstreamProtocolIntegrationTest.LargeRequestHeadersRejected
// ours: TestRequestHeadersLimit
//
// net/http has parsed the request already, so the raw HTTP/1 block is
// rebuilt as clients write it ("Name: value" lines, request line
// included); HTTP/2 cookie crumbs arrive joined (Envoy counts each crumb).
func headersOverLimit(r *http.Request, limit int) bool {
	fields := 0 // names and values
	lines := 0  // the raw HTTP/1 form of the header lines
	for k, vs := range r.Header {
		for _, v := range vs {
			fields += len(k) + len(v)
			lines += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	if r.ProtoMajor < 2 {
		host := len("host") + len(r.Host)
		raw := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2 + host + 4 + lines + 2
		return raw > limit || len(r.RequestURI)+host+fields > limit
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	pseudo := len(":method") + len(r.Method) + len(":authority") + len(r.Host)
	if r.Method != http.MethodConnect { // CONNECT has neither :scheme nor :path
		pseudo += len(":scheme") + len(scheme) + len(":path") + len(r.RequestURI)
	}
	return pseudo+fields > limit
}

// isUpgrade is Http::Utility::isUpgrade: a Connection header with the
// "upgrade" token and an Upgrade header.
func isUpgrade(h http.Header) bool {
	return h.Get("Upgrade") != "" && httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade")
}
