package views_test

import (
	"errors"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// A handle holds the view it held before without looking it up; its hold
// keeps the view from eviction like HoldView's; once the view is evicted the
// handle opens the topic's view anew, caught up and answering as before.
func TestViewHandleFollowsEviction(t *testing.T) { bothStores(t, testViewHandleFollowsEviction) }

func testViewHandleFollowsEviction(t *testing.T, st store) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "a"}, embedded.Topic{Name: "b"})
	kafkatest.Produce(t, b.Addr(), "a", kafkatest.Rec{Key: []byte("k"), Value: []byte("v1")})
	c, err := views.New(st.options(t, views.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()}, KafkaTimeout: 5 * time.Second,
		MaxViews: 1,
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := kafkatest.Ctx(t, 20*time.Second)
	h := c.Handle("a")
	if c.Handle("a") != h {
		t.Fatal("two handles of one topic")
	}

	get := func() *views.View {
		t.Helper()
		v, err := h.Hold(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer v.Release()
		if e, ok := v.Get("k"); !ok || string(e.Value) != "v1" {
			t.Fatalf("through the handle: %q %v, want v1", e.Value, ok)
		}
		return v
	}
	first := get()
	if again := get(); again != first {
		t.Fatal("the handle looked the view up again although it was not evicted")
	}

	// Held through the handle, the view is not evicted to make room.
	held, err := h.Hold(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.View(ctx, "b"); !errors.Is(err, views.ErrTooManyViews) {
		t.Fatalf("another view while the only one is held through a handle: %v, want ErrTooManyViews", err)
	}
	held.Release()

	// Let go of, it makes room for b: evicted.
	vb, err := c.HoldView(ctx, "b", time.Minute)
	if err != nil {
		t.Fatalf("another view once the handle let go: %v", err)
	}
	vb.Release()
	if st := c.Stats(); st.Views != 1 {
		t.Fatalf("%d views, want 1 (b)", st.Views)
	}

	// The handle does not hold the evicted view: it opens a again (evicting
	// b), and answers as before.
	reopened := get()
	if reopened == first {
		t.Fatal("the handle held the evicted view")
	}
	if again := get(); again != reopened {
		t.Fatal("the handle did not keep the view it opened again")
	}
	if v, err := c.View(ctx, "a"); err != nil || v != reopened {
		t.Fatalf("the client's view of a is %p (%v), the handle's %p", v, err, reopened)
	}
}
