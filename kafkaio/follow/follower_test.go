package follow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/follow"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// applied collects what a follower applies.
type applied struct {
	mu   sync.Mutex
	vals []string
}

func (a *applied) apply(m *kafka.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.vals = append(a.vals, string(m.Value))
}

func (a *applied) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.vals)
}

// A follower applies every record before its position moves past it: the
// catch-up and a wait for positions find the records applied. A wait that
// cannot be met says which partition is behind, and partitions added to a
// topic are read once the follower looked for them.
func TestFollowerPositionsCatchUpAndAddedPartitions(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "t", Partitions: 2}})
	kafkatest.Produce(t, b.Addr(), "t",
		kafkatest.Rec{Value: []byte("a"), Partition: 0},
		kafkatest.Rec{Value: []byte("b"), Partition: 0},
		kafkatest.Rec{Value: []byte("c"), Partition: 0},
	)
	var got applied
	caught := make(chan string, 1)
	f, err := follow.New(follow.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()},
		GroupPrefix: "test-", What: "test consumer", Role: "test", TopicRole: "test topic",
		AddedLog: "reading partitions added to a test topic",
		Apply:    got.apply, CaughtUp: func(topic string) { caught <- topic },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	ctx := kafkatest.Ctx(t, 30*time.Second)

	n, err := follow.PartitionCount(f.Lookups(), "t", "test topic", 5*time.Second)
	if err != nil || n != 2 {
		t.Fatalf("partition count %d, %v", n, err)
	}
	end := make([]int64, n)
	for p := range end {
		if _, end[p], err = f.Lookups().QueryWatermarkOffsets("t", int32(p), 5000); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Assign("t", []int64{0, 0}, end); err != nil {
		t.Fatal(err)
	}
	select {
	case topic := <-caught:
		if topic != "t" || got.count() != 3 {
			t.Fatalf("caught up on %q with %d records applied, want t with 3", topic, got.count())
		}
	case <-ctx.Done():
		t.Fatal("no catch-up")
	}

	kafkatest.Produce(t, b.Addr(), "t", kafkatest.Rec{Value: []byte("d"), Partition: 1})
	if err := f.WaitReached(ctx, "t", []int64{3, 1}); err != nil {
		t.Fatal(err)
	}
	if got.count() != 4 {
		t.Fatalf("%d records applied once position 1 reached, want 4", got.count())
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	var behind *follow.BehindError
	if err := f.WaitReached(short, "t", []int64{3, 5}); !errors.As(err, &behind) ||
		behind.Partition != 1 || behind.At != 1 || behind.End != 5 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait past the end: %v, want partition 1 behind at 1 of 5", err)
	}

	kafkatest.AddPartitions(t, b.Addr(), "t", 3)
	if err := f.CheckPartitions(); err != nil {
		t.Fatal(err)
	}
	if n := f.Partitions("t"); n != 3 {
		t.Fatalf("%d partitions followed after one was added, want 3", n)
	}
	kafkatest.Produce(t, b.Addr(), "t", kafkatest.Rec{Value: []byte("e"), Partition: 2})
	if err := f.WaitReached(ctx, "t", []int64{3, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if got.count() != 5 {
		t.Fatalf("%d records applied, want 5 (one in the added partition)", got.count())
	}
	select {
	case topic := <-caught:
		t.Fatalf("caught up again on %q: the catch-up is reported once", topic)
	default:
	}
}
