package processor

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

func (x *exchange) runHTTP(rh *extprocv3.HttpHeaders, headers route.Headers, md metadataMap, b *route.Binding) error {
	method, rawPath := headers.Get(":method"), headers.Get(":path")
	if method == http.MethodConnect && rawPath == "" {
		return x.failAndLinger(connectFailure())
	}
	if method == "" || rawPath == "" {
		return x.failAndLinger(&failure{http: http.StatusBadRequest, detail: "the request has no :method or :path"})
	}
	p, query := route.SplitPath(rawPath)
	matchHeaders := headers
	if b.Config.Type == config.SSEKafka {
		matchHeaders = withCredentials(headers, query, b.Config.SSE)
	}
	m, err := b.MatchHTTP(x.ctx, &route.HTTPRequest{Method: method, Path: p, Headers: matchHeaders, Metadata: md}, x.s.guards)
	if err != nil {
		if x.ctx.Err() != nil {
			return nil
		}
		return x.failAndLinger(routeFailure(err, method+" "+p))
	}
	x.matched(m, headers)

	limit := x.snap.limits.MaxBody
	size, f := declaredSize(headers, limit)
	if f != nil {
		return x.failAndLinger(f)
	}
	body, trailers, f, gone := x.readBody(rh.GetEndOfStream(), size, limit)
	switch {
	case gone:
		return nil
	case f != nil:
		return x.failAndLinger(f)
	}

	req := &handler.HTTPRequest{
		Method: method, Path: p, RawQuery: query, Authority: headers.Get(":authority"),
		Headers: headers, Trailers: trailers, Body: body,
		Match: m, Limits: x.snap.limits, Drain: x.s.drain,
	}
	if isSSE(m) {
		x.runSSE(req)
		return nil
	}
	resp := x.handleHTTP(req)
	if x.ctx.Err() != nil {
		return nil // the client went away while the handler worked
	}
	x.logSendErr(x.w.answerHTTP(resp))
	x.linger()
	return nil
}

// declaredSize is the request's content-length, 0 when it has none, and
// the answer when it declares a body above limit.
func declaredSize(headers route.Headers, limit int64) (int, *failure) {
	v, ok := headers.Lookup("content-length")
	if !ok {
		return 0, nil
	}
	cl, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		return 0, nil // not a length: the body's own end tells
	case cl > limit:
		return 0, tooLarge(limit)
	}
	return int(max(cl, 0)), nil
}

// readBody reads the request's body and trailers until Envoy has sent the
// whole request; ended is whether it already had. size is the declared
// length, the body's buffer when it comes in several chunks. f is the
// answer when the body cannot be had whole; gone reports that the client
// went away, which nobody is left to answer.
//
// This wait is the client's upload, not a long wait of ours, so it does not
// end on drain: a request that completes within the grace period is
// answered; one that does not is cut when the gRPC server stops.
func (x *exchange) readBody(ended bool, size int, limit int64) (body []byte, trailers route.Headers, f *failure, gone bool) {
	for !ended {
		msg, ok := x.next()
		if !ok {
			if x.clientGone() {
				return nil, nil, nil, true
			}
			return nil, nil, &failure{http: http.StatusBadRequest, detail: "the request ended before its body was complete"}, false
		}
		switch r := msg.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestBody:
			ended = r.RequestBody.GetEndOfStream()
			x.reqEnded = ended
			chunk := r.RequestBody.GetBody()
			if int64(len(body))+int64(len(chunk)) > limit {
				return nil, nil, tooLarge(limit), false
			}
			body = appendChunk(body, chunk, size, ended)
		case *extprocv3.ProcessingRequest_RequestTrailers:
			trailers = headerList(r.RequestTrailers.GetTrailers())
			ended = true
			x.reqEnded = true
		default:
			x.logger().Warn("unexpected ext_proc message while reading the request body; ignored", "got", messageKind(msg))
		}
	}
	return body, trailers, nil, false
}

// appendChunk adds a chunk of the request's body to what came before it.
func appendChunk(body, chunk []byte, size int, last bool) []byte {
	switch {
	case len(chunk) == 0:
		return body
	case body == nil && last:
		// The whole body in one chunk, as Envoy sends a small one: the
		// message's own bytes (unmarshalling copied them out of gRPC's
		// buffer), which nothing else holds or changes, so not copied again.
		return chunk
	case body == nil:
		return append(make([]byte, 0, max(size, len(chunk))), chunk...)
	default:
		return append(body, chunk...)
	}
}

// tooLarge is the answer to a body above limits.max-body, built only when
// sent: formatting it for every request cost an allocation each.
func tooLarge(limit int64) *failure {
	return &failure{http: http.StatusRequestEntityTooLarge,
		detail: fmt.Sprintf("the request body is larger than limits.max-body (%d bytes); send a smaller body", limit)}
}

func (x *exchange) handleHTTP(req *handler.HTTPRequest) (resp *handler.HTTPResponse) {
	defer func() {
		if p := recover(); p != nil {
			x.failedBecause(fmt.Sprintf("the http-kafka handler panicked: %v", p), "stack", string(debug.Stack()))
			resp = nil
		}
		if resp == nil {
			resp = handler.ProblemResponse(http.StatusInternalServerError, "the processor failed to answer; see its log")
		} else if resp.Status < 200 || resp.Status > 599 {
			x.failedBecause(fmt.Sprintf("the http-kafka handler answered an invalid status %d", resp.Status))
			resp = handler.ProblemResponse(http.StatusInternalServerError, "the processor failed to answer; see its log")
		}
	}()
	return x.s.http.HandleHTTP(x.ctx, req)
}
