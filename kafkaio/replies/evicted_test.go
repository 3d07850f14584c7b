package replies

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// evictedIndex is a small index of topic "replies" in which the reply of
// "old" (value v) was evicted by later replies: it is located, not held.
func evictedIndex(t *testing.T, opts Options, v []byte) (*embedded.Broker, *Index, context.Context) {
	t.Helper()
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies", Partitions: 2}})
	if opts.MaxBytes == 0 {
		opts.MaxBytes = 8 << 10
	}
	x := testIndex(t, b.Addr(), opts, nil)
	ctx := addCaughtUp(t, x, "replies")
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "old", Value: v, Partition: 1})
	fillUntilEvicted(t, ctx, x, b.Addr(), "old")
	return b, x, ctx
}

// fillUntilEvicted writes replies of other ids until id is evicted.
func fillUntilEvicted(t *testing.T, ctx context.Context, x *Index, addr, id string) {
	t.Helper()
	big := bytes.Repeat([]byte("f"), 1000)
	for i := 0; !x.Located("replies", id); i++ {
		if ctx.Err() != nil {
			t.Fatalf("%s not evicted: %+v", id, x.Stats())
		}
		last := fmt.Sprint("filler-", i)
		w := x.Watch("replies", last)
		kafkatest.WriteReplies(t, addr, "replies", testReply{ID: last, Value: big})
		waitRecords(t, ctx, w, 1)
		w.Close()
	}
}

// An evicted reply stays stored: a watch reads it back, and it is put back
// as if just indexed (held, counted, newest in the order).
func TestReplyEvictedIsReadBack(t *testing.T) {
	_, x, ctx := evictedIndex(t, Options{}, []byte(`{"order":42}`))
	st := x.Stats()
	if st.Located == 0 || st.LocatedBytes <= 0 || st.Bytes > 8<<10 {
		t.Fatalf("after eviction: %+v", st)
	}

	w := x.Watch("replies", "old")
	defer w.Close()
	if !w.Stored() {
		t.Fatal("an evicted reply is not stored")
	}
	recs := waitRecords(t, ctx, w, 1)
	if string(recs[0].Value) != `{"order":42}` || recs[0].Partition != 1 {
		t.Fatalf("read back %q in partition %d", recs[0].Value, recs[0].Partition)
	}
	if h, _ := headerValueOf(recs[0].Headers, cidHeader); h != "old" {
		t.Fatalf("read back a record of %q", h)
	}
	after := x.Stats()
	if after.ReadBacksFound != 1 || after.Located != st.Located-1 || x.Located("replies", "old") {
		t.Fatalf("after the read-back: %+v (before %+v)", after, st)
	}
	if after.ReadBackLatency.Count != 1 || after.Bytes > 8<<10 {
		t.Fatalf("after the read-back: %+v", after)
	}
	if x.store.order.back != w.e {
		t.Error("the read-back reply is not the newest in the order")
	}
	if w.Err() != nil || w.Evicted() {
		t.Errorf("held again: Err %v, Evicted %v", w.Err(), w.Evicted())
	}
}

func headerValueOf(hs []client.Header, name string) (string, bool) {
	for _, h := range hs {
		if h.Key == name {
			return string(h.Value), true
		}
	}
	return "", false
}

// Concurrent askers of an evicted id share one read.
func TestReplyEvictedConcurrentAskersShareOneRead(t *testing.T) {
	_, x, ctx := evictedIndex(t, Options{}, []byte("shared"))
	gate := make(chan struct{})
	x.mu.Lock()
	x.beforeAdmit = func() { <-gate }
	x.mu.Unlock()

	const askers = 8
	watches := make([]*Watch, askers)
	var wg sync.WaitGroup
	for i := range watches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watches[i] = x.Watch("replies", "old")
		}()
	}
	wg.Wait()
	for _, w := range watches {
		if !w.Evicted() || !w.Stored() {
			t.Fatal("an asker does not see the id as evicted and stored")
		}
	}
	close(gate) // every asker asked before the read starts
	for _, w := range watches {
		if recs := waitRecords(t, ctx, w, 1); string(recs[0].Value) != "shared" {
			t.Fatalf("read back %q", recs[0].Value)
		}
		w.Close()
	}
	if st, reads := x.Stats(), readsAdmitted(x); reads != 1 || st.ReadBacksFound != 1 {
		t.Fatalf("%d askers: %d reads, %d found; want one read", askers, reads, st.ReadBacksFound)
	}
}

