package replies

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/produce"
)

const cidHeader = kafkatest.CIDHeader

type testReply = kafkatest.Reply

func testIndex(t *testing.T, addr string, opts Options, now func() time.Time) *Index {
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

// waitRecords waits, the race-free way, until the watch holds n records.
func waitRecords(t *testing.T, ctx context.Context, w *Watch, n int) []*client.Record {
	t.Helper()
	for {
		recs, _, changed := w.State()
		if len(recs) >= n {
			return recs
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("%d records after waiting, want %d", len(recs), n)
		}
	}
}

func TestReplyWatchWakesOnReply(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies", Partitions: 2}})
	x := testIndex(t, b.Addr(), Options{}, nil)
	ctx := addCaughtUp(t, x, "replies")
	w := x.Watch("replies", "cid-1")
	defer w.Close()
	other := x.Watch("replies", "cid-2")
	defer other.Close()
	changed, otherChanged := w.Changed(), other.Changed()
	if len(w.Records()) != 0 || w.Terminal() {
		t.Fatal("a fresh watch has records")
	}

	start := time.Now()
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{
		ID: "cid-1", Value: []byte(`{"ok":true}`), Partition: 1,
		Extra: []kafka.Header{{Key: ":status", Value: []byte("201")}, {Key: "location", Value: []byte("/items/1")}},
	})
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the watcher was not woken")
	}
	t.Logf("reply seen %v after the write started", time.Since(start))
	recs := w.Records()
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	if r.Topic != "replies" || r.Partition != 1 || string(r.Key) != "cid-1" || !bytes.Equal(r.Value, []byte(`{"ok":true}`)) {
		t.Errorf("record = %+v", r)
	}
	wantHeaders := []client.Header{{Key: cidHeader, Value: []byte("cid-1")}, {Key: ":status", Value: []byte("201")}, {Key: "location", Value: []byte("/items/1")}}
	if len(r.Headers) != len(wantHeaders) {
		t.Fatalf("headers = %v", r.Headers)
	}
	for i, h := range wantHeaders {
		if r.Headers[i].Key != h.Key || !bytes.Equal(r.Headers[i].Value, h.Value) {
			t.Errorf("header %d = %s=%q, want %s=%q", i, r.Headers[i].Key, r.Headers[i].Value, h.Key, h.Value)
		}
	}
	if w.Terminal() {
		t.Error("a record with a value is terminal")
	}
	select {
	case <-otherChanged:
		t.Error("the waiter of another id was woken")
	default:
	}
	// Round trip with a warm producer: request written, reply seen.
	p, err := produce.New(produce.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()},
		KafkaTimeout: 5 * time.Second, Acks: client.AcksAll,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if _, _, err := p.Produce(ctx, &client.Record{Topic: "replies", Value: []byte("warm-up")}); err != nil {
		t.Fatal(err)
	}
	w3 := x.Watch("replies", "cid-3")
	defer w3.Close()
	start = time.Now()
	if _, _, err := p.Produce(ctx, &client.Record{Topic: "replies", Key: []byte("cid-3"), Value: []byte("r"),
		Headers: []client.Header{{Key: cidHeader, Value: []byte("cid-3")}}}); err != nil {
		t.Fatal(err)
	}
	acked := time.Since(start)
	waitRecords(t, ctx, w3, 1)
	t.Logf("warm producer: acknowledged in %v, watcher woken %v after the produce began", acked, time.Since(start))

	// The next arrival closes a fresh channel.
	next := w.Changed()
	if next == changed {
		t.Fatal("Changed returned the closed channel again")
	}
	select {
	case <-next:
		t.Fatal("the fresh channel is closed without a new record")
	default:
	}
}

