package produce

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// WithTraceContext sets the W3C trace context (traceparent, tracestate) of
// the span in ctx on a record's headers, replacing any the request carried,
// so a consumer of the record continues the processor's trace. Without a
// recording span (tracing off) the headers are returned unchanged.
func WithTraceContext(ctx context.Context, headers []client.Header) []client.Header {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return headers
	}
	c := headerCarrier{h: headers}
	propagation.TraceContext{}.Inject(ctx, &c)
	return c.h
}

type headerCarrier struct{ h []client.Header }

func (c *headerCarrier) Get(key string) string {
	for _, h := range c.h {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c *headerCarrier) Set(key, value string) {
	out := c.h[:0:0]
	for _, h := range c.h {
		if h.Key != key {
			out = append(out, h)
		}
	}
	c.h = append(out, client.Header{Key: key, Value: []byte(value)})
}

func (c *headerCarrier) Keys() []string {
	keys := make([]string, len(c.h))
	for i, h := range c.h {
		keys[i] = h.Key
	}
	return keys
}
