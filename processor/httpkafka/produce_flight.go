package httpkafka

import (
	"sync"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
)

// A flight is one correlation id being produced (or replayed) by this
// replica. Requests with the same id that arrive while it exists — a replay
// of a request still in flight — attach to it instead of producing again:
// they share its reply watch and the outcome of its produce. Another
// replica cannot see it; there the responder's duplicate detection (same
// idempotency key and correlation id) keeps the effect single.
type flight struct {
	key   flightKey
	watch *kafkaio.ReplyWatch // registered before anything is produced
	done  chan struct{}       // closed once the lead knows: replayed, produced or failed

	// Written by the lead before done is closed.
	replayed bool  // a reply was stored already: nothing was produced
	err      error // the record was not written (or its outcome is unknown)

	refs int // guarded by flights.mu: requests attached, plus the lead
}

type flightKey struct {
	cluster, replyTo, cid string
}

// flights is the table of a handler's flights. A flight leaves the table
// when its last request leaves, or at once when its produce failed, so a
// retry after a 503 or 504 produces afresh.
type flights struct {
	mu sync.Mutex
	m  map[flightKey]*flight
}

// join attaches to the flight of k, or creates it (lead true: the caller
// must run it and call leave once more when the lead is done). watch is
// called under the table's lock, so the watch exists before anyone can
// attach.
func (t *flights) join(k flightKey, watch func() *kafkaio.ReplyWatch) (f *flight, lead bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.m[k]; f != nil {
		f.refs++
		return f, false
	}
	if t.m == nil {
		t.m = map[flightKey]*flight{}
	}
	f = &flight{key: k, watch: watch(), done: make(chan struct{}), refs: 2}
	t.m[k] = f
	return f, true
}

// leave drops one reference; the last one releases the watch.
func (t *flights) leave(f *flight) {
	t.mu.Lock()
	f.refs--
	last := f.refs == 0
	if last && t.m[f.key] == f {
		delete(t.m, f.key)
	}
	t.mu.Unlock()
	if last {
		f.watch.Close()
	}
}

// forget takes a failed flight out of the table; the requests attached to
// it still see its outcome.
func (t *flights) forget(f *flight) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[f.key] == f {
		delete(t.m, f.key)
	}
}

// len is the number of flights in the table.
func (t *flights) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
