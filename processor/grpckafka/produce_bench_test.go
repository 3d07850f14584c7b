package grpckafka

import (
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// BenchmarkCorrelationID is the correlation id of a request-reply call:
// md5 over service, method, reply-to, one override and one identity.
func BenchmarkCorrelationID(b *testing.B) {
	names := config.CorrelationHeaders{Service: "zilla:service", Method: "zilla:method", ReplyTo: "zilla:reply-to", CorrelationID: "zilla:correlation-id"}
	overrides := []client.Header{{Key: "zilla:identity", Value: []byte("test")}}
	idents := map[string]string{"jwt0": "alice"}
	run := func() string {
		return correlationID("59410e57-3e0f-4b61-9328-f645a7968ac8", names, "example.EchoService", "EchoUnary", "responses", overrides, idents)
	}
	if id := run(); len(id) != 36+1+32 || id != run() {
		b.Fatalf("correlation id %q", id)
	}
	b.ReportAllocs()
	for b.Loop() {
		run()
	}
}
