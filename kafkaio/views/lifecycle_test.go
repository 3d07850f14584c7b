package views_test

import (
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// A topic deleted and created again, with more records than the view had
// read (so the live consumer's position is valid in the new generation),
// is not merged into the view: the view is dropped, its waiters woken, and
// the topic's next view holds the new generation alone, under its new id.
func TestRecreatedTopicIsRebuilt(t *testing.T) { bothStores(t, testRecreatedTopicIsRebuilt) }

func testRecreatedTopicIsRebuilt(t *testing.T, st store) {
	topic := embedded.Topic{Name: "gen", Compact: true}
	b := kafkatest.Broker(t, topic)
	kafkatest.Produce(t, b.Addr(), "gen", kafkatest.Rec{Key: []byte("a"), Value: []byte("a1")})
	c := newViewsChecking(t, st, b.Addr(), 50*time.Millisecond)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	v1, err := c.View(ctx, "gen")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v1.Get("a"); !ok {
		t.Fatal("the view lacks a")
	}
	w := v1.WatchKey("never-written")
	defer w.Stop()

	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if res, err := a.DeleteTopics(ctx, []string{"gen"}); err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("deleting the topic: %v %v", err, res)
	}
	if err := b.CreateTopics(topic); err != nil {
		t.Fatal(err)
	}
	kafkatest.Produce(t, b.Addr(), "gen",
		kafkatest.Rec{Key: []byte("b1"), Value: []byte("1")},
		kafkatest.Rec{Key: []byte("b2"), Value: []byte("2")},
		kafkatest.Rec{Key: []byte("b3"), Value: []byte("3")})

	select {
	case <-w.C:
	case <-ctx.Done():
		t.Fatal("the view's waiter was not woken")
	}
	// Depending on when the views looked, the view was dropped for the
	// deletion or for the new generation: either way it is gone.
	if gone := v1.Gone(); !errors.Is(gone, views.ErrTopicRecreated) && !errors.Is(gone, views.ErrTopicDeleted) {
		t.Fatalf("the old view's Gone: %v", gone)
	}
	v2, err := c.HoldView(ctx, "gen", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Release()
	if v2 == v1 || v2.TopicID() == v1.TopicID() {
		t.Fatalf("the topic's view after its recreation is the old generation's (id %x)", v2.TopicID())
	}
	var keys []string
	v2.Scan(func(e views.Entry) bool { keys = append(keys, e.Key); return true })
	sort.Strings(keys)
	if len(keys) != 3 || keys[0] != "b1" || keys[2] != "b3" {
		t.Fatalf("the rebuilt view holds %v, want the new generation's b1 b2 b3 alone", keys)
	}
}

// Records removed below a view's position (DeleteRecords, as the retention
// of a compacted and deleted topic does): the topic check reads the log
// start and the view no longer shows the keys whose record is gone, waking
// their waiters; the keys whose latest record is still in the log stay.
func TestRecordsRemovedBelowAViewLeaveIt(t *testing.T) {
	bothStores(t, testRecordsRemovedBelowAViewLeaveIt)
}

func testRecordsRemovedBelowAViewLeaveIt(t *testing.T, st store) {
	topic := embedded.Topic{Name: "trunc", Compact: true}
	b := kafkatest.Broker(t, topic)
	kafkatest.Produce(t, b.Addr(), "trunc",
		kafkatest.Rec{Key: []byte("a"), Value: []byte("a1")},
		kafkatest.Rec{Key: []byte("b"), Value: []byte("b1")},
		kafkatest.Rec{Key: []byte("c"), Value: []byte("c1")},
		kafkatest.Rec{Key: []byte("a"), Value: []byte("a2")})
	c := newViewsChecking(t, st, b.Addr(), 50*time.Millisecond)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	v, err := c.HoldView(ctx, "trunc", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	if _, ok := v.Get("b"); !ok {
		t.Fatal("the view lacks b")
	}
	version := v.Version()
	w := v.WatchKey("b")
	defer w.Stop()
	kafkatest.DeleteRecords(t, b.Addr(), "trunc", 0, 2) // b1 at offset 1 goes; c1 at 2 and a2 at 3 stay
	select {
	case <-w.C:
	case <-ctx.Done():
		t.Fatal("the waiter of a removed key was not woken")
	}
	if _, ok := v.Get("b"); ok {
		t.Error("the view still shows b, whose record was removed from the log")
	}
	if e, ok := v.Get("a"); !ok || string(e.Value) != "a2" {
		t.Errorf("a: %q %v, want a2", e.Value, ok)
	}
	if _, ok := v.Get("c"); !ok {
		t.Error("the view lost c, whose record is still in the log")
	}
	if v.Gone() != nil || v.Version() == version {
		t.Errorf("the view is gone (%v) or its version unchanged (%d): want it kept, with a new version", v.Gone(), v.Version())
	}
}
