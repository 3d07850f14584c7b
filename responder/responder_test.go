package responder_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
)

func produce(t *testing.T, p *kafka.Producer, topic string, key, value []byte, headers ...string) {
	t.Helper()
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: key, Value: value}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers = append(m.Headers, kafka.Header{Key: headers[i], Value: []byte(headers[i+1])})
	}
	done := make(chan kafka.Event, 1)
	if err := p.Produce(m, done); err != nil {
		t.Fatal(err)
	}
	if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
		t.Fatal(m.TopicPartition.Error)
	}
}

// The echo answers each request once, keyed by correlation id, to the
// request's reply-to topic, and ignores a duplicate.
func TestResponderEchoesOnceKeyedByCorrelationID(t *testing.T) {
	b, err := embedded.Start(embedded.Options{Topics: []embedded.Topic{{Name: "req", Partitions: 2}, {Name: "rep", Partitions: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := responder.Start(responder.Options{
		Properties: map[string]string{"bootstrap.servers": b.Addr()},
		Topic:      "req", Handler: responder.HTTPEcho(), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, body := range []string{`{"qty":1}`, `{"qty":1}`, `not json`} {
		cid := "k1-0123"
		if body == "not json" {
			cid = "k2-4567"
		}
		produce(t, p, "req", []byte("1"), []byte(body), ":method", "POST", ":path", "/orders/1",
			"gateway:reply-to", "rep", "gateway:correlation-id", cid)
	}

	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "group.id": "t", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "rep"
	var parts []kafka.TopicPartition
	for i := int32(0); i < 3; i++ {
		parts = append(parts, kafka.TopicPartition{Topic: &topic, Partition: i, Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(parts); err != nil {
		t.Fatal(err)
	}
	replies := map[string]*kafka.Message{}
	deadline := time.Now().Add(20 * time.Second)
	for len(replies) < 2 && time.Now().Before(deadline) {
		if m, ok := c.Poll(100).(*kafka.Message); ok {
			if _, dup := replies[string(m.Key)]; dup {
				t.Fatalf("a second reply for %s", m.Key)
			}
			replies[string(m.Key)] = m
		}
	}
	// The duplicate was read before the last request, so once both replies
	// are in, it has been seen and ignored.
	for deadline := time.Now().Add(10 * time.Second); r.Handled()+r.Duplicates() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d, duplicates %d", r.Handled(), r.Duplicates())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r.Handled() != 2 || r.Duplicates() != 1 {
		t.Errorf("handled %d, duplicates %d; want 2 and 1", r.Handled(), r.Duplicates())
	}
	for cid, want := range map[string]string{
		"k1-0123": `{"method":"POST","path":"/orders/1","key":"1","body":{"qty":1}}`,
		"k2-4567": `{"method":"POST","path":"/orders/1","key":"1","body":"not json"}`,
	} {
		m := replies[cid]
		if m == nil {
			t.Fatalf("no reply for %s", cid)
		}
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		if string(m.Value) != want || hs[":status"] != "201" || hs["content-type"] != "application/json" || hs["gateway:correlation-id"] != cid {
			t.Errorf("reply for %s: %s %v", cid, m.Value, hs)
		}
		var v any
		if err := json.Unmarshal(m.Value, &v); err != nil {
			t.Errorf("reply for %s is not JSON: %v", cid, err)
		}
	}
}

func TestResponderNeedsTopicAndHandler(t *testing.T) {
	if _, err := responder.Start(responder.Options{Properties: map[string]string{"bootstrap.servers": "127.0.0.1:1"}, Topic: "x"}); err == nil {
		t.Error("started without a handler")
	}
	h := func(context.Context, *responder.Request) ([]responder.Reply, error) { return nil, nil }
	if _, err := responder.Start(responder.Options{Properties: map[string]string{"bootstrap.servers": "127.0.0.1:1"}, Handler: h}); err == nil {
		t.Error("started without a topic")
	}
}

// The echo ends a gRPC call under the status and message headers the
// binding names (a configuration imported from Zilla reads zilla:status),
// not under the gateway defaults.
func TestGRPCEndUnderTheBindingsHeaders(t *testing.T) {
	b, err := embedded.Start(embedded.Options{Topics: []embedded.Topic{{Name: "req", Partitions: 1}, {Name: "rep", Partitions: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := responder.Start(responder.Options{
		Properties: map[string]string{"bootstrap.servers": b.Addr()},
		Topic:      "req", Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey,
		CorrelationHeader: "zilla:correlation-id", ReplyToHeader: "zilla:reply-to",
		StatusHeader: "zilla:status", MessageHeader: "zilla:message",
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, "req", nil, nil, "zilla:reply-to", "rep", "zilla:correlation-id", "c1")

	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "group.id": "t", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "rep"
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		m, ok := c.Poll(100).(*kafka.Message)
		if !ok {
			continue
		}
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		if m.Value != nil || len(hs) != 2 || hs["zilla:status"] != "0" || hs["zilla:correlation-id"] != "c1" {
			t.Errorf("terminal reply: value %q headers %v, want a null value with zilla:status 0 and zilla:correlation-id c1 only", m.Value, hs)
		}
		return
	}
	t.Fatal("no reply within 20s")
}