// A second index (another replica, or a restart) finds a reply written
// before it started, and not one older than the retention.
func TestReplyWrittenBeforeTheIndexIsFoundAfterCatchUp(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies", Partitions: 3}})
	now := time.Now()
	kafkatest.WriteReplies(t, b.Addr(), "replies",
		testReply{ID: "too-old", Value: []byte("stale"), Partition: 0, TS: now.Add(-20 * time.Minute)},
		testReply{ID: "recent", Value: []byte("fresh"), Partition: 0, TS: now.Add(-5 * time.Minute)},
	)
	first := testIndex(t, b.Addr(), Options{Retention: 10 * time.Minute}, nil)
	first.Add("replies", cidHeader)
	ctx := kafkatest.Ctx(t, 20*time.Second)
	w := first.Watch("replies", "live")
	defer w.Close()
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "live", Value: []byte("first index saw it"), Partition: 2})
	waitRecords(t, ctx, w, 1)

	start := time.Now()
	second := testIndex(t, b.Addr(), Options{Retention: 10 * time.Minute}, nil)
	second.Add("replies", cidHeader)
	if err := second.WaitCaughtUp(ctx, "replies"); err != nil {
		t.Fatal(err)
	}
	t.Logf("second index caught up in %v", time.Since(start))
	for id, want := range map[string]string{"live": "first index saw it", "recent": "fresh"} {
		w := second.Watch("replies", id)
		recs := w.Records()
		w.Close()
		if len(recs) != 1 || string(recs[0].Value) != want {
			t.Errorf("%s: records %v, want one with %q", id, recs, want)
		}
	}
	old := second.Watch("replies", "too-old")
	defer old.Close()
	if recs := old.Records(); len(recs) != 0 {
		t.Errorf("a reply older than the retention was indexed: %v", recs)
	}
}

// Caught up means every record present when indexing began is indexed.
func TestReplyCaughtUpMeansEverythingRead(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies", Partitions: 3}})
	const n = 3000
	rs := make([]testReply, n)
	for i := range rs {
		rs[i] = testReply{ID: fmt.Sprint("cid-", i), Value: []byte(fmt.Sprint(i)), Partition: int32(i % 3)}
	}
	kafkatest.WriteReplies(t, b.Addr(), "replies", rs...)
	x := testIndex(t, b.Addr(), Options{}, nil)
	x.Add("replies", cidHeader)
	start := time.Now()
	if err := x.WaitCaughtUp(kafkatest.Ctx(t, 20*time.Second), "replies"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d replies indexed in %v", n, time.Since(start))
	if st := x.Stats(); st.Entries != n {
		t.Fatalf("entries = %d right after catching up, want %d", st.Entries, n)
	}
}

// gRPC: replies with values, then a null-value record that ends the call.
func TestReplyTerminalRecord(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies"}})
	x := testIndex(t, b.Addr(), Options{}, nil)
	ctx := addCaughtUp(t, x, "replies")
	w := x.Watch("replies", "call-1")
	defer w.Close()
	kafkatest.WriteReplies(t, b.Addr(), "replies",
		testReply{ID: "call-1", Value: []byte("m1")},
		testReply{ID: "call-1", Value: []byte{}}, // empty, not terminal
	)
	if recs := waitRecords(t, ctx, w, 2); len(recs) != 2 || w.Terminal() {
		t.Fatalf("%d records, terminal %v; want 2 and not terminal", len(recs), w.Terminal())
	}
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "call-1", Value: nil,
		Extra: []kafka.Header{{Key: "gateway:status", Value: []byte("9")}}})
	var recs []*client.Record
	for {
		var term bool
		var changed <-chan struct{}
		recs, term, changed = w.State()
		if term {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the terminal record did not come")
		}
	}
	if len(recs) != 3 || string(recs[0].Value) != "m1" || recs[1].Value == nil || len(recs[1].Value) != 0 || recs[2].Value != nil {
		t.Fatalf("records = %v", recs)
	}
	if recs[0].Offset >= recs[1].Offset || recs[1].Offset >= recs[2].Offset {
		t.Errorf("records out of order: %d, %d, %d", recs[0].Offset, recs[1].Offset, recs[2].Offset)
	}
}

