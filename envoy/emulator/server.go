package emulator

import (
	"context"
	"errors"
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
	if rep, refused := d.hcmRefusal(); refused {
		d.writeReply(rep)
		return
	}

	headers := DownstreamHeaders(r)
	d.grpc = isGRPCRequest(headers)
	route := e.client.Route(headers)
	idle := e.idleTimeout(route)
	// A request without a body: HTTP/1 without content-length or chunked
	// encoding, HTTP/2 HEADERS with END_STREAM. An HTTP/2 request with
	// content-length: 0 and a separate empty DATA frame is taken as
	// bodyless too (net/http hides the difference).
	eos := r.ContentLength == 0
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
	if !eos {
		d.pumpRunning = true
		d.pumpDone = make(chan error, 1)
		go d.pump(x)
	}

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

	// The response is complete: Envoy closes (resets) the Process stream
	// at once (§4.7, §3 [code]).
	x.Close()
	if !d.requestComplete {
		// A complete response with the request still incomplete: the HCM
		// resets the downstream stream (§4.8 [test
		// FinishLocalResponseWithIncomplereRequestWithBodyDuplex]).
		d.resetAfterResponse()
	}
}

// hcmRefusal is the local reply of the HCM's checks that come before the
// filter chain (the processor is never contacted), if the request fails one.
func (d *downstream) hcmRefusal() (LocalReply, bool) {
	if d.h1 && d.r.ProtoMinor == 0 {
		// HTTP/1.0 without http_protocol_options.accept_http_10 -> 426
		// (HCM LowVersion [code, HCM]).
		return buildLocalReply(replyInput{code: 426, details: "low_version", grpc: d.grpc, head: d.head}), true
	}
	if d.r.Method == http.MethodConnect {
		// The HCM treats CONNECT as an upgrade; with no upgrade_configs it
		// is refused with 403 and the HTTP/1 connection closes ([code, HCM
		// createFilterChain / upgrade_failed]; DESIGN §4). For HTTP/2 the
		// codec may reset the stream instead when allow_connect is off
		// (UNVERIFIED).
		rep := buildLocalReply(replyInput{code: 403, details: "upgrade_failed", grpc: d.grpc, head: d.head})
		rep.CloseConnection = true
		return rep, true
	}
	if d.h1 && isUpgrade(d.r.Header) {
		if !strings.EqualFold(strings.TrimSpace(d.r.Header.Get("Upgrade")), "h2c") {
			// Upgrade without upgrade_configs -> 403, connection close
			// ([code, HCM upgrade_failed]; DESIGN §4).
			rep := buildLocalReply(replyInput{code: 403, details: "upgrade_failed", grpc: d.grpc, head: d.head})
			rep.CloseConnection = true
			return rep, true
		}
		// Envoy's HTTP/1 codec strips an h2c upgrade (Upgrade, the
		// Connection tokens, HTTP2-Settings) and serves the request as
		// HTTP/1.1 ([code, http1 codec]; DESIGN §4). DownstreamHeaders
		// drops those headers.
	}
	if d.r.Host == "" {
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
			// its filter, which cancels the Process stream (§10.11 [code]).
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
		// stream_idle_timeout / route idle_timeout (§5.4 [code][test]).
		if d.started {
			// After response headers: the stream is reset [test
			// TimeoutWaitingForLocalResponseEndStream].
			d.log.Debug("stream idle timeout after response headers: reset")
			d.reset()
		}
		// Before: 408 if the request is incomplete, else 504
		// (Utility::maybeRequestTimeoutCode [code][test
		// ServerWaitTooLongBeforeSendRespDuplexStreamed]); the body text
		// "stream timeout" is UNVERIFIED.
		code := 504
		if !d.requestComplete {
			code = 408
		}
		d.writeReply(buildLocalReply(replyInput{code: code, body: []byte("stream timeout"), details: "stream_idle_timeout", grpc: d.grpc, head: d.head}))
		return true
	case <-d.r.Context().Done():
		// The client went away; the deferred Close cancels the Process
		// stream (§10.11 [code]).
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
		d.w.WriteHeader(a.Status)
		d.started = true
		if a.EndOfStream {
			return true
		}
		d.chunked = d.h1 && d.r.ProtoAtLeast(1, 1) && !d.head && d.w.Header().Get("Content-Length") == "" && bodyAllowed(a.Status)
		// Headers go downstream at once (§4.4 [code]).
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
			// Settings cannot express (§4.11 [code]).
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
// content-type Envoy would not add, and the HCM sets `server: envoy` on
// every response (server_header_transformation OVERWRITE, server_name
// default; UNVERIFIED here).
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
	hdr.Set("Server", "envoy")
	if d.h1 && !d.requestComplete {
		// A response before the request is complete closes an HTTP/1
		// connection, and the HCM says so: connection: close
		// (ActiveStream::encodeHeaders, remoteDecodeComplete [code]).
		hdr.Set("Connection", "close")
	}
}

// writeReply sends a complete local reply. Without a flush net/http sends
// a bodyless reply as one HEADERS frame with END_STREAM on HTTP/2, which
// is what a gRPC trailers-only reply needs.
func (d *downstream) writeReply(rep LocalReply) {
	if d.started {
		// sendLocalReply after response headers: reset (§3 [code]).
		d.reset()
	}
	d.setHeaders(rep.Headers)
	if rep.CloseConnection && d.h1 {
		d.w.Header().Set("Connection", "close")
	}
	d.w.WriteHeader(rep.Status)
	d.started = true
	if len(rep.Body) > 0 && !d.head {
		if _, err := d.w.Write(rep.Body); err != nil {
			d.log.Debug("write local reply", "err", err)
		}
	}
}

// reset resets the downstream stream: RST_STREAM on HTTP/2, a connection
// close on HTTP/1 (§7 [code]). net/http sends RST_STREAM(INTERNAL_ERROR);
// Envoy's error code is UNVERIFIED (grpc-go reports codes.Internal for
// either). It never returns.
func (d *downstream) reset() {
	if d.h1 {
		// Unblock the body reader so net/http does not wait for the rest
		// of the request while closing.
		_ = d.rc.SetReadDeadline(time.Now())
	}
	panic(http.ErrAbortHandler)
}

// resetAfterResponse ends a complete response whose request is still
// incomplete: HTTP/2 sends RST_STREAM(NO_ERROR) after END_STREAM (net/http
// does so when the handler returns with the request open), HTTP/1 closes
// the connection after the response (§4.8 [test]; the HTTP/2 error code is
// UNVERIFIED).
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
// arrives (§2.7 [code]). The last chunk carries end_of_stream, or
// request_trailers follow when the request has trailers (§2.10 [code]).
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
// (direct_response routes have no RouteAction) (§5.4 [code]).
func (e *Emulator) idleTimeout(route *envoy.Route) time.Duration {
	if route != nil && route.Cluster != "" && route.IdleTimeout > 0 {
		return route.IdleTimeout
	}
	return e.settings.StreamIdleTimeout
}

// isUpgrade is Http::Utility::isUpgrade: a Connection header with the
// "upgrade" token and an Upgrade header.
func isUpgrade(h http.Header) bool {
	return h.Get("Upgrade") != "" && httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade")
}