// A reply deleted from its topic (DeleteRecords past its
// offset) is answered as expired, saying so, at once for later askers.
func TestReplyEvictedAndDeletedIsExpired(t *testing.T) {
	b, x, ctx := evictedIndex(t, Options{}, []byte("gone"))
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topic := "replies"
	res, err := admin.DeleteRecords(ctx, []kafka.TopicPartition{{Topic: &topic, Partition: 1, Offset: kafka.OffsetEnd}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil {
			t.Fatal(r.TopicPartition.Error)
		}
	}

	w := x.Watch("replies", "old")
	defer w.Close()
	err = waitErr(t, ctx, w)
	var removed *RemovedError
	if !errors.As(err, &removed) || removed.LogStart <= removed.Offset || removed.Partition != 1 {
		t.Fatalf("err = %v; want the reply removed by retention", err)
	}
	t.Log(err)
	if !w.Stored() || len(w.Records()) != 0 {
		t.Error("a removed reply must stay stored (nothing is written again) and hold nothing")
	}
	again := x.Watch("replies", "old")
	defer again.Close()
	if !errors.As(again.Err(), &removed) {
		t.Errorf("a later asker: %v; want expired at once", again.Err())
	}
	if st := x.Stats(); st.ReadBacksExpired != 1 {
		t.Errorf("stats %+v; want one expired read-back", st)
	}
}

// waitErr waits until the watch's read-back failed.
func waitErr(t *testing.T, ctx context.Context, w *Watch) error {
	t.Helper()
	for {
		_, _, changed := w.State()
		if err := w.Err(); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the read-back did not end")
		}
	}
}

// A read-back Kafka does not answer ends within the Kafka timeout, as a
// Kafka failure (client.ErrNotReady); the next asker reads again.
func TestReplyEvictedReadFailsWithinKafkaTimeout(t *testing.T) {
	const kafkaTimeout = 1500 * time.Millisecond
	b, x, ctx := evictedIndex(t, Options{KafkaTimeout: kafkaTimeout}, []byte("unreachable"))
	cl := b.Cluster()
	down := make(chan struct{})
	cl.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		cl.KeepControl()
		select {
		case <-down:
			return nil, errors.New("fetches refused by the test"), true
		default:
			return nil, nil, false
		}
	})
	close(down)

	start := time.Now()
	w := x.Watch("replies", "old")
	defer w.Close()
	err := waitErr(t, ctx, w)
	took := time.Since(start)
	if !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("err = %v; want client.ErrNotReady", err)
	}
	if took > kafkaTimeout+time.Second {
		t.Errorf("the read-back failed after %v; want within the Kafka timeout %v", took, kafkaTimeout)
	}
	if st := x.Stats(); st.ReadBacksFailed != 1 || !x.Located("replies", "old") || !w.Stored() {
		t.Errorf("after the failure: %+v; want the location kept", st)
	}
}

// Records of an evicted id that come later join its location, and the
// read-back returns them all in order (a gRPC call's replies).
func TestReplyEvictedLaterRecordsJoinTheLocation(t *testing.T) {
	b, x, ctx := evictedIndex(t, Options{}, []byte("m1"))
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "old", Value: []byte("m2"), Partition: 1}, testReply{ID: "old", Partition: 1})
	// The index has read them once a later record (of another id) is held.
	probe := x.Watch("replies", "probe")
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "probe", Value: []byte("p"), Partition: 1})
	waitRecords(t, ctx, probe, 1)
	probe.Close()
	if !x.Located("replies", "old") {
		t.Fatal("the later records were indexed in memory, apart from the first")
	}
	w := x.Watch("replies", "old")
	defer w.Close()
	recs := waitRecords(t, ctx, w, 3)
	if string(recs[0].Value) != "m1" || string(recs[1].Value) != "m2" || recs[2].Value != nil || !w.Terminal() {
		t.Fatalf("read back %d records, terminal %v", len(recs), w.Terminal())
	}
}

// An evicted id's location expires with Retention, as its records would.
func TestReplyEvictedLocationExpires(t *testing.T) {
	_, x, _ := evictedIndex(t, Options{Retention: time.Minute}, []byte("old"))
	before := x.Stats()
	x.expire(time.Now().Add(2 * time.Minute))
	st := x.Stats()
	if st.Located != 0 || st.LocatedBytes != 0 || st.Expired < before.Expired+uint64(before.Located) {
		t.Fatalf("after the retention: %+v (before %+v)", st, before)
	}
	w := x.Watch("replies", "old")
	defer w.Close()
	if w.Stored() {
		t.Error("an expired location is still stored")
	}
}

