package writtenids

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

const (
	cidHeader = kafkatest.CIDHeader
	fpHeader  = "gateway:fingerprint"
)

type testReply = kafkatest.Reply

func testIndex(t testing.TB, addr string, opts Options, now func() time.Time) *Index {
	t.Helper()
	opts.Name = "kafka0"
	opts.Properties = map[string]string{"bootstrap.servers": addr}
	if opts.KafkaTimeout == 0 {
		opts.KafkaTimeout = 5 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	x, err := newIndex(opts, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Close)
	return x
}

func TestKeyIndexSyncSeesEveryAcknowledgedWrite(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests", Partitions: 2}})
	x := testIndex(t, b.Addr(), Options{}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	kafkatest.WriteReplies(t, b.Addr(), "requests",
		testReply{ID: "k1-a", Value: []byte("m1"), Partition: 0},
		testReply{ID: "k1-a", Value: []byte("m2"), Partition: 0},
		testReply{ID: "k2-b", Value: []byte("only"), Partition: 1},
		testReply{ID: "other", Header: "unrelated", Value: []byte("no id"), Partition: 1},
	)
	if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
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
	kafkatest.WriteReplies(t, b.Addr(), "requests", testReply{ID: "k1-a", Value: nil, Partition: 0})
	if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
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
	x := testIndex(t, b.Addr(), Options{}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	const n = 16
	var rs []testReply
	for i := range n {
		rs = append(rs, testReply{ID: "cid-" + string(rune('a'+i)), Value: []byte("v"), Partition: int32(i % 3)})
	}
	kafkatest.WriteReplies(t, b.Addr(), "requests", rs...)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- x.Sync(ctx, "requests", cidHeader, fpHeader)
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
	x := testIndex(t, b.Addr(), Options{Window: w}, now)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	kafkatest.WriteReplies(t, b.Addr(), "requests",
		testReply{ID: "too-old", Value: []byte("v"), TS: start.Add(-3 * w)},
		testReply{ID: "expired", Value: []byte("v"), TS: start.Add(-3 * w / 2)},
		testReply{ID: "fresh", Value: []byte("v"), TS: start.Add(-w / 2)},
	)
	if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
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
	x := testIndex(t, b.Addr(), Options{MaxKeys: 3}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	var rs []testReply
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		rs = append(rs, testReply{ID: id, Value: []byte("v")})
	}
	kafkatest.WriteReplies(t, b.Addr(), "requests", rs...)
	if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
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
	x := testIndex(t, b.Addr(), Options{KafkaTimeout: 2 * time.Second}, nil)
	err := x.Sync(kafkatest.Ctx(t, 10*time.Second), "missing", cidHeader, fpHeader)
	if !errors.Is(err, client.ErrNotReady) || !errors.Is(err, client.ErrUnknownTopic) {
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
	x := testIndex(t, b.Addr(), Options{}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
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
	kafkatest.WriteReplies(t, b.Addr(), "requests", testReply{ID: "in-new-partition", Value: []byte("v"), Partition: 2})
	if err := x.f.CheckPartitions(); err != nil {
		t.Fatal(err)
	}
	if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
		t.Fatal(err)
	}
	if s := x.Lookup("requests", "in-new-partition"); s.Records != 1 {
		t.Fatalf("a record in an added partition: %+v, want read", s)
	}
}

// A key's state is its first id's, whichever request later reuses the key;
// each id's fingerprint is that of its last record; a key no record names
// falls back to the id (records written before the fingerprint header).
func TestKeyIndexLookupKey(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests", Partitions: 1}})
	x := testIndex(t, b.Addr(), Options{}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	key1, key2, key3 := strings.Repeat("a1", 16), strings.Repeat("b2", 16), strings.Repeat("c3", 16)
	fp := func(v string) []kafka.Header { return []kafka.Header{{Key: fpHeader, Value: []byte(v)}} }
	kafkatest.WriteReplies(t, b.Addr(), "requests",
		testReply{ID: "k1-aaaa", Value: []byte("m1"), Extra: fp(key1 + ".0f01")},
		testReply{ID: "k1-aaaa", Value: []byte("m2"), Extra: fp(key1 + ".0f02")},
		testReply{ID: "k1-bbbb", Value: []byte("other"), Extra: fp(key1 + ".0e01")}, // two replicas at one instant
		testReply{ID: "old-cccc", Value: []byte("no header")},
		testReply{ID: "bad-dddd", Value: []byte("not hex"), Extra: fp("slot.fp")},
	)
	if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"k1-aaaa", "k1-bbbb"} {
		s := x.LookupKey("requests", key1, id)
		if s.CID != "k1-aaaa" || s.Fingerprint != "0f02" || s.Records != 2 {
			t.Fatalf("key %s looked up for %s: %+v, want the first id k1-aaaa, 2 records, fingerprint 0f02", key1, id, s)
		}
	}
	if s := x.Lookup("requests", "k1-bbbb"); s.CID != "k1-bbbb" || s.Fingerprint != "0e01" {
		t.Fatalf("k1-bbbb by its id: %+v", s)
	}
	if s := x.LookupKey("requests", key2, "old-cccc"); s.CID != "old-cccc" || s.Fingerprint != "" || s.Records != 1 {
		t.Fatalf("a record without fingerprint, by its id: %+v", s)
	}
	if s := x.LookupKey("requests", key3, "bad-dddd"); s.CID != "bad-dddd" || s.Fingerprint != "" {
		t.Fatalf("a record whose fingerprint header is malformed, by its id: %+v", s)
	}
	if s := x.LookupKey("requests", key3, "new-eeee"); s.Written() || s.CID != "" {
		t.Fatalf("an unused key: %+v", s)
	}
}

// TestKeyIndexSyncWhileTheTopicIsAssigned: a Sync that comes while the
// first Sync of its topic is assigning the topic's partitions waits for
// the assignment, rather than taking the topic as read and failing with
// "not being read", which the bindings answer as 503 or UNAVAILABLE (seen
// in the end-to-end idempotency test, two gRPC calls first on one topic).
func TestKeyIndexSyncWhileTheTopicIsAssigned(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "requests", Partitions: 2}})
	x := testIndex(t, b.Addr(), Options{}, nil)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	second := make(chan error, 1)
	var once sync.Once
	x.assigning = func() {
		once.Do(func() {
			go func() { second <- x.Sync(ctx, "requests", cidHeader, fpHeader) }()
			// Taking the topic as read, the second Sync would fail within
			// milliseconds; waiting for this assignment, it does not
			// return. No event marks a wait that has not ended, so the
			// first goes on after a moment either way.
			select {
			case err := <-second:
				second <- err
			case <-time.After(300 * time.Millisecond):
			}
		})
	}
	if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("a Sync during the first one's assignment: %v", err)
	}
}
