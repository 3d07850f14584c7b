package grpckafka

import (
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// Metadata travels through Kafka as `meta:<name>` headers, as the reference
// implementation writes and reads them: request metadata on request
// records; response metadata from the first record a call sends (fetch: the
// first history record; produce: the first reply record), trailing metadata
// from a produce call's terminal reply. Binary metadata keeps its -bin name
// and its base64 value as sent on the wire.

const metaPrefix = "meta:"

// requestMeta turns request metadata into `meta:*` record headers: all of it
// but pseudo-headers, grpc-*, te, content-type, user-agent and authorization
// (transport and credentials, not call data; the reference's list), the
// other credentials (cookie, proxy-authorization: secrets never reach a
// record), and what the proxy adds about itself (x-envoy-*, x-forwarded-*).
// x-request-id stays: it lets a responder's logs meet Envoy's.
func requestMeta(hs route.Headers) []client.Header {
	var out []client.Header
	for _, h := range hs {
		if !forwardedMeta(h.Name) {
			continue
		}
		out = append(out, client.Header{Key: metaPrefix + h.Name, Value: []byte(h.Value)})
	}
	return out
}

func forwardedMeta(name string) bool {
	switch {
	case name == "" || name[0] == ':',
		strings.HasPrefix(name, "grpc-"),
		strings.HasPrefix(name, "x-envoy-"),
		strings.HasPrefix(name, "x-forwarded-"):
		return false
	}
	switch name {
	case "te", "content-type", "user-agent", "authorization", "cookie", "proxy-authorization", "content-length":
		return false
	}
	return true
}

// metadataOf turns the `meta:*` headers of a record into response metadata.
// Names are lower-cased; names and values gRPC cannot carry, names the
// transport owns, and request-only names (route.RequestOnly: a reply that is
// the request record itself would send x-request-id and origin back) are
// left out.
func metadataOf(hs []client.Header) []route.Header {
	var out []route.Header
	for _, h := range hs {
		name, ok := strings.CutPrefix(h.Key, metaPrefix)
		if !ok {
			continue
		}
		name = strings.ToLower(name)
		if !validMetadata(name, h.Value) {
			continue
		}
		out = append(out, route.Header{Name: name, Value: string(h.Value)})
	}
	return out
}

func validMetadata(name string, value []byte) bool {
	if name == "" || !httpguts.ValidHeaderFieldName(name) || !forwardedMeta(name) || route.RequestOnly(name) {
		return false
	}
	switch name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "trailer", "host":
		return false
	}
	for _, c := range value {
		// Printable ASCII only (gRPC's rule for ASCII metadata; -bin values are base64).
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
