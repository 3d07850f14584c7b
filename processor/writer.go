package processor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// maxChunk is the largest body_response the processor sends; larger bodies
// are streamed in pieces of this size, which keeps each ext_proc
// message well below gRPC's message limits on Envoy's side.
const maxChunk = 256 << 10

var (
	errAnswered      = errors.New("the exchange has already answered")
	errHeadersSent   = errors.New("response headers already sent")
	errCallEnded     = errors.New("the exchange ended the call")
	errNotGRPCStream = errors.New("not a gRPC exchange")
	errNotStarted    = errors.New("the streamed answer has not started")
)

type writerState uint8

const (
	idle      writerState = iota // nothing sent
	streaming                    // StreamedImmediateResponse headers sent
	done                         // terminal answer sent
)

// writer is the exchange's only path to stream.Send. It serialises sends
// (gRPC streams must not be written concurrently) and enforces the answer
// protocol: replies to request_headers only, one terminal answer, nothing
// after it.
type writer struct {
	mu     sync.Mutex
	stream extprocv3.ExternalProcessor_ProcessServer
	err    error  // first send error
	final  final  // the terminal answer, once state is done
	ctype  string // gRPC response content-type, from the request's
	code   int32  // the terminal answer's HTTP status, or gRPC code when grpc
	grpc   bool
	head   bool // HTTP HEAD: headers only
	closed bool // gRPC: the exchange ended the call; handler writes fail
	state  writerState
}

// final is what the exchange's log and duration say of the terminal
// answer. Its code stays beside the writer's flags, where it takes no word
// of its own: a long poll holds its exchange, writer included, for the
// whole wait.
type final struct {
	at    time.Time // when it was sent
	cause string    // a failed answer's reason (problem detail, gRPC message); "" for a success
}

// finish records the terminal answer as sent now.
func (w *writer) finish(code int32, cause string) {
	w.state, w.code = done, code
	w.final = final{at: time.Now(), cause: cause}
}

// answered reports whether the terminal answer was sent, its status label,
// why it is a failure ("" for a success) and when.
func (w *writer) answered() (status, cause string, at time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != done {
		return "", "", time.Time{}, false
	}
	return w.statusLabel(), w.final.cause, w.final.at, true
}

// statusLabel is the metrics label of the terminal answer's code.
func (w *writer) statusLabel() string {
	if w.grpc {
		return grpcwire.CodeName(codes.Code(w.code))
	}
	return statusLabel(int(w.code))
}

// problemCause is what a failed HTTP answer says of its cause: the detail
// of a problem+json body (the processor's own words, never the request's
// body), else the status text.
func problemCause(r *handler.HTTPResponse) string {
	for _, h := range r.Headers {
		if h.Name == "content-type" && h.Value == "application/problem+json" {
			var p handler.Problem
			if json.Unmarshal(r.Body, &p) == nil && p.Detail != "" {
				return p.Detail
			}
		}
	}
	return http.StatusText(r.Status)
}

func (w *writer) send(r *extprocv3.ProcessingResponse) error {
	if w.err != nil {
		return w.err
	}
	if err := w.stream.Send(r); err != nil {
		w.err = err
		return err
	}
	return nil
}

// --- HTTP ---

// answerHTTP sends the terminal answer of an HTTP exchange: an
// ImmediateResponse, or a StreamedImmediateResponse when the body is above
// maxChunk or the status is one Envoy's HttpStatus enum does not define.
func (w *writer) answerHTTP(r *handler.HTTPResponse) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != idle {
		return errAnswered
	}
	var cause string
	if r.Status >= 400 {
		cause = problemCause(r)
	}
	w.finish(int32(r.Status), cause)
	headers := responseHeaders(r.Headers)
	if len(r.Body) <= maxChunk && definedStatus(r.Status) {
		return w.send(immediateHTTP(r.Status, headers, r.Body))
	}
	noBody := w.head || len(r.Body) == 0 || r.Status == 204 || r.Status == 304
	hm := make([]*corev3.HeaderValue, 0, len(headers)+2)
	hm = append(hm, hv(":status", strconv.Itoa(r.Status)))
	for _, h := range headers {
		hm = append(hm, hv(h.Name, h.Value))
	}
	if r.Status != 204 && r.Status != 304 {
		hm = append(hm, hv("content-length", strconv.Itoa(len(r.Body))))
	}
	if err := w.send(streamedHeaders(hm, noBody)); err != nil || noBody {
		return err
	}
	return w.sendBody(r.Body, true)
}

// --- gRPC (handler.ResponseWriter for the handler, plus the terminal) ---

