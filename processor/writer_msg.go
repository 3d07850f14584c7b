package processor

import (
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// The ext_proc messages the writer sends, and the response headers and
// statuses they carry.

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