// readsAdmitted is how many read-backs x's reader started.
func readsAdmitted(x *Index) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.rdr == nil {
		return 0
	}
	return int(x.rdr.admitted.Load())
}

// Two reads of one partition admitted together, the later offset first:
// the partition is assigned again at the lower one, and each read finds
// its own record (the first skips what it saw already).
func TestReplyEvictedReadsOfOnePartitionRewind(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies"}})
	x := testIndex(t, b.Addr(), Options{MaxBytes: 8 << 10}, nil)
	ctx := addCaughtUp(t, x, "replies")
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "a", Value: []byte("A")}, testReply{ID: "b", Value: []byte("B")})
	fillUntilEvicted(t, ctx, x, b.Addr(), "b")
	if !x.Located("replies", "a") {
		t.Fatal("a, older than b, was not evicted")
	}
	gate := make(chan struct{})
	x.mu.Lock()
	x.beforeAdmit = func() { <-gate }
	x.mu.Unlock()
	later := x.Watch("replies", "b")
	defer later.Close()
	earlier := x.Watch("replies", "a")
	defer earlier.Close()
	close(gate) // both are admitted at once, b first
	if recs := waitRecords(t, ctx, later, 1); string(recs[0].Value) != "B" {
		t.Fatalf("b read back %q", recs[0].Value)
	}
	if recs := waitRecords(t, ctx, earlier, 1); string(recs[0].Value) != "A" {
		t.Fatalf("a read back %q", recs[0].Value)
	}
	if reads := readsAdmitted(x); reads != 2 {
		t.Fatalf("%d reads, want 2", reads)
	}
}

// A location is kept by a hash of its id. Were two ids to share a hash,
// the asker of the other id is sent to a span whose records do not carry
// its id: the read finds nothing of it and answers "removed", never the
// other id's reply. The collision is made by moving "old"'s location
// under the hash of "other".
func TestReplyLocationHashCollisionNeverAnswersAnotherID(t *testing.T) {
	_, x, ctx := evictedIndex(t, Options{}, []byte("old's reply"))
	x.mu.Lock()
	l := &x.topics["replies"].located
	loc := l.findString("old")
	if loc == nil {
		x.mu.Unlock()
		t.Fatal("old is not located")
	}
	l.remove(loc)
	loc.key = l.keyOfString("other")
	l.add(loc)
	x.mu.Unlock()

	w := x.Watch("replies", "other")
	defer w.Close()
	if !w.Stored() {
		t.Fatal("the colliding id is not stored")
	}
	for w.Err() == nil {
		_, _, changed := w.State()
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("the read-back of the colliding id never ended: %+v", x.Stats())
		}
	}
	var removed *RemovedError
	if !errors.As(w.Err(), &removed) {
		t.Fatalf("Err = %v, want a *RemovedError", w.Err())
	}
	if recs, _, _ := w.State(); len(recs) != 0 {
		t.Fatalf("the colliding id was answered with %d records of another id: %q", len(recs), recs[0].Value)
	}
}

// A reply read back is kept as if just indexed: Retention counts from the
// read, not from its records' old timestamps, so it neither vanishes at
// once after the answer nor sits at the back of the order with a time
// older than the ids before it.
func TestReplyReadBackKeptFromTheRead(t *testing.T) {
	s := &store{maxBytes: 1 << 20, retention: time.Minute}
	tp := &replyTopic{name: "replies", entries: map[string]*replyEntry{}}
	topics := map[string]*replyTopic{"replies": tp}
	read := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	old := &client.Record{Topic: "replies", Partition: 0, Offset: 3, Timestamp: read.Add(-time.Hour), Value: []byte("v")}
	s.restore(tp, "old", []*client.Record{old}, read)

	s.expire(read.Add(time.Minute-time.Second), topics)
	if tp.entries["old"] == nil {
		t.Fatal("a reply read back expired before Retention had passed since the read")
	}
	s.expire(read.Add(time.Minute+time.Second), topics)
	if tp.entries["old"] != nil {
		t.Fatal("a reply read back outlived Retention from the read")
	}
}