// SendHeader implements handler.ResponseWriter.
func (w *writer) SendHeader(ctx context.Context, md []route.Header) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(ctx); err != nil {
		return err
	}
	if w.state != idle {
		return errHeadersSent
	}
	return w.grpcHeaders(md)
}

// Send implements handler.ResponseWriter.
func (w *writer) Send(ctx context.Context, msg []byte) error {
	return w.SendFramed(ctx, grpcwire.Frame(msg))
}

// SendFramed implements handler.ResponseWriter.
func (w *writer) SendFramed(ctx context.Context, frames []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(ctx); err != nil {
		return err
	}
	if w.state == idle {
		if err := w.grpcHeaders(nil); err != nil {
			return err
		}
	}
	return w.sendBody(frames, false)
}

func (w *writer) usable(ctx context.Context) error {
	switch {
	case !w.grpc:
		return errNotGRPCStream
	case w.closed:
		return errCallEnded
	case w.state == done:
		return errAnswered
	}
	return ctx.Err()
}

func (w *writer) grpcHeaders(md []route.Header) error {
	hm := make([]*corev3.HeaderValue, 0, len(md)+2)
	hm = append(hm, hv(":status", "200"), hv("content-type", w.ctype))
	for _, h := range responseHeaders(md) {
		if h.Name == "content-type" {
			continue
		}
		hm = append(hm, hv(h.Name, h.Value))
	}
	w.state = streaming
	return w.send(streamedHeaders(hm, false))
}

// finishGRPC sends the terminal answer of a gRPC exchange and closes the
// call to the handler: trailers after streamed headers; before them, a
// success still streams (headers, then trailers: an ImmediateResponse can
// only be a trailers-only reply, with no message) and an error is an
// ImmediateResponse with grpc_status (Envoy turns it into a trailers-only
// reply whose grpc-message is the percent-encoded body).
func (w *writer) finishGRPC(st handler.Status) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.state == done {
		return errAnswered
	}
	state := w.state
	var cause string
	if st.Code != codes.OK {
		cause = cmp.Or(st.Message, grpcwire.CodeName(st.Code))
	}
	w.finish(int32(st.Code), cause)
	if state == idle && st.Code != codes.OK {
		return w.send(immediate(&extprocv3.ImmediateResponse{
			Status:     &typev3.HttpStatus{Code: typev3.StatusCode_OK}, // Envoy forces 200 for gRPC
			Headers:    mutation(grpcTrailers(st.Trailers)),
			Body:       []byte(st.Message),
			GrpcStatus: &extprocv3.GrpcStatus{Status: uint32(st.Code)},
			Details:    "kafka_ext_proc",
		}))
	}
	if state == idle {
		if err := w.grpcHeaders(nil); err != nil {
			return err
		}
	}
	tm := make([]*corev3.HeaderValue, 0, len(st.Trailers)+2)
	tm = append(tm, hv("grpc-status", strconv.Itoa(int(st.Code))))
	if st.Message != "" {
		tm = append(tm, hv("grpc-message", grpcwire.EncodeMessage(st.Message)))
	}
	for _, h := range grpcTrailers(st.Trailers) {
		tm = append(tm, hv(h.Name, h.Value))
	}
	return w.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_StreamedImmediateResponse{
		StreamedImmediateResponse: &extprocv3.StreamedImmediateResponse{Response: &extprocv3.StreamedImmediateResponse_TrailersResponse{
			TrailersResponse: &corev3.HeaderMap{Headers: tm},
		}},
	}})
}

// grpcTrailers drops what the exchange sets itself from handler trailers.
func grpcTrailers(in []route.Header) []route.Header {
	out := make([]route.Header, 0, len(in))
	for _, h := range responseHeaders(in) {
		if h.Name != "grpc-status" && h.Name != "grpc-message" && h.Name != "content-type" {
			out = append(out, h)
		}
	}
	return out
}

// sendBody sends body in body_responses of at most maxChunk bytes; eos marks
// the last one end_of_stream (HTTP only: gRPC always ends with trailers).
func (w *writer) sendBody(body []byte, eos bool) error {
	for {
		n := min(len(body), maxChunk)
		last := n == len(body)
		if err := w.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_StreamedImmediateResponse{
			StreamedImmediateResponse: &extprocv3.StreamedImmediateResponse{Response: &extprocv3.StreamedImmediateResponse_BodyResponse{
				BodyResponse: &extprocv3.StreamedBodyResponse{Body: body[:n], EndOfStream: eos && last},
			}},
		}}); err != nil {
			return err
		}
		if last {
			return nil
		}
		body = body[n:]
	}
}