func TestReplyMaxBytesEvictsOldestUnpinned(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies"}})
	const maxBytes = 8 << 10
	x := testIndex(t, b.Addr(), Options{MaxBytes: maxBytes}, nil)
	ctx := addCaughtUp(t, x, "replies")
	keep := x.Watch("replies", "keep")
	big := bytes.Repeat([]byte("v"), 1000)
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "keep", Value: big})
	waitRecords(t, ctx, keep, 1)

	last := x.Watch("replies", "other-29")
	var rs []testReply
	for i := 0; i < 30; i++ {
		rs = append(rs, testReply{ID: fmt.Sprint("other-", i), Value: big})
	}
	kafkatest.WriteReplies(t, b.Addr(), "replies", rs...)
	waitRecords(t, ctx, last, 1)
	last.Close()

	st := x.Stats()
	t.Logf("after 31 replies of ~1.2KB into %d bytes: %+v", maxBytes, st)
	if st.Evicted == 0 || st.Bytes > maxBytes {
		t.Fatalf("stats = %+v; want evictions and at most %d bytes", st, maxBytes)
	}
	if recs := keep.Records(); len(recs) != 1 {
		t.Fatal("the pinned reply was evicted")
	}
	w := x.Watch("replies", "other-0")
	if len(w.Records()) != 0 {
		t.Error("the oldest unpinned reply was not evicted")
	}
	w.Close()
	w = x.Watch("replies", "other-29")
	if len(w.Records()) != 1 {
		t.Error("the newest reply was evicted")
	}
	w.Close()

	// Unpinned, "keep" is now the least recently written: the next write
	// evicts it.
	keep.Close()
	last = x.Watch("replies", "other-30")
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "other-30", Value: big})
	waitRecords(t, ctx, last, 1)
	last.Close()
	w = x.Watch("replies", "keep")
	defer w.Close()
	if len(w.Records()) != 0 {
		t.Error("an unpinned old reply survived eviction")
	}
}

// fakeClock is a clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestReplyRetentionExpiry(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies"}})
	clock := &fakeClock{}
	clock.ns.Store(time.Now().UnixNano())
	x := testIndex(t, b.Addr(), Options{Retention: time.Minute}, clock.now)
	ctx := addCaughtUp(t, x, "replies")
	a, pinned := x.Watch("replies", "a"), x.Watch("replies", "pinned")
	defer pinned.Close()
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "a", Value: []byte("1")}, testReply{ID: "pinned", Value: []byte("2")})
	waitRecords(t, ctx, a, 1)
	waitRecords(t, ctx, pinned, 1)
	a.Close()

	x.expire(clock.now().Add(30 * time.Second))
	if st := x.Stats(); st.Entries != 2 || st.Expired != 0 {
		t.Fatalf("within the retention: %+v", st)
	}
	clock.advance(2 * time.Minute)
	x.expire(clock.now())
	st := x.Stats()
	if st.Expired != 1 || st.Entries != 1 {
		t.Fatalf("after the retention: %+v; want a expired and the pinned one kept", st)
	}
	if len(pinned.Records()) != 1 {
		t.Error("the pinned reply expired")
	}
	w := x.Watch("replies", "a")
	defer w.Close()
	if len(w.Records()) != 0 {
		t.Error("the expired reply is still there")
	}
}

func TestReplySplitAcrossPartitionsIsCounted(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies", Partitions: 2}})
	sink := &kafkatest.LogSink{}
	x := testIndex(t, b.Addr(), Options{Logger: slog.New(sink)}, nil)
	x.Add("replies", cidHeader)
	ctx := kafkatest.Ctx(t, 20*time.Second)
	w := x.Watch("replies", "cid")
	defer w.Close()
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "cid", Value: []byte("p0"), Partition: 0})
	waitRecords(t, ctx, w, 1)
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "cid", Value: []byte("p1"), Partition: 1})
	waitRecords(t, ctx, w, 2)
	if n := x.SplitReplies(); n != 1 {
		t.Errorf("split replies = %d, want 1", n)
	}
	if !sink.Has("replies of one correlation id in several partitions") {
		t.Error("the split was not logged")
	}
}

