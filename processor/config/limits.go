package config

import (
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Limits bound what one request or the whole process may hold. Each field
// has its default in DefaultLimits and its key (with the description the
// JSON Schema gives it) in limitKeys; a new limit is those three lines
// here, the code that uses it, its key in Describe, its row in
// docs/configuration.md and go generate for schema.json (limits_test.go,
// describe_test.go and schema_test.go check they agree).
type Limits struct {
	MaxBody         int64         // bytes of an HTTP body or one gRPC message; default 1MiB
	MaxWait         time.Duration // clamp of prefer: wait=N; default 60s
	ReplyTimeout    time.Duration // default 30s
	ReplyRetention  time.Duration // default 10m
	KafkaTimeout    time.Duration // default 5s
	MaxViewBytes    int64         // default 256MiB
	ReplyIndexBytes int64         // default 64MiB
	MaxViews        int           // templated-topic views; default 1000
	ViewIdle        time.Duration // idle templated views are evicted after this; default 10m
	StreamLagBudget int           // records a gRPC fetch stream may fall behind; default 10000
	// StreamSendInterval is the longest a busy gRPC fetch stream holds
	// records to send them together: the time between two of its sends is
	// open streams ÷ StreamSendRate, at most this. Default 50ms; 0 sends
	// each batch as soon as it is there.
	StreamSendInterval time.Duration
	// StreamSendRate is the messages per second the processor aims at over
	// all its busy fetch streams together; default 20000.
	StreamSendRate int
	// IdempotencyWindow is how long a write with an idempotency key is
	// remembered as done: a retry within it writes nothing and answers as
	// the original did; after it, until twice it, a retry is refused as
	// expired. Default 10m.
	IdempotencyWindow time.Duration
	// IdempotencyKeys bounds the correlation ids each cluster's key index
	// remembers; the oldest are evicted first. Default 1,000,000.
	IdempotencyKeys int
	// SSEHeartbeat is how long an sse-kafka stream stays silent before it
	// sends a comment: proxies and browsers drop a stream that sends
	// nothing, and Envoy's stream idle timeout cuts it. Default 15s.
	SSEHeartbeat time.Duration
	// SSERetry is the reconnection delay an sse-kafka stream tells the
	// browser (retry:), so that reconnects after a drain spread out less
	// than all at once. Default 2s.
	SSERetry time.Duration
}

// RecordHeaderRoom is what a record may hold besides the body: its key and
// headers (Envoy bounds request headers at 60 KiB by default).
const RecordHeaderRoom = 128 << 10

// RecordBytes is the largest record a request within the limits makes:
// max-body plus RecordHeaderRoom. The producers' message.max.bytes is set
// to it, and Kafka's broker and topic limits must be at least as large.
func (l Limits) RecordBytes() int64 { return l.MaxBody + RecordHeaderRoom }

// DefaultLimits returns the limits used for fields the file leaves out.
func DefaultLimits() Limits {
	return Limits{
		MaxBody:            1 << 20,
		MaxWait:            60 * time.Second,
		ReplyTimeout:       30 * time.Second,
		ReplyRetention:     10 * time.Minute,
		KafkaTimeout:       5 * time.Second,
		MaxViewBytes:       256 << 20,
		ReplyIndexBytes:    64 << 20,
		MaxViews:           1000,
		ViewIdle:           10 * time.Minute,
		StreamLagBudget:    10000,
		StreamSendInterval: 50 * time.Millisecond,
		StreamSendRate:     20000,
		IdempotencyWindow:  10 * time.Minute,
		IdempotencyKeys:    1_000_000,
		SSEHeartbeat:       15 * time.Second,
		SSERetry:           2 * time.Second,
	}
}

// limitKey is one limit in the file: its key, how its value is read, the
// field it sets and what it is. The limits section of the shape is built
// from these.
type limitKey struct {
	key   string
	kind  limitKind
	field func(*Limits) any // *int64, *time.Duration or *int
	doc   string            // its description in the JSON Schema
}

type limitKind int

const (
	sizeLimit      limitKind = iota // a positive byte size
	durationLimit                   // a positive duration
	durationOrNone                  // a duration; 0 means none (kept as given)
	countLimit                      // an integer from 1 to 2^31-1
)

// limitKeys is every limit, in the order of docs/configuration.md.
func limitKeys() []limitKey {
	return []limitKey{
		{"max-body", sizeLimit, func(l *Limits) any { return &l.MaxBody },
			"HTTP body or one gRPC message; default 1MiB."},
		{"max-wait", durationLimit, func(l *Limits) any { return &l.MaxWait },
			"Clamp of prefer: wait=N; default 60s."},
		{"reply-timeout", durationLimit, func(l *Limits) any { return &l.ReplyTimeout },
			"Default 30s."},
		{"reply-retention", durationLimit, func(l *Limits) any { return &l.ReplyRetention },
			"How far back reply indexes reach; default 10m."},
		{"kafka-timeout", durationLimit, func(l *Limits) any { return &l.KafkaTimeout },
			"Default 5s."},
		{"max-view-bytes", sizeLimit, func(l *Limits) any { return &l.MaxViewBytes },
			"Default 256MiB."},
		{"reply-index-bytes", sizeLimit, func(l *Limits) any { return &l.ReplyIndexBytes },
			"Default 64MiB."},
		{"max-views", countLimit, func(l *Limits) any { return &l.MaxViews },
			"Views of templated topics; default 1000."},
		{"view-idle", durationLimit, func(l *Limits) any { return &l.ViewIdle },
			"Idle templated views are evicted after this; default 10m."},
		{"stream-lag-budget", countLimit, func(l *Limits) any { return &l.StreamLagBudget },
			"Records a gRPC fetch stream or an SSE stream may fall behind; default 10000."},
		{"stream-send-interval", durationOrNone, func(l *Limits) any { return &l.StreamSendInterval },
			"Longest a busy gRPC fetch stream holds records to send them together (its sends are open streams / stream-send-rate apart, at most this); 0 sends at once; default 50ms."},
		{"stream-send-rate", countLimit, func(l *Limits) any { return &l.StreamSendRate },
			"Messages per second the processor aims at over all its busy gRPC fetch streams together; default 20000."},
		{"idempotency-window", durationLimit, func(l *Limits) any { return &l.IdempotencyWindow },
			"How long a write with an idempotency key is remembered: a retry within it writes nothing; after it (until twice it) a retry is refused as expired; default 10m."},
		{"idempotency-keys", countLimit, func(l *Limits) any { return &l.IdempotencyKeys },
			"Correlation ids each cluster's key index remembers, oldest evicted first; default 1000000."},
		{"sse-heartbeat", durationLimit, func(l *Limits) any { return &l.SSEHeartbeat },
			"Longest an sse-kafka stream stays silent before it sends a comment (below Envoy's stream idle timeout); default 15s."},
		{"sse-retry", durationLimit, func(l *Limits) any { return &l.SSERetry },
			"Reconnection delay an sse-kafka stream tells the browser (retry:); default 2s."},
	}
}

// WithDefaults fills the limits left at zero — a configuration built by
// hand rather than loaded — with DefaultLimits; a limit whose zero means
// "none" is kept as given.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	for _, k := range limitKeys() {
		if k.kind == durationOrNone {
			continue
		}
		switch p := k.field(&l).(type) {
		case *int64:
			if *p <= 0 {
				*p = *k.field(&d).(*int64)
			}
		case *time.Duration:
			if *p <= 0 {
				*p = *k.field(&d).(*time.Duration)
			}
		case *int:
			if *p <= 0 {
				*p = *k.field(&d).(*int)
			}
		}
	}
	return l
}

// limits decodes the limits object over l (which holds the defaults).
func (d *decoder) limits(n ast.Node, l *Limits) {
	m := d.object(n, "limits", "limits", d.shape.limits.names()...)
	for _, k := range limitKeys() {
		e := m[k.key]
		if e == nil {
			continue
		}
		switch k.kind {
		case sizeLimit:
			if v, ok := d.size(e.v, k.key); ok {
				*k.field(l).(*int64) = v
			}
		case durationLimit, durationOrNone:
			if v, ok := d.duration(e.v, k.key, k.kind == durationOrNone); ok {
				*k.field(l).(*time.Duration) = v
			}
		case countLimit:
			if v, ok := d.integer(e.v, k.key); ok {
				if v < 1 || v > 1<<31-1 {
					d.errorf(e.v, "%s must be between 1 and 2147483647, got %d", k.key, v)
				} else {
					*k.field(l).(*int) = int(v)
				}
			}
		}
	}
}
