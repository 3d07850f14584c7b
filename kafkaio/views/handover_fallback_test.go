package views

import (
	"errors"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// A shared hand-over that librdkafka refuses (here: one view's partition is
// already assigned, which librdkafka checks before it changes anything)
// must not cost the other views of the batch their live reads: each is then
// assigned on its own, and only the refused one is told of the failure.
func TestHandOverFallsBackToOneAssignmentPerView(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "taken", Compact: true}, embedded.Topic{Name: "free", Compact: true})
	c, err := New(Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()}, KafkaTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	part := func(topic string) []kafka.TopicPartition {
		return []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 0}}
	}
	c.assignMu.Lock()
	err = c.live.IncrementalAssign(part("taken"))
	c.assignMu.Unlock()
	if err != nil {
		t.Fatalf("assigning the first partition: %v", err)
	}

	taken := handOverReq{parts: part("taken"), done: make(chan error, 1)}
	free := handOverReq{parts: part("free"), done: make(chan error, 1)}
	c.assignBatch([]handOverReq{taken, free})

	var kerr kafka.Error
	if err := <-taken.done; !errors.As(err, &kerr) || kerr.Code() != kafka.ErrConflict {
		t.Fatalf("the view whose partition was already assigned: got %v, want librdkafka's conflict", err)
	}
	if err := <-free.done; err != nil {
		t.Fatalf("the other view of the batch was not assigned on its own: %v", err)
	}
	assigned, err := c.live.Assignment()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, tp := range assigned {
		got[*tp.Topic] = true
	}
	if !got["taken"] || !got["free"] || len(assigned) != 2 {
		t.Fatalf("live assignment %v, want taken [0] and free [0]", assigned)
	}
}
