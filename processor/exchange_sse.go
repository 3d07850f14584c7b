package processor

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// sseBinding is the sse-kafka binding an HTTP request without binding
// metadata goes to: the first whose routes match its path, so one Envoy
// route can carry an http-kafka and an sse-kafka binding side by side; or
// the only one when no http-kafka binding is configured (its own 404 then
// says no route matches). nil: the request is http-kafka's.
func (x *exchange) sseBinding(path string, httpBindings int) *route.Binding {
	sse := x.snap.table.OfType(config.SSEKafka)
	for _, b := range sse {
		if b.MatchesPath(path) {
			return b
		}
	}
	if httpBindings == 0 && len(sse) == 1 {
		return sse[0]
	}
	return nil
}

// withCredentials gives a request to an sse-kafka binding the bearer token
// its options say to read from a query parameter or a cookie, as an
// authorization header for the guards: a browser's EventSource cannot set
// one. A request that has an authorization header keeps it. Only matching
// reads the token: the log and the span know the path without its query,
// and never the request's headers.
func withCredentials(headers route.Headers, rawQuery string, o *config.SSEOptions) route.Headers {
	if o == nil || (o.CredentialsQuery == "" && o.CredentialsCookie == "") {
		return headers
	}
	if _, ok := headers.Lookup("authorization"); ok {
		return headers
	}
	token := ""
	if o.CredentialsQuery != "" && rawQuery != "" {
		if q, err := url.ParseQuery(rawQuery); err == nil {
			token = q.Get(o.CredentialsQuery)
		}
	}
	if token == "" && o.CredentialsCookie != "" {
		for _, line := range headers.Values("cookie") {
			if c, err := http.ParseCookie(line); err == nil {
				for _, ck := range c {
					if ck.Name == o.CredentialsCookie && ck.Value != "" {
						token = ck.Value
						break
					}
				}
			}
			if token != "" {
				break
			}
		}
	}
	if token == "" {
		return headers
	}
	out := make(route.Headers, len(headers), len(headers)+1)
	copy(out, headers)
	return append(out, route.Header{Name: "authorization", Value: "Bearer " + token})
}

// runSSE hands a request matched to an sse-kafka route to the SSE handler:
// a stream answered with a StreamedImmediateResponse that lasts as long as
// the handler streams, or the handler's one answer.
func (x *exchange) runSSE(req *handler.HTTPRequest) {
	if x.s.sse == nil {
		x.fail(&failure{http: http.StatusNotImplemented,
			detail: fmt.Sprintf("sse-kafka binding %q has no handler in this processor", req.Match.Binding.Name)})
		x.linger()
		return
	}
	ew := &eventWriter{w: &x.w}
	resp := x.handleSSE(req, ew)
	if x.ctx.Err() != nil {
		return // the client went away: nothing more can be sent
	}
	if ew.started {
		x.logSendErr(x.w.endHTTPStream())
	} else {
		if resp == nil {
			x.failedBecause("the sse-kafka handler neither answered nor streamed")
			resp = handler.ProblemResponse(http.StatusInternalServerError, "the processor failed to answer; see its log")
		}
		x.logSendErr(x.w.answerHTTP(resp))
	}
	x.linger()
}

func (x *exchange) handleSSE(req *handler.HTTPRequest, ew *eventWriter) (resp *handler.HTTPResponse) {
	defer func() {
		if p := recover(); p != nil {
			x.failedBecause(fmt.Sprintf("the sse-kafka handler panicked: %v", p), "stack", string(debug.Stack()))
			resp = nil
		}
		if resp != nil && (resp.Status < 200 || resp.Status > 599) {
			x.failedBecause(fmt.Sprintf("the sse-kafka handler answered an invalid status %d", resp.Status))
			resp = handler.ProblemResponse(http.StatusInternalServerError, "the processor failed to answer; see its log")
		}
	}()
	return x.s.sse.HandleSSE(x.ctx, req, ew)
}

// eventWriter is the handler.EventWriter of an sse-kafka exchange.
type eventWriter struct {
	w       *writer
	started bool
}

// Start implements handler.EventWriter.
func (e *eventWriter) Start(ctx context.Context, headers []route.Header) error {
	if err := e.w.startHTTPStream(ctx, headers); err != nil {
		return err
	}
	e.started = true
	return nil
}

// Send implements handler.EventWriter.
func (e *eventWriter) Send(ctx context.Context, b []byte) error {
	return e.w.sendHTTPChunk(ctx, b)
}

// startHTTPStream sends the headers of a streamed HTTP answer: 200, and no
// content-length, so Envoy frames the body as it comes (chunked on
// HTTP/1.1, DATA frames on HTTP/2).
func (w *writer) startHTTPStream(ctx context.Context, headers []route.Header) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != idle {
		return errHeadersSent
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	hs := responseHeaders(headers)
	hm := make([]*corev3.HeaderValue, 0, len(hs)+1)
	hm = append(hm, hv(":status", strconv.Itoa(http.StatusOK)))
	for _, h := range hs {
		hm = append(hm, hv(h.Name, h.Value))
	}
	w.state = streaming
	return w.send(streamedHeaders(hm, false))
}

// sendHTTPChunk sends bytes of a streamed HTTP answer.
func (w *writer) sendHTTPChunk(ctx context.Context, b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.state == idle:
		return errNotStarted
	case w.state == done:
		return errAnswered
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return w.sendBody(b, false)
}

// endHTTPStream ends a streamed HTTP answer: an empty last chunk.
func (w *writer) endHTTPStream() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != streaming {
		return errAnswered
	}
	w.finish(http.StatusOK, "")
	return w.sendBody(nil, true)
}

// isSSE reports whether a matched request is an sse-kafka binding's.
func isSSE(m *route.Match) bool {
	return m != nil && m.Binding != nil && m.Binding.Type == config.SSEKafka
}
