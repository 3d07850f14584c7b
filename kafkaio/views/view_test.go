package views_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

func newViews(t *testing.T, st store, addr string) *views.Views {
	t.Helper()
	return newViewsChecking(t, st, addr, 0)
}

// newViewsChecking is newViews with the topics described every check (0:
// the default), for tests of what the check finds.
func newViewsChecking(t *testing.T, st store, addr string, check time.Duration) *views.Views {
	t.Helper()
	c, err := views.New(st.options(t, views.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": addr}, KafkaTimeout: 5 * time.Second,
		PartitionCheck: check,
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestViewAppliesCompactionSemantics(t *testing.T) {
	bothStores(t, testViewAppliesCompactionSemantics)
}

func testViewAppliesCompactionSemantics(t *testing.T, st store) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Partitions: 2, Compact: true})
	kafkatest.Produce(t, b.Addr(), "items",
		kafkatest.Rec{Key: []byte("a"), Value: []byte("a1"), Partition: 0},
		kafkatest.Rec{Key: []byte("b"), Value: []byte("b1"), Partition: 1},
		kafkatest.Rec{Key: []byte("a"), Value: []byte("a2"), Partition: 0, Headers: []kafka.Header{{Key: "content-type", Value: []byte("text/plain")}}},
		kafkatest.Rec{Key: []byte("b"), Value: nil, Partition: 1},      // tombstone
		kafkatest.Rec{Key: nil, Value: []byte("no key"), Partition: 0}, // not part of the view
		kafkatest.Rec{Key: []byte("e"), Value: []byte{}, Partition: 1}, // empty, not a tombstone
	)
	c := newViews(t, st, b.Addr())
	v, err := c.View(kafkatest.Ctx(t, 20*time.Second), "items")
	if err != nil {
		t.Fatal(err)
	}
	a, ok := v.Get("a")
	if !ok || string(a.Value) != "a2" || a.Partition != 0 || a.Offset != 1 {
		t.Fatalf("a = %+v, %v; want a2 at 0@1", a, ok)
	}
	if ct, ok := a.Header("content-type"); !ok || string(ct) != "text/plain" {
		t.Errorf("a's content-type = %q, %v", ct, ok)
	}
	if _, ok := v.Get("b"); ok {
		t.Error("b was deleted by a tombstone but is still in the view")
	}
	e, ok := v.Get("e")
	if !ok || e.Value == nil || len(e.Value) != 0 {
		t.Errorf("e = %+v, %v; want an empty, non-nil value", e, ok)
	}
	stats := v.Stats()
	if size := max(stats.Bytes, stats.DiskBytes); stats.Keys != 2 || stats.NullKeys != 1 || size <= 0 {
		t.Errorf("stats = %+v; want 2 keys, 1 null-key record, bytes > 0", stats)
	}
	if (stats.DiskBytes > 0) != st.disk || v.OnDisk() != st.disk {
		t.Errorf("stats = %+v, on disk %v; want the view on disk: %v", stats, v.OnDisk(), st.disk)
	}
	if p0, p1 := v.Position(0), v.Position(1); p0 != 3 || p1 != 3 {
		t.Errorf("positions = %d, %d; want 3, 3", p0, p1)
	}
}

// itemsView is a view of a compacted topic "items" holding a=a1, on a
// broker of its own.
func itemsView(t *testing.T, st store) (*views.View, string, context.Context) {
	t.Helper()
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Compact: true})
	kafkatest.Produce(t, b.Addr(), "items", kafkatest.Rec{Key: []byte("a"), Value: []byte("a1")})
	c := newViews(t, st, b.Addr())
	ctx := kafkatest.Ctx(t, 20*time.Second)
	v, err := c.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	return v, b.Addr(), ctx
}

func TestViewWakesWaitersOfTheWrittenKeyOnly(t *testing.T) {
	bothStores(t, testViewWakesWaitersOfTheWrittenKeyOnly)
}

func testViewWakesWaitersOfTheWrittenKeyOnly(t *testing.T, st store) {
	v, addr, ctx := itemsView(t, st)
	a := v.WatchKey("a")
	defer a.Stop()
	b2 := v.WatchKey("b")
	defer b2.Stop()
	wa, wb := a.C, b2.C
	changed := v.Changed()

	kafkatest.Produce(t, addr, "items", kafkatest.Rec{Key: []byte("a"), Value: []byte("a2")})
	select {
	case <-wa:
	case <-ctx.Done():
		t.Fatal("the waiter of a was not woken by a write to a")
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("Changed was not closed by a write")
	}
	select {
	case <-wb:
		t.Fatal("the waiter of b was woken by a write to a")
	default:
	}
	if e, _ := v.Get("a"); string(e.Value) != "a2" {
		t.Fatalf("a = %q after the wake-up, want a2", e.Value)
	}
}

