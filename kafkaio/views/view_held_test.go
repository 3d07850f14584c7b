package views

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// heldView is a view whose converter upper-cases nothing but says whether
// the schema can be had: while down, every record is held aside.
func heldView(down *atomic.Bool) *View {
	v := newView("items", [16]byte{1}, 1, time.Millisecond)
	v.convert = func(r *client.Record) error {
		switch {
		case string(r.Value) == "bad":
			return errors.New("does not match")
		case down.Load():
			return fmt.Errorf("%w: registry down", ErrLater)
		}
		r.Value = append([]byte("converted "), r.Value...)
		return nil
	}
	return v
}

func rec(offset int64, key, value string) *client.Record {
	r := &client.Record{Topic: "items", Offset: offset, Timestamp: time.UnixMilli(offset), Key: []byte(key)}
	if value != "" {
		r.Value = []byte(value)
	}
	return r
}

// waitHeldEmpty waits (bounded) until every held record was retried away.
func waitHeldEmpty(t *testing.T, v *View) {
	t.Helper()
	deadline := time.Now().Add(10 * HeldRetry)
	for {
		v.mu.RLock()
		n := len(v.held)
		v.mu.RUnlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records still held", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestViewHoldsRecordsWhoseSchemaCannotBeHad(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	v := heldView(&down)
	v.apply(rec(0, "a", "one")) // held
	v.apply(rec(1, "b", "two")) // held, then deleted
	v.apply(rec(2, "b", ""))    // tombstone: b must not come back
	v.apply(rec(3, "c", "old")) // held, then superseded
	v.apply(rec(4, "d", "bad")) // refused for good
	if _, ok := v.Get("a"); ok {
		t.Fatal("a held record is served before it converts")
	}
	if got := v.Position(0); got != 5 {
		t.Errorf("position %d, want 5: held records still move the view on", got)
	}
	down.Store(false)
	v.apply(rec(5, "c", "new"))
	waitHeldEmpty(t, v)
	if e, ok := v.Get("a"); !ok || string(e.Value) != "converted one" {
		t.Errorf("a: %v, want the held record served once it converts", e)
	}
	if _, ok := v.Get("b"); ok {
		t.Error("b: a held record revived a deleted key")
	}
	if e, ok := v.Get("c"); !ok || string(e.Value) != "converted new" {
		t.Errorf("c: %v, want the newer record, not the older held one", e)
	}
	if _, ok := v.Get("d"); ok {
		t.Error("d: a record that does not match is served")
	}
}
