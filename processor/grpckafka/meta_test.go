package grpckafka

import (
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
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

// Request metadata reaches the record in the order Envoy handed it over.
func TestRequestMetaKeepsOrder(t *testing.T) {
	meta := requestMeta(route.Headers{
		{Name: ":path", Value: "/x.Y/Z"}, {Name: "zeta", Value: "1"}, {Name: "alpha", Value: "2"},
		{Name: "zeta", Value: "3"}, {Name: "x-request-id", Value: "r"},
	})
	var got []string
	for _, h := range meta {
		got = append(got, h.Key+"="+string(h.Value))
	}
	if want := "meta:zeta=1 meta:alpha=2 meta:zeta=3 meta:x-request-id=r"; strings.Join(got, " ") != want {
		t.Errorf("record headers %s, want %s", strings.Join(got, " "), want)
	}
}
