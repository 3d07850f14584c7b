package httpkafka

import (
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// A reply that is the request record itself (reply-to = the request topic)
// answers with the headers a server says, not the request's own.
func TestReplyLeavesRequestOnlyHeadersOut(t *testing.T) {
	rec := &client.Record{Value: []byte("{}"), Headers: []client.Header{
		{Key: ":method", Value: []byte("POST")}, {Key: "x-request-id", Value: []byte("r")},
		{Key: "origin", Value: []byte("http://a")}, {Key: "if-none-match", Value: []byte(`"x"`)},
		{Key: "accept-language", Value: []byte("en")}, {Key: "idempotency-key", Value: []byte("k")},
		{Key: "x-custom", Value: []byte("v")}, {Key: "content-type", Value: []byte("application/json")},
	}}
	r := replyResponse(rec)
	if len(r.Headers) != 2 || r.Headers[0].Name != "x-custom" || r.Headers[1].Name != "content-type" {
		t.Errorf("headers %v, want x-custom and content-type only", r.Headers)
	}
}
