package httpkafka

import (
	"bytes"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// benchProduceHeaders are the request headers of a POST through Envoy.
var benchProduceHeaders = route.Headers{
	{Name: ":method", Value: "POST"}, {Name: ":path", Value: "/orders/42"}, {Name: ":authority", Value: "api.example.com"},
	{Name: ":scheme", Value: "https"}, {Name: "content-type", Value: "application/json"}, {Name: "content-length", Value: "200"},
	{Name: "accept", Value: "application/json"}, {Name: "user-agent", Value: "curl/8.5.0"},
	{Name: "authorization", Value: "Bearer eyJhbGciOiJFUzI1NiJ9.e30.c2ln"},
	{Name: "x-request-id", Value: "6f1c1d0e-51c3-4bd5-9a1b-8ad1b6f2b0a7"}, {Name: "x-forwarded-proto", Value: "https"},
	{Name: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	{Name: "x-envoy-expected-rq-timeout-ms", Value: "15000"},
}

var benchIdentities = map[string]route.Identity{"jwt0": {Subject: "alice", Roles: []string{"orders:write"}}}

// BenchmarkCorrelationID computes the record headers and correlation id of
// a request-reply produce (the part of Handler's produce path between the
// key and the record): 13 request headers, one guard identity, one
// override, a 200-byte body.
func BenchmarkCorrelationID(b *testing.B) {
	body := bytes.Repeat([]byte{'b'}, 200)
	overrides := []client.Header{{Key: "tenant", Value: []byte("acme")}}
	run := func() (string, []client.Header) {
		c := newCorrelation()
		c.field([]byte("42"))
		hs := requestHeaders(c, benchProduceHeaders, benchIdentities, "gateway:reply-to", "orders-replies", "gateway:correlation-id", "gateway:fingerprint", overrides)
		c.field(body)
		return c.id("59410e57-3e0f-4b61-9328-f645a7968ac8", benchIdentities), hs
	}
	id, hs := run()
	if !cidRe.MatchString(id) || !followUpAllowed(id, benchIdentities) || len(hs) != 12 {
		b.Fatalf("id %q, %d headers", id, len(hs))
	}
	b.ReportAllocs()
	for b.Loop() {
		run()
	}
}

// BenchmarkFollowUpAllowed checks a follow-up GET's correlation id against
// the caller's identity.
func BenchmarkFollowUpAllowed(b *testing.B) {
	c := newCorrelation()
	c.field([]byte("42"))
	id := c.id("59410e57-3e0f-4b61-9328-f645a7968ac8", benchIdentities)
	if !followUpAllowed(id, benchIdentities) || followUpAllowed(id, nil) {
		b.Fatal("followUpAllowed is wrong")
	}
	b.ReportAllocs()
	for b.Loop() {
		followUpAllowed(id, benchIdentities)
	}
}

// BenchmarkCorrelationIDPooled is BenchmarkCorrelationID with the hash
// state from the handler's pool, as a request-reply takes it.
func BenchmarkCorrelationIDPooled(b *testing.B) {
	body := bytes.Repeat([]byte{'b'}, 200)
	overrides := []client.Header{{Key: "tenant", Value: []byte("acme")}}
	var pools producePools
	b.ReportAllocs()
	for b.Loop() {
		c := pools.correlation()
		c.field([]byte("42"))
		requestHeaders(c, benchProduceHeaders, benchIdentities, "gateway:reply-to", "orders-replies", "gateway:correlation-id", "gateway:fingerprint", overrides)
		c.field(body)
		c.idBytes("59410e57-3e0f-4b61-9328-f645a7968ac8", benchIdentities)
		pools.putCorrelation(c)
	}
}
