package replies

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// A reply topic deleted, then created again with more partitions, then
// with fewer. Each time a stored reply of the deleted generation is
// answered as removed (stored, so nothing is written again, with a
// *RemovedError: its result expired), never as a reply; a request in
// flight (a watch waiting) takes its reply from the new generation; until
// the topic exists again the index is not caught up. Records removed below
// the index's position (DeleteRecords) leave the replies it holds.
func TestReplyIndexOfADeletedOrRecreatedTopic(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies", Partitions: 1}})
	sink := &kafkatest.LogSink{}
	x := testIndex(t, b.Addr(), Options{PartitionCheck: 50 * time.Millisecond, Logger: slog.New(sink)}, nil)
	ctx := addCaughtUp(t, x, "replies")
	stored := func(id string) {
		t.Helper()
		w := x.Watch("replies", id)
		defer w.Close()
		waitRecords(t, ctx, w, 1)
	}
	removed := func(id string) {
		t.Helper()
		w := x.Watch("replies", id)
		defer w.Close()
		var rm *RemovedError
		if recs := w.Records(); len(recs) != 0 || !w.Stored() || !errors.As(w.Err(), &rm) {
			t.Fatalf("%s of a deleted generation: %d records, stored %v, err %v; want none, stored, a *RemovedError", id, len(recs), w.Stored(), w.Err())
		}
	}
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "a", Value: []byte("old-a")}, testReply{ID: "z", Value: []byte("old-z")})
	stored("a")
	stored("z")
	kafkatest.DeleteRecords(t, b.Addr(), "replies", 0, 1)
	stored("a") // still held: the index keeps what it read

	inFlight := x.Watch("replies", "p")
	defer inFlight.Close()
	const dropped = "a reply topic was deleted or created again"
	kafkatest.DeleteTopic(t, b.Addr(), "replies")
	sink.WaitCount(ctx, dropped, 1)
	removed("a")
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := x.WaitCaughtUp(wctx, "replies")
	cancel()
	if !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("WaitCaughtUp while the reply topic is deleted: %v, want ErrNotReady", err)
	}

	for i, partitions := range []int32{3, 1} {
		if i > 0 {
			kafkatest.DeleteTopic(t, b.Addr(), "replies")
		}
		if err := b.CreateTopics(embedded.Topic{Name: "replies", Partitions: partitions}); err != nil {
			t.Fatal(err)
		}
		kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "p", Value: []byte("new-p"), Partition: partitions - 1},
			testReply{ID: "b", Value: []byte("new-b"), Partition: 0})
		if i > 0 {
			sink.WaitCount(ctx, dropped, 2)
		}
		// Read again within a second of existing (the index looks every
		// second): its catch-up, the first's and each generation's.
		sink.WaitCount(ctx, "reply index caught up", 2+i)
		if err := x.WaitCaughtUp(ctx, "replies"); err != nil {
			t.Fatalf("WaitCaughtUp once the topic exists again with %d partitions: %v", partitions, err)
		}
		if i == 0 {
			if recs := waitRecords(t, ctx, inFlight, 1); string(recs[0].Value) != "new-p" {
				t.Fatalf("the request in flight got %q, want its reply of the new generation", recs[0].Value)
			}
			stored("b")
		} else {
			removed("b") // stored in the deleted generation of 3 partitions
		}
		removed("a")
		removed("z")
	}
}
