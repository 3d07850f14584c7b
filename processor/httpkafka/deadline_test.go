package httpkafka

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httphdr"
)

func TestDeadlinesShareAMillisecond(t *testing.T) {
	var d deadlines
	drain := context.Background()
	at := time.Now().Add(50 * time.Millisecond).Truncate(time.Millisecond)
	a := d.wait(drain, at)
	b := d.wait(drain, at.Add(-time.Microsecond)) // the same millisecond, rounded up
	c := d.wait(drain, at.Add(time.Millisecond))
	if a != b || a == c || d.len() != 2 {
		t.Fatalf("deadlines %p %p %p, %d pending: want the first two shared, 2 pending", a, b, c, d.len())
	}
	select {
	case <-a.ch:
		if now := time.Now(); now.Before(at) {
			t.Errorf("closed at %v, before its deadline %v", now, at)
		}
	case <-time.After(time.Minute):
		t.Fatal("not closed after its deadline")
	}
	<-c.ch
	d.release(a)
	d.release(b)
	d.release(c)
	if d.len() != 0 {
		t.Errorf("%d deadlines left after they fired", d.len())
	}
}

func TestDeadlinesReleasedStopTheirTimer(t *testing.T) {
	var d deadlines
	drain := context.Background()
	at := time.Now().Add(time.Hour)
	e1 := d.wait(drain, at)
	e2 := d.wait(drain, at)
	d.release(e1)
	if d.len() != 1 {
		t.Fatalf("%d deadlines with one waiter left, want 1", d.len())
	}
	d.release(e2)
	if d.len() != 0 {
		t.Fatalf("%d deadlines after the last waiter left, want 0", d.len())
	}
	select {
	case <-e2.ch:
		t.Fatal("closed an hour early")
	default:
	}
	// A later waiter on the same millisecond gets a live deadline again.
	e3 := d.wait(drain, at)
	defer d.release(e3)
	if e3 == e2 || d.len() != 1 {
		t.Errorf("a new waiter after release: same deadline %v, %d deadlines", e3 == e2, d.len())
	}
}

func TestDeadlinesInThePastFireAtOnce(t *testing.T) {
	var d deadlines
	e := d.wait(context.Background(), time.Now().Add(-time.Second))
	defer d.release(e)
	select {
	case <-e.ch:
	case <-time.After(time.Minute):
		t.Fatal("a past deadline did not fire")
	}
}

// The drain closes every pending deadline of its context at once, those
// registered after it too; another drain's deadlines are not touched.
func TestDeadlinesFireOnDrain(t *testing.T) {
	var d deadlines
	drain, stop := context.WithCancel(context.Background())
	other, stopOther := context.WithCancel(context.Background())
	defer stopOther()
	at := time.Now().Add(time.Hour)
	a := d.wait(drain, at)
	b := d.wait(drain, at.Add(time.Second))
	o := d.wait(other, at)
	if a == o || d.len() != 3 {
		t.Fatalf("%d pending, shared across drains %v: want 3 apart", d.len(), a == o)
	}
	stop()
	for _, e := range []*deadline{a, b} {
		select {
		case <-e.ch:
		case <-time.After(time.Minute):
			t.Fatal("a deadline was not closed by its drain")
		}
	}
	select {
	case <-o.ch:
		t.Fatal("another drain's deadline was closed")
	default:
	}
	late := d.wait(drain, at)
	select {
	case <-late.ch:
	case <-time.After(time.Minute):
		t.Fatal("a deadline registered after the drain was not closed")
	}
	for _, e := range []*deadline{a, b, late, o} {
		d.release(e)
	}
	if d.len() != 0 {
		t.Errorf("%d deadlines left", d.len())
	}
}

// A long poll's key, header values and tags are copies once it waits: none
// points into the request's header string, which it would keep alive.
func TestDetachCopiesOutOfTheRequest(t *testing.T) {
	raw := "/items/k42" + `"tag-1"` + "blue"
	key, tag, hv := raw[7:10], raw[11:16], raw[17:]
	sel := selection{filters: []filter{{keyVal: key, headers: [][2]string{{"colour", hv}}}}}
	sel.filters[0].key = &sel.filters[0].keyVal
	inm := httphdr.IfNoneMatch{Tags: []string{tag}}
	detach(&sel, &inm)
	start, end := uintptr(unsafe.Pointer(unsafe.StringData(raw))), uintptr(unsafe.Pointer(unsafe.StringData(raw)))+uintptr(len(raw))
	inRaw := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return p >= start && p < end
	}
	f := sel.filters[0]
	switch {
	case *f.key != "k42" || f.headers[0][1] != "blue" || inm.Tags[0] != "tag-1":
		t.Fatalf("values changed: %q %q %q", *f.key, f.headers[0][1], inm.Tags[0])
	case f.key != &sel.filters[0].keyVal:
		t.Fatal("the key no longer points at the filter's own value")
	case inRaw(*f.key), inRaw(f.headers[0][1]), inRaw(inm.Tags[0]):
		t.Fatal("a value still points into the request's string")
	}
}
