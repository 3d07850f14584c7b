package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
)

// The broker must serve librdkafka (the client the processor uses) and create
// compacted topics as asked.
func TestBrokerServesLibrdkafka(t *testing.T) {
	b, err := embedded.Start(embedded.Options{Topics: []embedded.Topic{
		{Name: "plain", Partitions: 3},
		{Name: "snapshots", Compact: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	ac, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	res, err := ac.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: "snapshots"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Config["cleanup.policy"].Value; got != "compact" {
		t.Errorf("cleanup.policy of snapshots = %q, want compact", got)
	}
	md, err := ac.GetMetadata(nil, true, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(md.Topics["plain"].Partitions); n != 3 {
		t.Errorf("plain has %d partitions, want 3", n)
	}

	// Creating an existing topic again is not an error.
	if err := b.CreateTopics(embedded.Topic{Name: "plain"}); err != nil {
		t.Errorf("re-creating a topic: %v", err)
	}

	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	topic := "snapshots"
	done := make(chan kafka.Event, 1)
	err = p.Produce(&kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            []byte("k"), Value: []byte("v"),
		Headers: []kafka.Header{{Key: "content-type", Value: []byte("text/plain")}},
	}, done)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-done:
		if m := ev.(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
	case <-ctx.Done():
		t.Fatal("no delivery report")
	}

	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "group.id": "t", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		m, err := c.ReadMessage(time.Second)
		if err != nil {
			continue
		}
		if string(m.Key) != "k" || string(m.Value) != "v" || len(m.Headers) != 1 || string(m.Headers[0].Value) != "text/plain" {
			t.Fatalf("read back %q=%q headers %v", m.Key, m.Value, m.Headers)
		}
		return
	}
	t.Fatal("record not read back")
}

func TestStartRefusesBadAddress(t *testing.T) {
	if _, err := embedded.Start(embedded.Options{Addr: "nope"}); err == nil {
		t.Fatal("want an error for a malformed address")
	}
}
