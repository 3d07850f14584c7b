// Package extproctest builds ext_proc messages for tests: the requests
// Envoy sends a processor, and the answers a processor sends Envoy. The
// processor's tests play Envoy with the first; the emulator's play a
// processor with the second. Header values go in raw_value, the field
// Envoy reads.
package extproctest

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Header is a header with its value in raw_value.
func Header(name, value string) *corev3.HeaderValue {
	return &corev3.HeaderValue{Key: name, RawValue: []byte(value)}
}

// HeaderMap is the headers of kv, name then value; an odd last name is
// dropped.
func HeaderMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, Header(kv[i], kv[i+1]))
	}
	return m
}

// SetHeaders is a header mutation that sets the headers of kv.
func SetHeaders(kv ...string) *extprocv3.HeaderMutation {
	m := &extprocv3.HeaderMutation{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.SetHeaders = append(m.SetHeaders, &corev3.HeaderValueOption{Header: Header(kv[i], kv[i+1])})
	}
	return m
}

// Requests, as Envoy sends them.

// RequestHeaders is a request_headers message; eos marks a request without
// a body.
func RequestHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: HeaderMap(kv...), EndOfStream: eos},
	}}
}

// RequestBody is a request_body chunk; eos marks the last.
func RequestBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos},
	}}
}

// RequestTrailers is a request_trailers message.
func RequestTrailers(kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{Trailers: HeaderMap(kv...)},
	}}
}

// Answers, as a processor sends them.

// Immediate is an ImmediateResponse; code 0 leaves the status unset, and a
// nil grpcStatus the gRPC status.
func Immediate(code int, body string, grpcStatus *uint32, mut *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	ir := &extprocv3.ImmediateResponse{Body: []byte(body), Headers: mut}
	if code != 0 {
		ir.Status = &typev3.HttpStatus{Code: typev3.StatusCode(code)}
	}
	if grpcStatus != nil {
		ir.GrpcStatus = &extprocv3.GrpcStatus{Status: *grpcStatus}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
}

// StreamedHeaders is the headers of a StreamedImmediateResponse.
func StreamedHeaders(eos bool, kv ...string) *extprocv3.ProcessingResponse {
	return streamed(&extprocv3.StreamedImmediateResponse{Response: &extprocv3.StreamedImmediateResponse_HeadersResponse{
		HeadersResponse: &extprocv3.HttpHeaders{Headers: HeaderMap(kv...), EndOfStream: eos},
	}})
}

// StreamedBody is a body chunk of a StreamedImmediateResponse.
func StreamedBody(b []byte, eos bool) *extprocv3.ProcessingResponse {
	return streamed(&extprocv3.StreamedImmediateResponse{Response: &extprocv3.StreamedImmediateResponse_BodyResponse{
		BodyResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos},
	}})
}

// StreamedTrailers is the trailers of a StreamedImmediateResponse.
func StreamedTrailers(kv ...string) *extprocv3.ProcessingResponse {
	return streamed(&extprocv3.StreamedImmediateResponse{Response: &extprocv3.StreamedImmediateResponse_TrailersResponse{
		TrailersResponse: HeaderMap(kv...),
	}})
}

func streamed(r *extprocv3.StreamedImmediateResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_StreamedImmediateResponse{StreamedImmediateResponse: r}}
}
