package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// modelsGRPCConfig: every topic holds example.Event (eventProto) in the
// registry's wire format; feed and cold are streamed, asks/answers are a
// request-reply pair; snap is compacted. Cold's records are written with schema id 14, a
// version of the schema the processor has not cached.
const modelsGRPCConfig = `
catalogs:
  registry0:
    type: schema-registry
    options: { url: "%s", max-age: 1h, timeout: 2s, retry-after: 1s }
bindings:
  kafka0:
    type: kafka
    kind: client
    options:
      bootstrap.servers: "localhost:9092"
      topics:
        - name: feed
          value: { model: protobuf, view: json, catalog: { registry0: [{ strategy: topic, record: example.Event }] } }
        - name: cold
          value: { model: protobuf, catalog: { registry0: [{ subject: feed-value, record: example.Event }] } }
        - name: snap
          value: { model: protobuf, catalog: { registry0: [{ subject: feed-value, record: example.Event }] } }
        - name: asks
          value: { model: protobuf, catalog: { registry0: [{ subject: feed-value, record: example.Event }] } }
        - name: answers
          value: { model: protobuf, catalog: { registry0: [{ subject: feed-value, record: example.Event }] } }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: example.Feed }]
        exit: kafka0
        with: { capability: fetch, topic: feed }
      - when: [{ service: example.Cold }]
        exit: kafka0
        with: { capability: fetch, topic: cold }
      - when: [{ service: example.Snap }]
        exit: kafka0
        with: { capability: fetch, topic: snap }
      - when: [{ service: example.Ask }]
        exit: kafka0
        with: { capability: produce, topic: asks, reply-to: answers }
limits: { kafka-timeout: 5s, stream-lag-budget: 1024 }
`

// eventFrame is the registry wire format's prefix of example.Event under
// schema id: magic byte, id, message index [1] (zigzag varints: count 1, 1).
func eventFrame(id byte) []byte { return []byte{0, 0, 0, 0, id, 2, 2} }

// event is the protobuf encoding of example.Event{id, text}.
func event(id, text string) []byte {
	b := append([]byte{0x0a, byte(len(id))}, id...)
	return append(append(b, 0x12, byte(len(text))), text...)
}

func framed(id byte, payload []byte) []byte { return append(eventFrame(id), payload...) }

func startModelsGRPC(t *testing.T) (*env, *countingRegistry) {
	reg := newCountingRegistry(t)
	reg.SeedSchema("feed-value", 1, 12, sr.Schema{Schema: eventProto, Type: sr.TypeProtobuf})
	reg.SeedSchema("cold-value", 1, 14, sr.Schema{Schema: eventProto, Type: sr.TypeProtobuf})
	cold := "/schemas/ids/14"
	reg.failing.Store(&cold) // cold's writer schema cannot be had until the test lets it
	e := startEnv(t, fmt.Sprintf(modelsGRPCConfig, reg.URL()), withTopics(
		embedded.Topic{Name: "feed"}, embedded.Topic{Name: "cold"}, embedded.Topic{Name: "asks"}, embedded.Topic{Name: "answers"},
		embedded.Topic{Name: "snap", Compact: true}),
		func(o *stack.DevOptions) {
			o.Responders = append(o.Responders, responder.Options{Topic: "asks", Handler: framedAnswerer, DedupKey: responder.GRPCDedupKey})
		})
	return e, reg
}

// framedAnswerer answers a framed Event{id} with the framed Event{id,
// "re:"+id}, and the Event with id "bad" with a value that is not an Event
// (field 2 as a varint); the half-close ends the call OK.
func framedAnswerer(_ context.Context, req *responder.Request) ([]responder.Reply, error) {
	if req.Value == nil {
		return []responder.Reply{responder.GRPCEnd(0, "")}, nil
	}
	p := bytes.TrimPrefix(req.Value, eventFrame(12))
	if len(p) == len(req.Value) || len(p) < 2 {
		return nil, fmt.Errorf("request %x is not a framed Event", req.Value)
	}
	id := string(p[2 : 2+p[1]])
	if id == "bad" {
		return []responder.Reply{responder.GRPCReply(framed(12, []byte{0x0a, 1, 'x', 0x10, 5}))}, nil
	}
	return []responder.Reply{responder.GRPCReply(framed(12, event(id, "re:"+id)))}, nil
}

