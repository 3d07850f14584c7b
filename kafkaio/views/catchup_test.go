package views_test

import (
	"fmt"
	"runtime/pprof"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// catchUpBound is the most a catch-up of 200,000 records may delay a wake-up
// on a view that is already live: the catch-up runs on its own consumer, so
// only CPU sharing slows the live consumer down.
const catchUpBound = 500 * time.Millisecond

// A large catch-up must not hold back wake-ups on live views. The test
// measures the wake-up latency of a live view at rest and while a new view
// reads 200,000 records, and bounds the difference of the medians.
//
// It runs on the memory store alone: what it measures is the separation of
// the catch-up's consumer from the live one, the same for both stores, and
// a catch-up of 200,000 records into a store on disk under the race
// detector outlasts its bound (the disk store's load speed is measured in
// BENCHMARKS.md).
func TestLargeCatchUpDoesNotDelayLiveWakeUps(t *testing.T) {
	testLargeCatchUpDoesNotDelayLiveWakeUps(t, stores[0])
}

func testLargeCatchUpDoesNotDelayLiveWakeUps(t *testing.T, st store) {
	if testing.Short() {
		t.Skip("writes 200,000 records")
	}
	b := kafkatest.Broker(t, embedded.Topic{Name: "live", Compact: true}, embedded.Topic{Name: "big", Partitions: 2, Compact: true})
	bigProducer(t, b.Addr(), "big", 200_000)

	c := newViews(t, st, b.Addr())
	ctx := kafkatest.Ctx(t, 20*time.Second)
	live, err := c.View(ctx, "live")
	if err != nil {
		t.Fatal(err)
	}
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3, "linger.ms": 0})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	topic := "live"
	wakeUp := func(i int) time.Duration {
		key := fmt.Sprintf("k%d", i)
		w := live.WatchKey(key)
		defer w.Stop()
		ch := w.C
		start := time.Now()
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: []byte(key), Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			return time.Since(start)
		case <-ctx.Done():
			t.Fatal("no wake-up")
			return 0
		}
	}
	median := func(ds []time.Duration) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}

	var rest []time.Duration
	for i := 0; i < 20; i++ {
		rest = append(rest, wakeUp(i))
	}

	done := make(chan error, 1)
	go func() {
		_, err := c.View(ctx, "big")
		done <- err
	}()
	var during []time.Duration
	for i := 100; ; i++ {
		during = append(during, wakeUp(i))
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			big, _ := c.View(ctx, "big")
			if n := big.Stats().Keys; n != 200_000 {
				t.Fatalf("big view has %d keys, want 200000", n)
			}
			mr, md := median(rest), median(during)
			t.Logf("live wake-up median: %v at rest, %v during the catch-up (%d samples)", mr, md, len(during))
			if md-mr > catchUpBound {
				t.Fatalf("the catch-up delayed live wake-ups by %v (bound %v)", md-mr, catchUpBound)
			}
			return
		default:
		}
	}
}

func bigProducer(t *testing.T, addr, topic string, n int) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": addr, "log_level": 3, "linger.ms": 20, "batch.num.messages": 10000})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, n)
	acked := 0
	ack := func() {
		if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
		acked++
	}
	for i := 0; i < n; i++ {
		for {
			err := p.Produce(&kafka.Message{
				TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: int32(i % 2)},
				Key:            []byte(fmt.Sprintf("key-%07d", i)), Value: []byte(`{"v":1234567890}`),
			}, done)
			if err == nil {
				break
			}
			ack() // the local queue is full: wait for a delivery to make room
		}
	}
	for acked < n {
		ack()
	}
}

// Closing a client while a view catches up stops the catch-up's reader (the
// goroutine polling its consumer) before the consumer is closed: none is
// left once Close returns. The stores take their turns, not bothStores'
// parallel runs: the check reads every goroutine of the process, and the
// other store's catch-up would have a reader of its own.
func TestClosedMidCatchUpLeavesNoReader(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { testClosedMidCatchUpLeavesNoReader(t, st) })
	}
}

func testClosedMidCatchUpLeavesNoReader(t *testing.T, st store) {
	if testing.Short() {
		t.Skip("writes 100,000 records")
	}
	b := kafkatest.Broker(t, embedded.Topic{Name: "big", Partitions: 2, Compact: true})
	bigProducer(t, b.Addr(), "big", 100_000)
	c := newViews(t, st, b.Addr())
	c.Warm("big")
	ctx := kafkatest.Ctx(t, 20*time.Second)
	for s := c.Stats(); s.Keys == 0 || s.Ready > 0; s = c.Stats() {
		if s.Ready > 0 {
			t.Fatal("the view caught up before the test saw it read: write more records")
		}
		select {
		case <-ctx.Done():
			t.Fatal("the catch-up applied no record")
		case <-time.After(time.Millisecond): // polling the view's count
		}
	}
	c.Close()
	if stacks := goroutineStacks(); strings.Contains(stacks, "views.(*Views).read") {
		t.Errorf("a catch-up's reader is left after Close:\n%s", stacks)
	}
}

// goroutineStacks is every goroutine's stack.
func goroutineStacks() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}
