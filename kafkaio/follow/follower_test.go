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

// A followed topic that is deleted, and one created again under the same
// name, is reported to the owner (Gone) with why, after the follower
// stopped reading it: a wait for its positions ends. The new generation's
// first record, below the old position, is not applied as if it followed
// the old ones. Assigned again, the new generation is read.
func TestFollowerReportsADeletedOrRecreatedTopic(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "t", Partitions: 1}})
	kafkatest.Produce(t, b.Addr(), "t",
		kafkatest.Rec{Value: []byte("a")}, kafkatest.Rec{Value: []byte("b")}, kafkatest.Rec{Value: []byte("c")})
	ctx := kafkatest.Ctx(t, 30*time.Second)
	type follower struct {
		f    *follow.Follower
		got  *applied
		gone chan error
	}
	start := func(check time.Duration, from, to int64) follower {
		t.Helper()
		fw := follower{got: &applied{}, gone: make(chan error, 4)}
		f, err := follow.New(follow.Options{
			Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()},
			GroupPrefix: "test-", What: "test consumer", Role: "test", TopicRole: "test topic",
			AddedLog: "reading partitions added to a test topic", PartitionCheck: check,
			Apply: fw.got.apply, Gone: func(topic string, why error) { fw.gone <- why },
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		fw.f = f
		if err := f.Assign("t", []int64{from}, []int64{to}); err != nil {
			t.Fatal(err)
		}
		if err := f.WaitReached(ctx, "t", []int64{to}); err != nil {
			t.Fatal(err)
		}
		return fw
	}
	reason := func(fw follower) error {
		t.Helper()
		select {
		case why := <-fw.gone:
			return why
		case <-ctx.Done():
			t.Fatal("the follower did not report the topic gone")
			return nil
		}
	}

	// Deleted: found by the partition check.
	checked := start(50*time.Millisecond, 0, 3)
	kafkatest.DeleteTopic(t, b.Addr(), "t")
	if why := reason(checked); !errors.Is(why, follow.ErrTopicDeleted) {
		t.Fatalf("deleted: %v, want ErrTopicDeleted", why)
	}
	if err := checked.f.WaitReached(ctx, "t", []int64{4}); err == nil {
		t.Fatal("a wait for the positions of a dropped topic did not fail")
	}
	if err := b.CreateTopics(embedded.Topic{Name: "t", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	kafkatest.Produce(t, b.Addr(), "t", kafkatest.Rec{Value: []byte("x")}, kafkatest.Rec{Value: []byte("y")})

	// Recreated under a follower whose check is far off: the record below
	// its position tells.
	moved := start(time.Hour, 1, 2) // reads y, at offset 1
	kafkatest.DeleteTopic(t, b.Addr(), "t")
	if err := b.CreateTopics(embedded.Topic{Name: "t", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	kafkatest.Produce(t, b.Addr(), "t", kafkatest.Rec{Value: []byte("new")})
	if why := reason(moved); !errors.Is(why, follow.ErrTopicRecreated) {
		t.Fatalf("recreated: %v, want ErrTopicRecreated", why)
	}
	moved.got.mu.Lock()
	vals := append([]string(nil), moved.got.vals...)
	moved.got.mu.Unlock()
	if len(vals) != 1 || vals[0] != "y" {
		t.Fatalf("applied %q, want y alone (nothing of the new generation before it is assigned again)", vals)
	}
	if err := moved.f.Assign("t", []int64{0}, []int64{1}); err != nil {
		t.Fatal(err)
	}
	if err := moved.f.WaitReached(ctx, "t", []int64{1}); err != nil {
		t.Fatal(err)
	}
	moved.got.mu.Lock()
	defer moved.got.mu.Unlock()
	if len(moved.got.vals) != 2 || moved.got.vals[1] != "new" {
		t.Fatalf("applied %q after assigning the new generation, want y then new", moved.got.vals)
	}
}