func TestModelsGRPC(t *testing.T) {
	t.Parallel()
	e, reg := startModelsGRPC(t)

	t.Run("fetch: a framed protobuf topic streamed as plain messages; records that do not match left out and counted", func(t *testing.T) {
		// More records than the tail's backfill (half its 1024-record
		// ring), so the first ones are read from history by the stream
		// and the rest decoded once in the shared tail: one bad record
		// in each part.
		const total = 600
		var batch []kafka.Message
		var want [][]byte
		for i := range total {
			v := framed(12, event(fmt.Sprintf("e%03d", i), "ok"))
			switch i {
			case 3: // history: field 2 as a varint, not an Event
				v = framed(12, []byte{0x0a, 1, 'x', 0x10, 5})
			case 550: // tail: not in the registry's wire format
				v = event("plain", "ok")
			default:
				want = append(want, event(fmt.Sprintf("e%03d", i), "ok"))
			}
			batch = append(batch, kafka.Message{Value: v})
		}
		before := e.counter("kafka_ext_proc_model_invalid_records_total")
		e.putBatch("feed", batch)

		ctx, cancel := context.WithCancel(ctxFor(t, 60*time.Second))
		st := subscribe(ctx, t, e.grpcConn(), "/example.Feed/Subscribe")
		got := receive(t, st, len(want), 32767)
		cancel()
		for i := range want {
			if !bytes.Equal(got[i].value, want[i]) {
				t.Fatalf("message %d: %x, want the plain Event %x", i, got[i].value, want[i])
			}
		}
		if p := positions(t, got[len(got)-1].id); p[0] != total {
			t.Errorf("last message's id %v, want {0: %d}: the left-out records are passed over", p, total)
		}
		if n := e.counter("kafka_ext_proc_model_invalid_records_total") - before; n != 2 {
			t.Errorf("kafka_ext_proc_model_invalid_records_total grew by %v, want 2", n)
		}

		t.Run("a stream resumed before a left-out record goes on after it", func(t *testing.T) {
			// got[549] is e551's predecessor e549: the next record (550)
			// does not match.
			last := got[548]
			if !bytes.Equal(last.value, event("e549", "ok")) {
				t.Fatalf("message 548 is %x, want e549", last.value)
			}
			e.putBatch("feed", []kafka.Message{{Value: framed(12, event("live", "ok"))}})
			st := subscribe(ctxFor(t, 30*time.Second), t, e.grpcConn(), "/example.Feed/Subscribe", "last-message-id", encodeURL(last.id))
			rest := receive(t, st, total-551+1, 32767)
			if !bytes.Equal(rest[0].value, event("e551", "ok")) {
				t.Errorf("first message after the resume: %x, want e551", rest[0].value)
			}
			if v := rest[len(rest)-1]; !bytes.Equal(v.value, event("live", "ok")) || positions(t, v.id)[0] != total+1 {
				t.Errorf("last message after the resume: %x at %v, want the live Event at %d", v.value, positions(t, v.id), total+1)
			}
		})
	})

	t.Run("fetch: a registry outage leaves streams of cached schemas going, with no registry request", func(t *testing.T) {
		reg.down.Store(true)
		defer reg.down.Store(false)
		before := reg.requests.Load()
		e.putBatch("feed", []kafka.Message{{Value: framed(12, event("down", "ok"))}})
		// Everything of feed so far: 598 records of the first subtest that
		// match, the live one, and this one.
		st := subscribe(ctxFor(t, 30*time.Second), t, e.grpcConn(), "/example.Feed/Subscribe")
		got := receive(t, st, 600, 32767)
		if !bytes.Equal(got[599].value, event("down", "ok")) {
			t.Errorf("last message: %x, want the one written during the outage", got[599].value)
		}
		if n := reg.requests.Load() - before; n != 0 {
			t.Errorf("%d registry requests, want none: the schema is cached", n)
		}
	})

	t.Run("fetch: a compacted topic with a model is streamed from its log, decoded", func(t *testing.T) {
		e.putBatch("snap", []kafka.Message{
			{Key: []byte("k"), Value: framed(12, event("k", "old"))},
			{Key: []byte("j"), Value: []byte("not framed")},
			{Key: []byte("k"), Value: framed(12, event("k", "new"))},
		})
		st := subscribe(ctxFor(t, 30*time.Second), t, e.grpcConn(), "/example.Snap/Subscribe")
		got := receive(t, st, 2, 32767)
		if !bytes.Equal(got[0].value, event("k", "old")) || !bytes.Equal(got[1].value, event("k", "new")) || positions(t, got[1].id)[0] != 3 {
			t.Errorf("snap: %x, %x at %v; want both records of k, plain, the second at 3", got[0].value, got[1].value, positions(t, got[1].id))
		}
	})

	t.Run("request-reply: the framed reply answered as the plain message; one that does not match ends INTERNAL", func(t *testing.T) {
		out, err := auditUnary(e, "/example.Ask/Call", event("q1", ""), "idempotency-key", "q1")
		if err != nil || !bytes.Equal(out, event("q1", "re:q1")) {
			t.Fatalf("ask: %x %v, want the plain Event %x", out, err, event("q1", "re:q1"))
		}
		_, err = auditUnary(e, "/example.Ask/Call", event("bad", ""), "idempotency-key", "q2")
		if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), `the reply on topic "answers" does not match its model`) {
			t.Errorf("bad reply: %v, want INTERNAL saying the reply does not match its model", err)
		}
	})

	t.Run("fetch: a record whose schema cannot be had ends the stream UNAVAILABLE before it; the resume reads it", func(t *testing.T) {
		e.putBatch("cold", []kafka.Message{{Value: framed(14, event("c1", "cold"))}})
		st, err := subscribeErr(ctxFor(t, 30*time.Second), e.grpcConn(), "/example.Cold/Subscribe", nil)
		var s *status.Status
		if err != nil {
			s = status.Convert(err)
		} else {
			var n int
			n, s = endStatus(st)
			if n != 0 {
				t.Errorf("%d messages before the end, want none", n)
			}
		}
		if s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "cannot be decoded now") || !strings.Contains(s.Message(), "cannot be reached") {
			t.Fatalf("cold stream: %v, want UNAVAILABLE naming the unreachable registry", s)
		}
		reg.failing.Store(nil)
		// The registry is asked again once retry-after (1s) passed: the
		// client reconnects until the record comes.
		ctx := ctxFor(t, 30*time.Second)
		for {
			sctx, cancel := context.WithCancel(ctx)
			st, err := subscribeErr(sctx, e.grpcConn(), "/example.Cold/Subscribe", nil)
			if err == nil {
				var m rawMessage
				if err = st.RecvMsg(&m); err == nil {
					cancel()
					if f := splitField(t, m.b, 32767); !bytes.Equal(f.value, event("c1", "cold")) || positions(t, f.id)[0] != 1 {
						t.Errorf("after the outage: %x at %v, want the plain Event at 1", f.value, positions(t, f.id))
					}
					break
				}
			}
			cancel()
			if s := status.Convert(err); s.Code() != codes.Unavailable || ctx.Err() != nil {
				t.Fatalf("reconnecting after the outage: %v", err)
			}
		}
	})
}
