package kafkagrpc

import (
	"strings"
	"testing"
)

// admitted names the calls admitted so far, in order.
func admitted(calls []*call) string {
	var out []string
	for _, c := range calls {
		select {
		case <-c.admit:
			out = append(out, c.cid)
		default:
		}
	}
	return strings.Join(out, " ")
}

// settled is what the loop does with a call's outcome, as far as
// admission goes.
func (w *Worker) settled(c *call) {
	c.ended = true
	w.release(c)
}

func TestAdmitBoundsAPartitionAndOrdersAKey(t *testing.T) {
	w := &Worker{opts: Options{MaxCallsPerPartition: 2}, parts: map[part]*partCalls{}}
	p0, p1 := part{topic: "t", partition: 0}, part{topic: "t", partition: 1}
	var calls []*call
	add := func(cid string, p part, key string) *call {
		c := &call{cid: cid, part: p, key: key, admit: make(chan struct{})}
		calls = append(calls, c)
		w.enqueue(c)
		return c
	}
	k1 := add("k1", p0, "k")
	add("k2", p0, "k")
	a := add("a", p0, "a")
	add("b", p0, "b")
	add("x", p1, "k") // another partition: its own bound, its own keys
	add("y", p1, "")  // no key: no order
	if got := admitted(calls); got != "k1 a x y" {
		t.Fatalf("admitted %q, want k1 a x y: k2 waits for k1 of its key, b for a place of p0", got)
	}
	w.settled(a)
	if got := admitted(calls); got != "k1 a b x y" {
		t.Fatalf("after a settled: admitted %q, want b to take its place (k2 still waits for k1)", got)
	}
	w.settled(k1)
	if got := admitted(calls); got != "k1 k2 a b x y" {
		t.Fatalf("after k1 settled: admitted %q, want k2", got)
	}
	if k2 := calls[1]; k2.after != nil {
		t.Error("an admitted call keeps the call before it of its key alive")
	}
	if pc := w.parts[p0]; pc.running != 2 || len(pc.queue) != 0 || pc.last["k"] != calls[1] || pc.last["a"] != nil {
		t.Fatalf("p0: running %d, queued %d, last of k %v, last of a %v", pc.running, len(pc.queue), pc.last["k"], pc.last["a"])
	}
}

// A call whose context ended before it was admitted is settled without a
// place: it leaves the queue and frees none.
func TestAdmitDropsACallSettledWhileWaiting(t *testing.T) {
	w := &Worker{opts: Options{MaxCallsPerPartition: 1}, parts: map[part]*partCalls{}}
	p := part{topic: "t"}
	first := &call{cid: "first", part: p, admit: make(chan struct{})}
	silent := &call{cid: "silent", part: p, admit: make(chan struct{})}
	last := &call{cid: "last", part: p, admit: make(chan struct{})}
	for _, c := range []*call{first, silent, last} {
		w.enqueue(c)
	}
	w.settled(silent)
	if got := admitted([]*call{first, silent, last}); got != "first" {
		t.Fatalf("admitted %q, want first only", got)
	}
	w.settled(first)
	if got := admitted([]*call{first, silent, last}); got != "first last" {
		t.Fatalf("admitted %q, want first and last", got)
	}
	if pc := w.parts[p]; pc.running != 1 || len(pc.queue) != 0 {
		t.Fatalf("running %d, queued %d; want 1 and 0", pc.running, len(pc.queue))
	}
}