// A woken watch's Stop (which takes no lock) leaves alone the key's next
// watch: a later write wakes the waiter registered after the first wake.
func TestViewWatchStoppedAfterItsWakeLeavesTheNextWatch(t *testing.T) {
	bothStores(t, testViewWatchStoppedAfterItsWakeLeavesTheNextWatch)
}

func testViewWatchStoppedAfterItsWakeLeavesTheNextWatch(t *testing.T, st store) {
	v, addr, ctx := itemsView(t, st)
	first := v.WatchKey("a")
	kafkatest.Produce(t, addr, "items", kafkatest.Rec{Key: []byte("a"), Value: []byte("a2")})
	select {
	case <-first.C:
	case <-ctx.Done():
		t.Fatal("the first watch was not woken")
	}
	next := v.WatchKey("a")
	defer next.Stop()
	first.Stop()
	select {
	case <-next.C:
		t.Fatal("the next watch fired before any write after it")
	default:
	}
	kafkatest.Produce(t, addr, "items", kafkatest.Rec{Key: []byte("a"), Value: []byte("a3")})
	select {
	case <-next.C:
	case <-ctx.Done():
		t.Fatal("the next watch was not woken by a write after the first watch stopped")
	}
}

// The live consumer waits long for each fetch (liveFetchWait) because the
// broker answers a waiting fetch as soon as a record arrives: that is what
// keeps its wake-ups prompt. Here the wait is a minute, longer than the
// test's bound, so the write must be answered by the broker's wake-up,
// not by the wait running out.
func TestLiveFetchIsAnsweredOnWriteNotAtItsWait(t *testing.T) {
	bothStores(t, testLiveFetchIsAnsweredOnWriteNotAtItsWait)
}

func testLiveFetchIsAnsweredOnWriteNotAtItsWait(t *testing.T, st store) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Compact: true})
	kafkatest.Produce(t, b.Addr(), "items", kafkatest.Rec{Key: []byte("a"), Value: []byte("a1")})
	c, err := views.New(st.options(t, views.Options{
		Name: "kafka0", KafkaTimeout: 5 * time.Second,
		Properties: map[string]string{"bootstrap.servers": b.Addr(), "fetch.wait.max.ms": "60000"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	v, err := c.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		key := fmt.Sprintf("k%d", i)
		w := v.WatchKey(key)
		kafkatest.Produce(t, b.Addr(), "items", kafkatest.Rec{Key: []byte(key), Value: []byte("v")})
		select {
		case <-w.C:
		case <-ctx.Done():
			t.Fatalf("write %d reached the view only after the fetch's wait, or never", i)
		}
		w.Stop()
	}
}

func TestViewOfUnknownTopic(t *testing.T) { bothStores(t, testViewOfUnknownTopic) }

func testViewOfUnknownTopic(t *testing.T, st store) {
	b := kafkatest.Broker(t)
	c := newViews(t, st, b.Addr())
	_, err := c.View(kafkatest.Ctx(t, 20*time.Second), "nope")
	if !errors.Is(err, client.ErrUnknownTopic) {
		t.Fatalf("err = %v, want ErrUnknownTopic", err)
	}
	if b.Cluster().TopicInfo("nope") != nil {
		t.Fatal("looking the topic up created it")
	}
}

func TestViewCatchUpOfManyRecords(t *testing.T) { bothStores(t, testViewCatchUpOfManyRecords) }

func testViewCatchUpOfManyRecords(t *testing.T, st store) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "big", Partitions: 3, Compact: true})
	const n = 30000
	recs := make([]kafkatest.Rec, n)
	for i := range recs {
		recs[i] = kafkatest.Rec{Key: []byte(fmt.Sprintf("k%d", i%10000)), Value: []byte(fmt.Sprint(i)), Partition: int32(i % 3)}
	}
	kafkatest.Produce(t, b.Addr(), "big", recs...)
	c := newViews(t, st, b.Addr())
	v, err := c.View(kafkatest.Ctx(t, 20*time.Second), "big")
	if err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Keys != 10000 {
		t.Fatalf("keys = %d, want 10000", st.Keys)
	}
	// k0 was last written by record 20000.
	if e, _ := v.Get("k0"); string(e.Value) != "20000" {
		t.Fatalf("k0 = %q, want 20000", e.Value)
	}
}

type readiness struct {
	ch chan string
}

func (r readiness) Set(name string, ready bool, reason string) {
	r.ch <- fmt.Sprintf("%s ready=%v %s", name, ready, reason)
}

// A warmed view reports not-ready until caught up; a missing topic stays
// not ready with the reason, and becomes ready once the topic is created.
func TestWarmReportsReadiness(t *testing.T) { bothStores(t, testWarmReportsReadiness) }