// Each topic is indexed by its own header name (HTTP and gRPC bindings may
// name it differently).
func TestReplyHeaderNamePerTopic(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "http-replies"}, {Name: "grpc-replies"}})
	x := testIndex(t, b.Addr(), Options{}, nil)
	x.Add("http-replies", cidHeader)
	x.Add("grpc-replies", "zilla:correlation-id")
	x.Add("grpc-replies", "zilla:correlation-id") // idempotent
	ctx := kafkatest.Ctx(t, 20*time.Second)
	for _, topic := range []string{"http-replies", "grpc-replies"} {
		if err := x.WaitCaughtUp(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	g := x.Watch("grpc-replies", "g1")
	defer g.Close()
	kafkatest.WriteReplies(t, b.Addr(), "grpc-replies",
		testReply{ID: "g1", Value: []byte("wrong header")}, // named cidHeader: not indexed here
		testReply{ID: "g1", Header: "zilla:correlation-id", Value: []byte("right header")},
	)
	recs := waitRecords(t, ctx, g, 1)
	if len(recs) != 1 || string(recs[0].Value) != "right header" {
		t.Fatalf("records = %v", recs)
	}
	if st := x.Stats(); st.WithoutHeader != 1 {
		t.Errorf("records without the header = %d, want 1", st.WithoutHeader)
	}
}

type readinessLog struct {
	mu   sync.Mutex
	last map[string]string
	ch   chan struct{}
}

func (r *readinessLog) Set(name string, ready bool, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last[name] = fmt.Sprintf("ready=%v %s", ready, reason)
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *readinessLog) get(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[name]
}

func TestReplyReadinessAndMissingTopic(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies"}})
	r := &readinessLog{last: map[string]string{}, ch: make(chan struct{}, 1)}
	x := testIndex(t, b.Addr(), Options{Readiness: r}, nil)
	x.Add("replies", cidHeader)
	x.Add("later", cidHeader)
	ctx := kafkatest.Ctx(t, 20*time.Second)

	start := time.Now()
	err := x.WaitCaughtUp(ctx, "later")
	t.Logf("missing reply topic: %v after %v", err, time.Since(start))
	if !errors.Is(err, client.ErrNotReady) || !errors.Is(err, client.ErrUnknownTopic) {
		t.Fatalf("err = %v, want ErrNotReady and ErrUnknownTopic", err)
	}
	if err := x.WaitCaughtUp(ctx, "never-added"); !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("err = %v for a topic never added", err)
	}
	if err := x.WaitCaughtUp(ctx, "replies"); err != nil {
		t.Fatal(err)
	}
	for r.get("kafka kafka0 replies replies") != "ready=true " || r.get("kafka kafka0 replies later") != "ready=false topic does not exist: later" {
		select {
		case <-r.ch:
		case <-ctx.Done():
			t.Fatalf("readiness: %v", r.last)
		}
	}
	if err := b.CreateTopics(embedded.Topic{Name: "later"}); err != nil {
		t.Fatal(err)
	}
	for r.get("kafka kafka0 replies later") != "ready=true " {
		select {
		case <-r.ch:
		case <-ctx.Done():
			t.Fatalf("readiness: %v", r.last)
		}
	}
	if err := x.WaitCaughtUp(ctx, "later"); err != nil {
		t.Fatal(err)
	}
	w := x.Watch("later", "c")
	defer w.Close()
	kafkatest.WriteReplies(t, b.Addr(), "later", testReply{ID: "c", Value: []byte("v")})
	waitRecords(t, ctx, w, 1)
}

