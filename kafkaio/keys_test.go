package kafkaio

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

func testKeyIndex(t testing.TB, addr string, opts KeyIndexOptions, now func() time.Time) *KeyIndex {
	t.Helper()
	opts.Name = "kafka0"
	opts.Properties = map[string]string{"bootstrap.servers": addr}
	if opts.KafkaTimeout == 0 {
		opts.KafkaTimeout = 5 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	x, err := newKeyIndex(opts, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Close)
	return x
}

func TestKeyIndexSyncSeesEveryAcknowledgedWrite(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests", Partitions: 2}})
	x := testKeyIndex(t, b.Addr(), KeyIndexOptions{}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	writeReplies(t, b.Addr(), "requests",
		testReply{id: "k1-a", value: []byte("m1"), partition: 0},
		testReply{id: "k1-a", value: []byte("m2"), partition: 0},
		testReply{id: "k2-b", value: []byte("only"), partition: 1},
		testReply{id: "other", header: "unrelated", value: []byte("no id"), partition: 1},
	)
	if err := x.Sync(ctx, "requests", cidHeader); err != nil {
		t.Fatal(err)
	}
	if s := x.Lookup("requests", "k1-a"); s.Records != 2 || s.Ended || s.Expired || !s.Written() {
		t.Fatalf("k1-a: %+v, want 2 records, not ended, not expired", s)
	}
	if s := x.Lookup("requests", "k2-b"); s.Records != 1 {
		t.Fatalf("k2-b: %+v, want 1 record", s)
	}
	if s := x.Lookup("requests", "other"); s.Written() {
		t.Fatalf("a record under another header was indexed: %+v", s)
	}

	// A write acknowledged after the first Sync is seen by the next one,
	// with no wait in between: Sync reads the end offsets afresh.
	writeReplies(t, b.Addr(), "requests", testReply{id: "k1-a", value: nil, partition: 0})
	if err := x.Sync(ctx, "requests", cidHeader); err != nil {
		t.Fatal(err)
	}
	if s := x.Lookup("requests", "k1-a"); s.Records != 3 || !s.Ended {
		t.Fatalf("k1-a after its terminal record: %+v, want 3 records, ended", s)
	}
	st := x.Stats()
	if st.Keys != 2 || st.Records != 5 || st.Topics != 1 || st.Hits != 3 {
		t.Fatalf("stats %+v, want 2 keys, 5 records read, 1 topic, 3 hits", st)
	}
}

func TestKeyIndexConcurrentSyncs(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests", Partitions: 3}})
	x := testKeyIndex(t, b.Addr(), KeyIndexOptions{}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	const n = 16
	var rs []testReply
	for i := range n {
		rs = append(rs, testReply{id: "cid-" + string(rune('a'+i)), value: []byte("v"), partition: int32(i % 3)})
	}
	writeReplies(t, b.Addr(), "requests", rs...)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- x.Sync(ctx, "requests", cidHeader)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every id was written before every Sync.
	for i := range n {
		if s := x.Lookup("requests", "cid-"+string(rune('a'+i))); s.Records != 1 {
			t.Fatalf("cid-%c: %+v after its writer's Sync", 'a'+i, s)
		}
	}
	t.Logf("%d Syncs ran %d look-ups", n, x.Stats().Syncs)
}

func TestKeyIndexWindow(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests"}})
	var clock atomic.Int64
	start := time.Now()
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	const w = time.Hour
	x := testKeyIndex(t, b.Addr(), KeyIndexOptions{Window: w}, now)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	writeReplies(t, b.Addr(), "requests",
		testReply{id: "too-old", value: []byte("v"), ts: start.Add(-3 * w)},
		testReply{id: "expired", value: []byte("v"), ts: start.Add(-3 * w / 2)},
		testReply{id: "fresh", value: []byte("v"), ts: start.Add(-w / 2)},
	)
	if err := x.Sync(ctx, "requests", cidHeader); err != nil {
		t.Fatal(err)
	}
	if s := x.Lookup("requests", "too-old"); s.Written() {
		t.Fatalf("a record older than twice the window was read back: %+v", s)
	}
	if s := x.Lookup("requests", "expired"); !s.Written() || !s.Expired {
		t.Fatalf("expired: %+v, want written and expired", s)
	}
	if s := x.Lookup("requests", "fresh"); !s.Written() || s.Expired {
		t.Fatalf("fresh: %+v, want written, not expired", s)
	}

	// An hour on, fresh is expired; expired is past twice the window and
	// forgotten.
	clock.Add(int64(w))
	x.forget(now())
	if s := x.Lookup("requests", "fresh"); !s.Expired {
		t.Fatalf("fresh an hour later: %+v, want expired", s)
	}
	if s := x.Lookup("requests", "expired"); s.Written() {
		t.Fatalf("an id past twice the window is remembered: %+v", s)
	}
	if st := x.Stats(); st.Forgotten != 1 || st.Keys != 1 || st.Expired != 2 {
		t.Fatalf("stats %+v, want 1 forgotten, 1 key, 2 expired look-ups", st)
	}
}

func TestKeyIndexEvictsOldestFirst(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests"}})
	x := testKeyIndex(t, b.Addr(), KeyIndexOptions{MaxKeys: 3}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	var rs []testReply
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		rs = append(rs, testReply{id: id, value: []byte("v")})
	}
	writeReplies(t, b.Addr(), "requests", rs...)
	if err := x.Sync(ctx, "requests", cidHeader); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if x.Lookup("requests", id).Written() {
			t.Fatalf("%s is remembered beyond MaxKeys", id)
		}
	}
	for _, id := range []string{"c", "d", "e"} {
		if !x.Lookup("requests", id).Written() {
			t.Fatalf("%s, among the newest, was evicted", id)
		}
	}
	if st := x.Stats(); st.Evicted != 2 || st.Keys != 3 {
		t.Fatalf("stats %+v, want 2 evicted, 3 keys", st)
	}
}

func TestKeyIndexUnknownTopic(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests"}})
	x := testKeyIndex(t, b.Addr(), KeyIndexOptions{KafkaTimeout: 2 * time.Second}, nil)
	err := x.Sync(kafkatest.Ctx(t, 10*time.Second), "missing", cidHeader)
	if !errors.Is(err, ErrNotReady) || !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("Sync of a missing topic: %v, want ErrNotReady and ErrUnknownTopic", err)
	}
	if st := x.Stats(); st.Topics != 0 {
		t.Fatalf("a missing topic is kept: %+v", st)
	}
}

// Partitions added to a request topic are read from their beginning once
// the index has looked (checkPartitions), and Sync waits for them too.
func TestKeyIndexFollowsAddedPartitions(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests"}})
	x := testKeyIndex(t, b.Addr(), KeyIndexOptions{}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	if err := x.Sync(ctx, "requests", cidHeader); err != nil {
		t.Fatal(err)
	}
	ac, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	res, err := ac.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: "requests", IncreaseTo: 3}})
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("adding partitions: %v %v", err, res)
	}
	writeReplies(t, b.Addr(), "requests", testReply{id: "in-new-partition", value: []byte("v"), partition: 2})
	if err := x.checkPartitions(); err != nil {
		t.Fatal(err)
	}
	if err := x.Sync(ctx, "requests", cidHeader); err != nil {
		t.Fatal(err)
	}
	if s := x.Lookup("requests", "in-new-partition"); s.Records != 1 {
		t.Fatalf("a record in an added partition: %+v, want read", s)
	}
}
