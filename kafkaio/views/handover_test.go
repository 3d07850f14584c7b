package views_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// Views that catch up together are handed over to the live consumer in
// shared assignments (handover.go): each must still be read on from exactly
// where its catch-up ended, with the record read before and the one written
// after both in the view.
func TestViewsCaughtUpTogetherAreAllFollowed(t *testing.T) {
	bothStores(t, testViewsCaughtUpTogetherAreAllFollowed)
}

func testViewsCaughtUpTogetherAreAllFollowed(t *testing.T, st store) {
	const n = 30
	topics := make([]embedded.Topic, n)
	for i := range topics {
		topics[i] = embedded.Topic{Name: fmt.Sprintf("burst-%d", i), Compact: true}
	}
	b := kafkatest.Broker(t, topics...)
	names := make([]string, n)
	for i, tp := range topics {
		names[i] = tp.Name
	}
	kafkatest.ProduceToEach(t, b.Addr(), names, kafkatest.Rec{Key: []byte("before"), Value: []byte("b")})
	c, err := views.New(st.options(t, views.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()}, KafkaTimeout: 5 * time.Second,
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := kafkatest.Ctx(t, 60*time.Second)

	c.Warm(names...) // every catch-up at once: the hand-overs come in a burst
	watches := make([]views.KeyWatch, n)
	vs := make([]*views.View, n)
	for i, name := range names {
		v, err := c.View(ctx, name)
		if err != nil {
			t.Fatalf("view %s: %v", name, err)
		}
		if e, ok := v.Get("before"); !ok || string(e.Value) != "b" {
			t.Fatalf("view %s lacks the record written before it caught up: %+v, %v", name, e, ok)
		}
		vs[i] = v
		watches[i] = v.WatchKey("after")
		defer watches[i].Stop()
	}
	kafkatest.ProduceToEach(t, b.Addr(), names, kafkatest.Rec{Key: []byte("after"), Value: []byte("a")})
	for i, v := range vs {
		select {
		case <-watches[i].C:
		case <-ctx.Done():
			t.Fatalf("a record written to %s after its hand-over never reached the view", names[i])
		}
		e, ok := v.Get("after")
		if !ok || string(e.Value) != "a" || e.Offset != 1 {
			t.Fatalf("view %s: the record written after its hand-over is %+v, %v; want value a at offset 1", names[i], e, ok)
		}
	}
}