// Many waiters of one id and a stream of its records: every waiter sees
// every record, with no lock held across the wait.
func TestReplyConcurrentWaiters(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies"}})
	x := testIndex(t, b.Addr(), Options{}, nil)
	x.Add("replies", cidHeader)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	if err := x.WaitCaughtUp(ctx, "replies"); err != nil {
		t.Fatal(err)
	}
	const waiters, records = 50, 20
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	ready := make(chan struct{}, waiters)
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := x.Watch("replies", "stream")
			defer w.Close()
			ready <- struct{}{}
			for {
				recs, term, changed := w.State()
				if term {
					if len(recs) != records+1 {
						errs <- fmt.Errorf("%d records at the end, want %d", len(recs), records+1)
					}
					for j, r := range recs[:records] {
						if string(r.Value) != fmt.Sprint(j) {
							errs <- fmt.Errorf("record %d = %q", j, r.Value)
						}
					}
					return
				}
				select {
				case <-changed:
				case <-ctx.Done():
					errs <- fmt.Errorf("stopped at %d records", len(recs))
					return
				}
			}
		}()
	}
	for i := 0; i < waiters; i++ {
		<-ready
	}
	var rs []testReply
	for j := 0; j < records; j++ {
		rs = append(rs, testReply{ID: "stream", Value: []byte(fmt.Sprint(j))})
	}
	rs = append(rs, testReply{ID: "stream", Value: nil})
	kafkatest.WriteReplies(t, b.Addr(), "replies", rs...)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := x.Stats(); st.Pinned != 0 {
		t.Errorf("%d ids still pinned after every watch closed", st.Pinned)
	}
}

// An id watched and released with no reply leaves nothing behind.
func TestReplyWatchWithoutReplyHoldsNothing(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies"}})
	x := testIndex(t, b.Addr(), Options{}, nil)
	x.Add("replies", cidHeader)
	w1, w2 := x.Watch("replies", "nothing"), x.Watch("replies", "nothing")
	if w1.Changed() != w2.Changed() {
		t.Error("two waiters of one id do not share the channel")
	}
	w1.Close()
	w1.Close() // idempotent
	if st := x.Stats(); st.Pinned != 1 {
		t.Errorf("pinned = %d with one watch left", st.Pinned)
	}
	w2.Close()
	x.mu.Lock()
	n := len(x.topics["replies"].entries)
	x.mu.Unlock()
	if st := x.Stats(); n != 0 || st.Pinned != 0 || st.Bytes != 0 {
		t.Errorf("after closing: %d entries, %+v", n, st)
	}
}

// Partitions added to reply topics after the index started are read from
// their first record, and the topics stay caught up.
func TestReplyPartitionsAddedAreFollowed(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies", Partitions: 1}, {Name: "other", Partitions: 1}})
	sink := &kafkatest.LogSink{}
	x := testIndex(t, b.Addr(), Options{PartitionCheck: 50 * time.Millisecond, Logger: slog.New(sink)}, nil)
	x.Add("replies", cidHeader)
	x.Add("other", cidHeader)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	for _, topic := range []string{"replies", "other"} {
		if err := x.WaitCaughtUp(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}

	ac, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	res, err := ac.CreatePartitions(ctx, []kafka.PartitionsSpecification{
		{Topic: "replies", IncreaseTo: 3},
		{Topic: "other", IncreaseTo: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("adding partitions to %s: %v", r.Topic, r.Error)
		}
	}

	w := x.Watch("replies", "in-new-partition")
	defer w.Close()
	o := x.Watch("other", "in-new-partition")
	defer o.Close()
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "in-new-partition", Value: []byte("p2"), Partition: 2})
	kafkatest.WriteReplies(t, b.Addr(), "other", testReply{ID: "in-new-partition", Value: []byte("p1"), Partition: 1})
	if recs := waitRecords(t, ctx, w, 1); recs[0].Partition != 2 || string(recs[0].Value) != "p2" {
		t.Fatalf("records = %v, want the one in partition 2", recs)
	}
	if recs := waitRecords(t, ctx, o, 1); recs[0].Partition != 1 || string(recs[0].Value) != "p1" {
		t.Fatalf("records = %v, want the one in partition 1", recs)
	}
	x.mu.Lock()
	caught, parts := x.topics["replies"].caught, x.f.Partitions("replies")
	x.mu.Unlock()
	if !caught || parts != 3 {
		t.Errorf("replies: caught up %v with %d partitions, want caught up with 3", caught, parts)
	}
	// The follower logs once the added partitions are assigned, which may
	// come after their first records were read.
	n := sink.WaitCount(ctx, "reading partitions added to a reply topic", 2)
	if n != 2 {
		t.Errorf("the added partitions were logged %d times, want once per topic", n)
	}
}

