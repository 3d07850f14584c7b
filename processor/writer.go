package processor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// maxChunk is the largest body_response the processor sends; larger bodies
// are streamed in pieces of this size (DESIGN §3), which keeps each ext_proc
// message well below gRPC's message limits on Envoy's side.
const maxChunk = 256 << 10

var (
	errAnswered      = errors.New("the exchange has already answered")
	errHeadersSent   = errors.New("response headers already sent")
	errCallEnded     = errors.New("the exchange ended the call")
	errNotGRPCStream = errors.New("not a gRPC exchange")
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
	ctype  string    // gRPC response content-type
	cause  string    // a failed answer's reason (problem detail, gRPC message), for the log
	at     time.Time // when the terminal answer was sent
	err    error     // first send error
	code   int32     // the terminal answer's HTTP status, or gRPC code when grpc
	grpc   bool
	head   bool // HTTP HEAD: headers only
	closed bool // gRPC: the exchange ended the call; handler writes fail
	state  writerState
}

// answered reports whether the terminal answer was sent, its status label,
// why it is a failure ("" for a success) and when.
func (w *writer) answered() (status, cause string, at time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != done {
		return "", "", time.Time{}, false
	}
	return w.statusLabel(), w.cause, w.at, true
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
func problemCause(r *capability.HTTPResponse) string {
	for _, h := range r.Headers {
		if h.Name == "content-type" && h.Value == "application/problem+json" {
			var p capability.Problem
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
func (w *writer) answerHTTP(r *capability.HTTPResponse) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != idle {
		return errAnswered
	}
	w.state, w.at = done, time.Now()
	w.code = int32(r.Status)
	if r.Status >= 400 {
		w.cause = problemCause(r)
	}
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

// definedStatus reports whether ImmediateResponse can carry the status:
// Envoy's HttpStatus enum lists the registered codes only.
func definedStatus(code int) bool {
	return code >= 200 && code < len(definedStatuses) && definedStatuses[code]
}

// definedStatuses are the codes of Envoy's HttpStatus enum up to 599, read
// once: every answer asks, and a look-up in the enum's name map hashed the
// code each time.
var definedStatuses = func() (t [600]bool) {
	for code := range typev3.StatusCode_name {
		if code >= 0 && int(code) < len(t) {
			t[code] = true
		}
	}
	return t
}()

// hopByHop reports response headers the exchange owns or the connection does.
func hopByHop(name string) bool {
	switch name {
	case "content-length", "transfer-encoding", "connection", "keep-alive",
		"upgrade", "te", "trailer", "proxy-connection":
		return true
	}
	return false
}

// statusLabels are the HTTP statuses' decimal forms, so that labelling an
// answer (every exchange does) allocates nothing.
var statusLabels = func() (t [600]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

func statusLabel(code int) string {
	if code >= 0 && code < len(statusLabels) {
		return statusLabels[code]
	}
	return strconv.Itoa(code)
}

// responseHeaders lower-cases names and drops pseudo-headers and the headers
// the exchange or the connection owns. It returns in itself when nothing
// needs either, as handlers' headers usually do not: callers only read it.
func responseHeaders(in []route.Header) []route.Header {
	clean := true
	for _, h := range in {
		if h.Name == "" || h.Name[0] == ':' || hopByHop(h.Name) || lower(h.Name) != h.Name {
			clean = false
			break
		}
	}
	if clean {
		return in
	}
	out := make([]route.Header, 0, len(in))
	for _, h := range in {
		name := strings.ToLower(h.Name)
		if name == "" || name[0] == ':' || hopByHop(name) {
			continue
		}
		out = append(out, route.Header{Name: name, Value: h.Value})
	}
	return out
}

// --- gRPC (capability.ResponseWriter for the handler, plus the terminal) ---

// SendHeader implements capability.ResponseWriter.
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

// Send implements capability.ResponseWriter.
func (w *writer) Send(ctx context.Context, msg []byte) error {
	return w.SendFramed(ctx, grpcwire.Frame(msg))
}

// SendFramed implements capability.ResponseWriter.
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
// success still streams (headers, then trailers: DESIGN §3) and an error is
// an ImmediateResponse with grpc_status (Envoy turns it into a trailers-only
// reply whose grpc-message is the percent-encoded body).
func (w *writer) finishGRPC(st capability.Status) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.state == done {
		return errAnswered
	}
	state := w.state
	w.state, w.at = done, time.Now()
	w.code = int32(st.Code)
	if st.Code != codes.OK {
		w.cause = st.Message
		if w.cause == "" {
			w.cause = grpcwire.CodeName(st.Code)
		}
	}
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

// --- ext_proc message helpers ---

func hv(name, value string) *corev3.HeaderValue {
	return &corev3.HeaderValue{Key: name, RawValue: []byte(value)} // Envoy reads raw_value only
}

func immediate(ir *extprocv3.ImmediateResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
}

func streamedHeaders(hm []*corev3.HeaderValue, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_StreamedImmediateResponse{
		StreamedImmediateResponse: &extprocv3.StreamedImmediateResponse{Response: &extprocv3.StreamedImmediateResponse_HeadersResponse{
			HeadersResponse: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hm}, EndOfStream: eos},
		}},
	}}
}

// immediateMsg is the messages of an HTTP ImmediateResponse answer in one
// allocation, with room for two headers (a fetch's content-type and etag, a
// problem's content-type and one more) and their bytes: built apart they
// were nine allocations per answer, of about the same bytes (768 B). More
// headers or bytes take allocations of their own. Answers with one header
// (a reply's content-type) or none (a oneway write's 204) take the smaller
// immediateMsg1 and immediateBase: every answer's bytes are zeroed and
// then scanned by the collector. The room for the values' bytes is sized
// so that each type, with the 8-byte header the runtime puts before an
// object of more than 512 B with pointers, fills its size class: 768 B
// and 576 B (they took 896 B and 640 B with 8 bytes more).
type immediateMsg struct {
	immediateBase
	mut  extprocv3.HeaderMutation
	set  [2]*corev3.HeaderValueOption
	opts [2]corev3.HeaderValueOption
	vals [2]corev3.HeaderValue
	raw  [72]byte
}

// immediateMsg1 is immediateMsg with room for one header.
type immediateMsg1 struct {
	immediateBase
	mut  extprocv3.HeaderMutation
	set  [1]*corev3.HeaderValueOption
	opts [1]corev3.HeaderValueOption
	vals [1]corev3.HeaderValue
	raw  [48]byte
}

// immediateBase is the messages of every ImmediateResponse answer.
type immediateBase struct {
	resp  extprocv3.ProcessingResponse
	oneof extprocv3.ProcessingResponse_ImmediateResponse
	ir    extprocv3.ImmediateResponse
	st    typev3.HttpStatus
}

// immediateHTTP is the ImmediateResponse of an HTTP answer.
func immediateHTTP(code int, hs []route.Header, body []byte) *extprocv3.ProcessingResponse {
	var m *immediateBase
	switch {
	case len(hs) == 0:
		m = new(immediateBase)
	case len(hs) == 1:
		a := new(immediateMsg1)
		fillMutation(&a.mut, a.set[:0], a.opts[:], a.vals[:], a.raw[:0], hs)
		m = &a.immediateBase
		m.ir.Headers = &a.mut
	default:
		a := new(immediateMsg)
		fillMutation(&a.mut, a.set[:0], a.opts[:], a.vals[:], a.raw[:0], hs)
		m = &a.immediateBase
		m.ir.Headers = &a.mut
	}
	m.st.Code = typev3.StatusCode(code)
	m.ir.Status = &m.st
	m.ir.Body = body
	m.ir.Details = "kafka_ext_proc"
	m.oneof.ImmediateResponse = &m.ir
	m.resp.Response = &m.oneof
	return &m.resp
}

// mutation renders headers for an ImmediateResponse.
func mutation(hs []route.Header) *extprocv3.HeaderMutation {
	if len(hs) == 0 {
		return nil
	}
	m := &extprocv3.HeaderMutation{}
	fillMutation(m, nil, nil, nil, nil, hs)
	return m
}

// fillMutation sets m's headers, using set, opts, vals and raw as storage
// where they are large enough. Envoy overwrites by default; a repeated name
// is appended so every value survives.
func fillMutation(m *extprocv3.HeaderMutation, set []*corev3.HeaderValueOption, opts []corev3.HeaderValueOption,
	vals []corev3.HeaderValue, raw []byte, hs []route.Header) {
	// One allocation each for the options, the values and their bytes, not
	// three per header: every answer carries several.
	if len(opts) < len(hs) {
		opts = make([]corev3.HeaderValueOption, len(hs))
		vals = make([]corev3.HeaderValue, len(hs))
	}
	n := 0
	for _, h := range hs {
		n += len(h.Value)
	}
	if cap(raw) < n {
		raw = make([]byte, 0, n)
	}
	if cap(set) < len(hs) {
		set = make([]*corev3.HeaderValueOption, 0, len(hs))
	}
	for i, h := range hs {
		start := len(raw)
		raw = append(raw, h.Value...)
		vals[i].Key, vals[i].RawValue = h.Name, raw[start:len(raw):len(raw)] // Envoy reads raw_value only
		o := &opts[i]
		o.Header = &vals[i]
		for _, prev := range hs[:i] {
			if prev.Name == h.Name {
				//nolint:staticcheck // SA1019: Envoy's ext_proc reads the deprecated append only (mutation_utils.cc), not append_action.
				o.Append = wrapperspb.Bool(true)
				break
			}
		}
		set = append(set, o)
	}
	m.SetHeaders = set
}
