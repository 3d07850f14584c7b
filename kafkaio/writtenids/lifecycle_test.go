package writtenids

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// A request topic deleted, then created again with more partitions, then
// again with fewer: each time the ids read from the deleted generation are
// forgotten (they are no longer proof of a write) and those of other topics
// kept; a Sync of the deleted topic fails as for a missing one, and once it
// exists again the index reads the new generation alone, never merged with
// the old. Records removed below the index's position (DeleteRecords, as
// retention does) leave what it read: those requests were written, and a
// repeat within the window must not write them again.
func TestKeyIndexForgetsADeletedOrRecreatedTopic(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests", Partitions: 2}, {Name: "other", Partitions: 1}})
	sink := &kafkatest.LogSink{}
	x := testIndex(t, b.Addr(), Options{PartitionCheck: 50 * time.Millisecond, Logger: slog.New(sink)}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	kafkatest.WriteReplies(t, b.Addr(), "requests",
		testReply{ID: "k1", Value: []byte("a"), Partition: 0}, testReply{ID: "k2", Value: []byte("b"), Partition: 1})
	kafkatest.WriteReplies(t, b.Addr(), "other", testReply{ID: "o1", Value: []byte("o")})
	for _, topic := range []string{"requests", "other"} {
		if err := x.Sync(ctx, topic, cidHeader, fpHeader); err != nil {
			t.Fatal(err)
		}
	}
	kafkatest.DeleteRecords(t, b.Addr(), "requests", 0, 1)
	if s := x.Lookup("requests", "k1"); !s.Written() {
		t.Fatalf("k1 after the records below it were removed: %+v, want still written", s)
	}

	const dropped = "a request topic was deleted or created again"
	kafkatest.DeleteTopic(t, b.Addr(), "requests")
	sink.WaitCount(ctx, dropped, 1)
	if s := x.Lookup("requests", "k1"); s.Written() {
		t.Fatalf("k1 of a deleted topic: %+v, want not written", s)
	}
	if s := x.Lookup("other", "o1"); !s.Written() {
		t.Fatalf("o1 of another topic: %+v, want written", s)
	}
	if st := x.Stats(); st.Keys != 1 || st.Topics != 1 {
		t.Fatalf("stats %+v, want the other topic's one key", st)
	}
	if err := x.Sync(ctx, "requests", cidHeader, fpHeader); !errors.Is(err, client.ErrUnknownTopic) {
		t.Fatalf("Sync of the deleted topic: %v, want ErrUnknownTopic", err)
	}

	for i, partitions := range []int32{3, 1} {
		if i > 0 {
			kafkatest.DeleteTopic(t, b.Addr(), "requests")
		}
		if err := b.CreateTopics(embedded.Topic{Name: "requests", Partitions: partitions}); err != nil {
			t.Fatal(err)
		}
		kafkatest.WriteReplies(t, b.Addr(), "requests", testReply{ID: "k1", Value: []byte("new"), Partition: partitions - 1})
		if i > 0 {
			sink.WaitCount(ctx, dropped, 2)
		}
		if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
			t.Fatalf("Sync of the topic created again with %d partitions: %v", partitions, err)
		}
		if s := x.Lookup("requests", "k1"); s.Records != 1 {
			t.Fatalf("k1 in the generation of %d partitions: %+v, want its one record of that generation", partitions, s)
		}
		if s := x.Lookup("requests", "k2"); s.Written() {
			t.Fatalf("k2 of a deleted generation: %+v, want not written", s)
		}
	}
}
