package processor

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// ext_proc message helpers.

type metadataMap = map[string]*structpb.Struct

// headerList converts ext_proc headers (values in raw_value; value is read
// only when raw_value is empty, for clients older than Envoy's).
func headerList(hm *corev3.HeaderMap) route.Headers {
	hs := hm.GetHeaders()
	out := make(route.Headers, 0, len(hs))
	// Envoy sends raw values: copied into one string that every value is a
	// slice of, one allocation per request instead of one per header.
	n := 0
	for _, h := range hs {
		n += len(h.GetRawValue())
	}
	var b strings.Builder
	b.Grow(n)
	for _, h := range hs {
		b.Write(h.GetRawValue())
	}
	raw := b.String()
	for _, h := range hs {
		k := len(h.GetRawValue())
		v := raw[:k]
		raw = raw[k:]
		if v == "" {
			v = h.GetValue()
		}
		out = append(out, route.Header{Name: lower(h.GetKey()), Value: v})
	}
	return out
}

// lower lower-cases a header name, allocating only if needed (Envoy already
// sends lower-case names).
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

func messageKind(m *extprocv3.ProcessingRequest) string {
	switch m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return "request_trailers"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body"
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return "response_trailers"
	default:
		return "empty"
	}
}
