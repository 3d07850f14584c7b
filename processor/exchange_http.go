package processor

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
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
	m, err := b.MatchHTTP(x.ctx, &route.HTTPRequest{Method: method, Path: p, Headers: headers, Metadata: md}, x.s.guards)
	if err != nil {
		if x.ctx.Err() != nil {
			return nil
		}
		return x.failAndLinger(routeFailure(err, method+" "+p))
	}
	x.matched(m, headers)

	limit := x.snap.limits.MaxBody
	var body []byte
	size := 0 // the content-length: the body's buffer when it comes in several chunks
	if v, ok := headers.Lookup("content-length"); ok {
		if cl, err := strconv.ParseInt(v, 10, 64); err == nil && cl > limit {
			return x.failAndLinger(tooLarge(limit))
		} else if err == nil && cl > 0 {
			size = int(cl)
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
			ended = r.RequestBody.GetEndOfStream()
			x.reqEnded = ended
			chunk := r.RequestBody.GetBody()
			if int64(len(body))+int64(len(chunk)) > limit {
				return x.failAndLinger(tooLarge(limit))
			}
			switch {
			case len(chunk) == 0:
			case body == nil && ended:
				// The whole body in one chunk, as Envoy sends a small one:
				// the message's own bytes (unmarshalling copied them out of
				// gRPC's buffer), which nothing else holds or changes, so
				// not copied again.
				body = chunk
			case body == nil:
				body = append(make([]byte, 0, max(size, len(chunk))), chunk...)
			default:
				body = append(body, chunk...)
			}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			trailers = headerList(r.RequestTrailers.GetTrailers())
			ended = true
			x.reqEnded = true
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

// tooLarge is the answer to a body above limits.max-body, built only when
// sent: formatting it for every request cost an allocation each.
func tooLarge(limit int64) *failure {
	return &failure{http: http.StatusRequestEntityTooLarge,
		detail: fmt.Sprintf("the request body is larger than limits.max-body (%d bytes); send a smaller body", limit)}
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