func testWarmReportsReadiness(t *testing.T, st store) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Compact: true})
	r := readiness{ch: make(chan string, 100)}
	c, err := views.New(st.options(t, views.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()},
		KafkaTimeout: 2 * time.Second, Readiness: r,
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Warm("items", "later")
	ctx := kafkatest.Ctx(t, 20*time.Second)
	seen := map[string]bool{}
	created := false
	for !seen["kafka kafka0 view items ready=true "] || !seen["kafka kafka0 view later ready=true "] {
		select {
		case s := <-r.ch:
			seen[s] = true
			if s == "kafka kafka0 view later ready=false topic does not exist: later" && !created {
				created = true
				if err := b.CreateTopics(embedded.Topic{Name: "later"}); err != nil {
					t.Fatal(err)
				}
			}
		case <-ctx.Done():
			t.Fatalf("readiness reports so far: %v", seen)
		}
	}
	if !created {
		t.Fatal("the missing topic was never reported as missing")
	}
}

// On-demand views are capped in number and evicted when idle; warmed views
// and held views are never evicted.
func TestViewLimitsAndEviction(t *testing.T) { bothStores(t, testViewLimitsAndEviction) }

func testViewLimitsAndEviction(t *testing.T, st store) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "static"}, embedded.Topic{Name: "t1"}, embedded.Topic{Name: "t2"}, embedded.Topic{Name: "t3"})
	c, err := views.New(st.options(t, views.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()}, KafkaTimeout: 5 * time.Second,
		MaxViews: 3, ViewIdle: 200 * time.Millisecond,
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := kafkatest.Ctx(t, 20*time.Second)
	c.Warm("static")
	if _, err := c.View(ctx, "static"); err != nil {
		t.Fatal(err)
	}
	v1, err := c.HoldView(ctx, "t1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := c.HoldView(ctx, "t2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// static (pinned), t1 and t2 (held): nothing can make room.
	if _, err := c.View(ctx, "t3"); !errors.Is(err, views.ErrTooManyViews) {
		t.Fatalf("a fourth view with every view pinned or held: %v, want ErrTooManyViews", err)
	}
	v2.Release()
	// t2 is idle now: it makes room for t3.
	if _, err := c.View(ctx, "t3"); err != nil {
		t.Fatalf("a fourth view once t2 was let go: %v", err)
	}
	if st := c.Stats(); st.Views != 3 {
		t.Fatalf("%d views, want 3", st.Views)
	}
	// Idle eviction: t3 goes after ViewIdle; t1 is held and static is pinned.
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Views != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d views after the idle time, want 2", c.Stats().Views)
		}
		time.Sleep(10 * time.Millisecond)
	}
	v1.Release()
	for c.Stats().Views != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d views after t1 went idle, want 1 (the warmed one)", c.Stats().Views)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// An evicted view comes back on demand, caught up again.
	kafkatest.Produce(t, b.Addr(), "t1", kafkatest.Rec{Key: []byte("k"), Value: []byte("v")})
	v, err := c.View(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := v.Get("k"); !ok || string(e.Value) != "v" {
		t.Fatalf("re-opened view: %v %v", e, ok)
	}
}

func TestViewFollowsAddedPartitions(t *testing.T) { bothStores(t, testViewFollowsAddedPartitions) }

func testViewFollowsAddedPartitions(t *testing.T, st store) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Compact: true})
	kafkatest.Produce(t, b.Addr(), "items", kafkatest.Rec{Key: []byte("a"), Value: []byte("a1")})
	c := newViewsChecking(t, st, b.Addr(), 50*time.Millisecond)
	ctx := kafkatest.Ctx(t, 20*time.Second)
	v, err := c.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	if n := v.Partitions(); n != 1 {
		t.Fatalf("the view reads %d partitions, want 1", n)
	}
	zw := v.WatchKey("z")
	defer zw.Stop()
	z := zw.C

	// Written to the added partition at once, before the view can have
	// noticed it: the view reads an added partition from its start.
	kafkatest.AddPartitions(t, b.Addr(), "items", 3)
	kafkatest.Produce(t, b.Addr(), "items", kafkatest.Rec{Key: []byte("z"), Value: []byte("z1"), Partition: 2})
	select {
	case <-z:
	case <-ctx.Done():
		t.Fatalf("a record written to an added partition never reached the view (it reads %d partitions)", v.Partitions())
	}
	if e, ok := v.Get("z"); !ok || string(e.Value) != "z1" || e.Partition != 2 {
		t.Fatalf("z = %+v, %v; want z1 from partition 2", e, ok)
	}
	if n, pos := v.Partitions(), v.Position(2); n != 3 || pos != 1 {
		t.Errorf("partitions %d, position of partition 2 %d; want 3 and 1", n, pos)
	}
	// The old partition is still read.
	kafkatest.Produce(t, b.Addr(), "items", kafkatest.Rec{Key: []byte("a"), Value: []byte("a2")})
	deadline := time.After(10 * time.Second)
	for {
		changed := v.Changed() // before the look-up, so no write falls between
		if e, ok := v.Get("a"); ok && string(e.Value) == "a2" {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("a write to partition 0 after the growth never reached the view")
		}
	}
}