// The index's consumer comes with its first topic: an index nobody adds a
// topic to has none (no librdkafka client, poll loop or statistics), and
// the first topic added later is read as if the index had started with it.
func TestReplyConsumerComesWithTheFirstTopic(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "replies"}})
	stats := client.NewRdStats()
	x := testIndex(t, b.Addr(), Options{Stats: stats}, nil)
	x.connMu.Lock()
	cons := x.f
	x.connMu.Unlock()
	if cons != nil {
		t.Fatal("a reply consumer before any reply topic was added")
	}
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "cid-1", Value: []byte("before")})

	ctx := addCaughtUp(t, x, "replies")
	w := x.Watch("replies", "cid-1")
	defer w.Close()
	if recs := w.Records(); len(recs) != 1 || string(recs[0].Value) != "before" {
		t.Fatalf("the reply written before the first topic was added: %d records", len(recs))
	}
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "cid-1", Value: []byte("after")})
	if recs := waitRecords(t, ctx, w, 2); string(recs[1].Value) != "after" {
		t.Fatalf("the reply written after: %q", recs[1].Value)
	}
}

// Closing an index that never had a topic closes nothing it did not make.
func TestReplyIndexWithoutTopicsCloses(t *testing.T) {
	x, err := New(Options{Name: "kafka0", Properties: map[string]string{"bootstrap.servers": "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	x.Close()
	x.Add("replies", cidHeader) // after Close: ignored, no consumer created
	if x.f != nil {
		t.Fatal("a consumer created after Close")
	}
}

// First answers an HTTP waiter: nil and a channel before the first reply,
// the first reply (and no channel) after, whatever comes next.
func TestReplyWatchFirst(t *testing.T) {
	b, x, ctx := caughtUpIndex(t, "replies")
	w := x.Watch("replies", "cid-first")
	defer w.Close()
	first, changed := w.First()
	if first != nil || changed == nil {
		t.Fatalf("before any reply: First() = %v, %v; want nil and a channel", first, changed)
	}
	kafkatest.WriteReplies(t, b.Addr(), "replies", testReply{ID: "cid-first", Value: []byte("one")}, testReply{ID: "cid-first", Value: []byte("two")})
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the channel First returned was not closed by the reply")
	}
	waitRecords(t, ctx, w, 2)
	first, changed = w.First()
	if first == nil || string(first.Value) != "one" || changed != nil {
		t.Fatalf("after two replies: First() = %+v, %v; want the first reply and no channel", first, changed)
	}
	if first.Topic != "replies" {
		t.Errorf("the reply names topic %q", first.Topic)
	}
}

// The index's order of entries: pushed at the back, moved to the back
// when written again, removed from anywhere.
func TestReplyOrder(t *testing.T) {
	var o replyOrder
	es := []*replyEntry{{id: "a"}, {id: "b"}, {id: "c"}}
	for _, e := range es {
		o.pushBack(e)
	}
	ids := func() (fwd, back string) {
		for e := o.front; e != nil; e = e.next {
			fwd += e.id
		}
		for e := o.back; e != nil; e = e.prev {
			back += e.id
		}
		return fwd, back
	}
	check := func(want string, n int) {
		t.Helper()
		fwd, back := ids()
		rev := []byte(want)
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		if fwd != want || back != string(rev) || o.n != n {
			t.Fatalf("order %q (backwards %q), %d entries; want %q, %d", fwd, back, o.n, want, n)
		}
	}
	check("abc", 3)
	o.moveToBack(es[0])
	check("bca", 3)
	o.moveToBack(es[0]) // already at the back
	check("bca", 3)
	o.remove(es[2])
	check("ba", 2)
	if es[2].listed || es[2].prev != nil || es[2].next != nil {
		t.Error("a removed entry keeps its links")
	}
	o.remove(es[1])
	o.remove(es[0])
	check("", 0)
	if o.front != nil || o.back != nil {
		t.Error("an empty order has ends")
	}
}

// caughtUpIndex is a broker with topic and an index of it, caught up.
func caughtUpIndex(t *testing.T, topic string) (*embedded.Broker, *Index, context.Context) {
	t.Helper()
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: topic}})
	x := testIndex(t, b.Addr(), Options{}, nil)
	return b, x, addCaughtUp(t, x, topic)
}

