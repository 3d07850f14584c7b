package e2e_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const partitionsConfig = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/grow/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: grow-items, filters: [{ key: "${params.id}" }] }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: example.Fanout }]
        exit: kafka0
        with: { capability: fetch, topic: grow-log }
`

// TestTopicsGainingPartitions: an operator adds partitions to topics the
// processor reads. A fetch route answers with a record written to an added
// partition; a gRPC fetch stream ends with UNAVAILABLE, and resuming by the
// id of its last message delivers the records of the old and the new
// partitions, each once.
func TestTopicsGainingPartitions(t *testing.T) {
	t.Parallel()
	e := startEnv(t, partitionsConfig,
		withTopics(embedded.Topic{Name: "grow-items", Compact: true}, embedded.Topic{Name: "grow-log"}),
		func(o *stack.DevOptions) { o.PartitionCheck = 100 * time.Millisecond })
	e.put("grow-items", 0, "a", []byte("a1"))
	if resp, body := e.request(e.h1, "GET", "/grow/a", "", "prefer", "wait=10"); resp.StatusCode != http.StatusOK || body != "a1" {
		t.Fatalf("GET /grow/a: %d %q", resp.StatusCode, body)
	}
	e.put("grow-log", 0, "k", []byte("m1"))
	ctx := ctxFor(t, 60*time.Second)
	st := subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe")
	first := receive(t, st, 1, 32767)[0]

	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: "grow-items", IncreaseTo: 3}, {Topic: "grow-log", IncreaseTo: 3}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("adding partitions to %s: %v", r.Topic, r.Error)
		}
	}
	// Written at once, before the processor can have noticed the new
	// partitions, by a producer that knows them.
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3, "linger.ms": 0})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, 3)
	for _, m := range []struct {
		topic     string
		partition int32
		key, v    string
	}{{"grow-items", 2, "z", "z1"}, {"grow-log", 2, "k2", "m2"}, {"grow-log", 0, "k", "m3"}} {
		topic := m.topic
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: m.partition}, Key: []byte(m.key), Value: []byte(m.v)}, done); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		select {
		case ev := <-done:
			if m := ev.(*kafka.Message); m.TopicPartition.Error != nil {
				t.Fatalf("writing to %s[%d]: %v", *m.TopicPartition.Topic, m.TopicPartition.Partition, m.TopicPartition.Error)
			}
		case <-ctx.Done():
			t.Fatal("no acknowledgement")
		}
	}

	// The view reads the added partition from its start.
	if resp, body := e.request(e.h1, "GET", "/grow/z", "", "prefer", "wait=10"); resp.StatusCode != http.StatusOK || body != "z1" {
		t.Fatalf("GET /grow/z, written to an added partition: %d %q", resp.StatusCode, body)
	}

	// The stream may deliver m3 (partition 0) before its tail is retired;
	// then it ends, and the client resumes after the last message it got.
	last := first
	n := 0
	var end *status.Status
	for end == nil {
		var m rawMessage
		if err := st.RecvMsg(&m); err != nil {
			end = status.Convert(err)
			break
		}
		last = splitField(t, m.b, 32767)
		if n++; n > 1 || string(last.value) != "m3" {
			t.Fatalf("before its end the stream delivered %q (message %d); only m3, of partition 0, can come", last.value, n)
		}
	}
	if end.Code() != codes.Unavailable || !strings.Contains(end.Message(), "gained partitions (1 → 3)") {
		t.Fatalf("the stream ended with %v, want UNAVAILABLE saying the topic gained partitions", end)
	}
	rest := receive(t, subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe", "last-message-id-bin", string(last.id)), 2-n, 32767)
	got := map[string]bool{}
	if n == 1 {
		got[string(last.value)] = true
	}
	for _, f := range rest {
		if got[string(f.value)] {
			t.Fatalf("%q delivered twice", f.value)
		}
		got[string(f.value)] = true
	}
	if !got["m2"] || !got["m3"] || len(got) != 2 {
		t.Fatalf("after the resume: %v, want m2 (the added partition) and m3, once each", got)
	}
}
