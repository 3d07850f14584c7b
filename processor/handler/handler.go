// Package handler is the contract between the exchange (package processor)
// and the bindings' handlers that answer matched routes (packages httpkafka,
// grpckafka and ssekafka): what a handler is given and how it answers.
//
// The exchange owns the ext_proc stream. It matches the route, collects or
// reassembles the request, and writes every ext_proc message; a handler never
// sees Envoy's protocol. HTTP handlers return one response; gRPC handlers
// read request messages as they complete, may stream response messages, and
// return the final status. Either way the exchange sends exactly one
// terminal answer.
//
// Handlers must return promptly once ctx is done (the client went away, or the
// exchange ended the call), and should end long waits when Drain is done (the
// process is draining: answer with the current state).
package handler

import (
	"context"
	"encoding/json"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// HTTPHandler answers requests matched to http-kafka routes.
type HTTPHandler interface {
	// HandleHTTP is called once the whole request body has arrived. It returns
	// the response; nil is answered with 500.
	HandleHTTP(ctx context.Context, req *HTTPRequest) *HTTPResponse
}

// HTTPRequest is a complete HTTP request matched to a route.
type HTTPRequest struct {
	// Method as sent. HEAD reaches GET conditions of fetch routes: answer as
	// for GET; the exchange drops the body (keeping content-length).
	Method    string
	Path      string // :path without the query string
	RawQuery  string // the query string without '?'
	Authority string // :authority
	// Headers are every request header in arrival order (lower-case names,
	// pseudo-headers included).
	Headers  route.Headers
	Trailers route.Headers // request trailers, if any
	Body     []byte        // at most Limits.MaxBody bytes
	// Match is the route taken: binding, route, path parameters, guard identities.
	Match *route.Match
	// Limits of the configuration the exchange started with.
	Limits config.Limits
	// Drain is done when the process drains; long waits end then,
	// answering with what they have (docs/design.md#drain).
	Drain context.Context
}

// HTTPResponse is a synthesized HTTP response.
type HTTPResponse struct {
	Status int // 200–599
	// Headers are lower-case names without pseudo-headers. content-length is
	// computed by the exchange; hop-by-hop headers are dropped.
	Headers []route.Header
	Body    []byte
}

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// ProblemResponse renders an application/problem+json response. The type is
// about:blank and the title the status text: per RFC 9457 §4.2.1 the problem
// means no more than its status, and detail says, on one line, what to do.
func ProblemResponse(status int, detail string, headers ...route.Header) *HTTPResponse {
	return TypedProblemResponse(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}, headers...)
}

// TypedProblemResponse renders p (p.Status is the response status).
func TypedProblemResponse(p Problem, headers ...route.Header) *HTTPResponse {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	body, _ := json.Marshal(p) // cannot fail: strings and an int
	h := make([]route.Header, 0, 1+len(headers))
	h = append(h, route.Header{Name: "content-type", Value: "application/problem+json"})
	h = append(h, headers...)
	return &HTTPResponse{Status: p.Status, Headers: h, Body: body}
}

// SSEHandler answers requests matched to sse-kafka routes: event streams.
type SSEHandler interface {
	// HandleSSE is called once the whole request has arrived. Before it
	// starts the stream (out.Start) it may answer with a response instead
	// (an error: 400, 404, 406, ...), which it returns; once started, the
	// stream is the answer and it returns nil when the stream ends (the
	// client went away, the drain, a lag budget), and the exchange ends the
	// response. A nil return without a start is answered with 500.
	HandleSSE(ctx context.Context, req *HTTPRequest, out EventWriter) *HTTPResponse
}

// EventWriter streams an HTTP response body as it is made. It is safe for
// concurrent use: each call's bytes go out whole, one call after another
// (a heartbeat may go between two sends of events, never inside one).
type EventWriter interface {
	// Start sends status 200 and headers (lower-case names; content-length
	// and hop-by-hop headers are dropped: the body's length is unknown).
	Start(ctx context.Context, headers []route.Header) error
	// Send sends bytes of the body now.
	Send(ctx context.Context, b []byte) error
}

// GRPCHandler answers calls matched to grpc-kafka routes.
type GRPCHandler interface {
	// HandleGRPC is called when the request headers have arrived; request
	// messages arrive through call.In while it runs. It returns the final
	// status, which the exchange sends as trailers (or as a trailers-only
	// response when nothing was sent). If the exchange ends the call itself
	// (a bad request frame, a message over the limit, the client half-closing
	// mid-message), ctx is cancelled, Recv and Send fail, and the returned
	// status is ignored.
	HandleGRPC(ctx context.Context, call *GRPCCall) Status
}

// GRPCCall is one gRPC call matched to a route.
type GRPCCall struct {
	Service string // "pkg.Service"
	Method  string // "Method"
	// Headers is the request metadata in arrival order (lower-case names,
	// pseudo-headers included; -bin values still base64-encoded).
	Headers route.Headers
	Match   *route.Match
	Limits  config.Limits
	Drain   context.Context

	In  MessageReader
	Out ResponseWriter
}

// MessageReader yields request messages as they complete.
type MessageReader interface {
	// Recv returns the next request message (without its prefix; owned by the
	// caller), io.EOF once the client half-closed, or the error that ended
	// the request stream.
	Recv(ctx context.Context) ([]byte, error)
}

// ResponseWriter streams the response. It is safe for use by one goroutine at
// a time; the exchange serialises it with its own writes.
type ResponseWriter interface {
	// SendHeader sends the response headers (metadata) now. It may be called
	// once, before any message; Send sends empty headers implicitly.
	SendHeader(ctx context.Context, md []route.Header) error
	// Send frames one message and sends it.
	Send(ctx context.Context, msg []byte) error
	// SendFramed sends bytes holding one or more complete length-prefixed
	// messages, e.g. live-tail frames encoded once and shared by many calls.
	SendFramed(ctx context.Context, frames []byte) error
}

// Status is the outcome of a gRPC call.
type Status struct {
	Code    codes.Code
	Message string // sent percent-encoded in grpc-message
	// Trailers are extra trailing metadata (lower-case names).
	Trailers []route.Header
}

// OK is the status of a successful call.
func OK() Status { return Status{Code: codes.OK} }

// NewStatus is a status with a message.
func NewStatus(code codes.Code, message string) Status { return Status{Code: code, Message: message} }
