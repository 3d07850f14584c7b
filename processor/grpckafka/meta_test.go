package grpckafka

import (
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// A reply that is the request record itself (reply-to = the request topic)
// gives back the caller's metadata, not what only a request means.
func TestMetadataOfLeavesRequestOnlyOut(t *testing.T) {
	md := metadataOf([]client.Header{
		{Key: "meta:x-request-id", Value: []byte("r")}, {Key: "meta:origin", Value: []byte("http://a")},
		{Key: "meta:idempotency-key", Value: []byte("k")}, {Key: "meta:custom", Value: []byte("v")},
	})
	if len(md) != 1 || md[0].Name != "custom" {
		t.Errorf("metadata %v, want custom only", md)
	}
}