// addCaughtUp adds topic to x and waits until its index caught up; the
// context it returns bounds the rest of the test's waits.
func addCaughtUp(t *testing.T, x *Index, topic string) context.Context {
	t.Helper()
	x.Add(topic, cidHeader)
	ctx := kafkatest.Ctx(t, 20*time.Second)
	if err := x.WaitCaughtUp(ctx, topic); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// A reply record is converted whole whatever its number of headers (a few
// share the record's allocation); the slice of an id's records handed out
// before a second record came does not change when it comes.
func TestReplyRecordsConvertedAndAppendOnly(t *testing.T) {
	topic := "replies"
	x := &Index{
		logger: slog.New(slog.DiscardHandler), now: time.Now,
		topics: map[string]*replyTopic{},
		opts:   Options{MaxBytes: 1 << 30, Retention: time.Hour},
		store:  store{maxBytes: 1 << 30, retention: time.Hour},
	}
	x.topics[topic] = &replyTopic{name: topic, headers: []string{cidHeader}, entries: map[string]*replyEntry{}}
	for n := 1; n <= 7; n++ {
		cid := fmt.Sprint("cid-", n)
		w := x.Watch(topic, cid)
		m := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Offset: kafka.Offset(n)},
			Key:            []byte("k"), Value: []byte(fmt.Sprint("v", n)),
			Timestamp: time.UnixMilli(1_760_000_000_000), TimestampType: kafka.TimestampCreateTime,
		}
		m.Headers = append(m.Headers, kafka.Header{Key: cidHeader, Value: []byte(cid)})
		for i := 1; i < n; i++ {
			m.Headers = append(m.Headers, kafka.Header{Key: fmt.Sprint("h", i), Value: []byte(fmt.Sprint(i))})
		}
		x.apply(m)
		before := w.Records()
		if len(before) != 1 {
			t.Fatalf("%d headers: %d records", n, len(before))
		}
		r := before[0]
		if string(r.Value) != fmt.Sprint("v", n) || r.Offset != int64(n) || !r.Timestamp.Equal(m.Timestamp) ||
			len(r.Headers) != n || cap(r.Headers) != n {
			t.Fatalf("%d headers: %+v", n, r)
		}
		for i, h := range m.Headers {
			if r.Headers[i].Key != h.Key || string(r.Headers[i].Value) != string(h.Value) {
				t.Fatalf("%d headers: header %d is %s=%s, want %s=%s", n, i, r.Headers[i].Key, r.Headers[i].Value, h.Key, h.Value)
			}
		}
		m2 := *m
		m2.TopicPartition.Offset++
		m2.Value = []byte("second")
		x.apply(&m2)
		if after := w.Records(); len(after) != 2 || after[0] != r || string(after[1].Value) != "second" || before[0] != r {
			t.Fatalf("%d headers: records after a second reply %v (before: %v)", n, after, before)
		}
		w.Close()
	}
}
