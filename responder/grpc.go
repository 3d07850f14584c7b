package responder

import (
	"context"
	"strconv"
	"strings"
)

// gRPC calls through a grpc-kafka produce route arrive as one record per
// request message and a null-value record when the client half-closes, all
// with the call's correlation id (docs/design.md#grpc-kafka-produce). The
// gateway answers the call with the reply records of that id: each record
// with a value is a response message, and a null-value record ends the call
// with the binding's status header (0 = OK) and message header.

// GRPC reply header names a handler writes on the terminal reply; the
// responder writes them under Options.StatusHeader and MessageHeader, the
// names the binding reads (these by default).
const (
	GRPCStatusHeader  = "gateway:status"
	GRPCMessageHeader = "gateway:message"
)

// GRPCReply is a response message of a gRPC call; headers may carry
// `meta:<name>` response metadata (read from the first reply).
func GRPCReply(value []byte, headers ...Header) Reply {
	if value == nil {
		value = []byte{} // an empty message, not the end of the call
	}
	return Reply{Headers: headers, Value: value}
}

// GRPCEnd is the terminal reply of a gRPC call: its status code and
// message (empty: none).
func GRPCEnd(code int, message string) Reply {
	hs := []Header{{Key: GRPCStatusHeader, Value: []byte(strconv.Itoa(code))}}
	if message != "" {
		hs = append(hs, Header{Key: GRPCMessageHeader, Value: []byte(message)})
	}
	return Reply{Headers: hs}
}

// GRPCEcho answers every gRPC call with the echo of each request message
// (the same bytes, so the response is the request message, whatever its
// type) and ends it OK when the client half-closes. The `meta:*` headers of
// a request record are copied onto its echo, so the caller's metadata comes
// back as response metadata; those Envoy added (x-request-id,
// x-forwarded-*, x-envoy-*) are not: they describe the request's way in,
// and a client would take them for the server's.
func GRPCEcho() Handler {
	return func(_ context.Context, req *Request) ([]Reply, error) {
		if req.Value == nil {
			return []Reply{GRPCEnd(0, "")}, nil
		}
		var meta []Header
		for _, h := range req.Headers {
			if name, ok := strings.CutPrefix(h.Key, "meta:"); ok && !proxyAdded(name) && name != "idempotency-key" {
				meta = append(meta, h)
			}
		}
		return []Reply{GRPCReply(req.Value, meta...)}, nil
	}
}

// GRPCDedupKey is Options.DedupKey for gRPC calls: a call is several
// records with one correlation id, so the default (the correlation id)
// would answer only its first message. No record is taken as a duplicate:
// an echo written twice is harmless, as the gateway ends a call at its
// first terminal reply and never produces a replay it has a reply for.
func GRPCDedupKey(*Request) string { return "" }

// proxyAdded reports request headers Envoy adds or owns.
func proxyAdded(name string) bool {
	return name == "x-request-id" || strings.HasPrefix(name, "x-forwarded-") || strings.HasPrefix(name, "x-envoy-")
}
