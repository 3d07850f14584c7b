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

	refs int // guarded by its shard's mu: requests attached, plus the lead
}

type flightKey struct {
	cluster, replyTo, cid string
}

// flights is the table of a handler's flights. A flight leaves the table
// when its last request leaves, or at once when its produce failed, so a
// retry after a 503 or 504 produces afresh. The table is sharded by
// correlation id: every request-reply joins and leaves it, and one lock was
// the most contended after the reply index's.
type flights struct {
	shards [flightShards]flightShard
}

const flightShards = 32

type flightShard struct {
	mu sync.Mutex
	m  map[flightKey]*flight
}

// shard is the shard of k: FNV-1a of its correlation id.
func (t *flights) shard(k flightKey) *flightShard {
	h := uint32(2166136261)
	for i := 0; i < len(k.cid); i++ {
		h = (h ^ uint32(k.cid[i])) * 16777619
	}
	return &t.shards[h%flightShards]
}

// join attaches to the flight of k, or creates it (lead true: the caller
// must run it and call leave once more when the lead is done). watch is
// called under the shard's lock, so the watch exists before anyone can
// attach.
func (t *flights) join(k flightKey, watch func() *kafkaio.ReplyWatch) (f *flight, lead bool) {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f := sh.m[k]; f != nil {
		f.refs++
		return f, false
	}
	if sh.m == nil {
		sh.m = map[flightKey]*flight{}
	}
	f = &flight{key: k, watch: watch(), done: make(chan struct{}), refs: 2}
	sh.m[k] = f
	return f, true
}

// leave drops one reference; the last one releases the watch.
func (t *flights) leave(f *flight) {
	sh := t.shard(f.key)
	sh.mu.Lock()
	f.refs--
	last := f.refs == 0
	if last && sh.m[f.key] == f {
		delete(sh.m, f.key)
	}
	sh.mu.Unlock()
	if last {
		f.watch.Close()
	}
}

// forget takes a failed flight out of the table; the requests attached to
// it still see its outcome.
func (t *flights) forget(f *flight) {
	sh := t.shard(f.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[f.key] == f {
		delete(sh.m, f.key)
	}
}

// len is the number of flights in the table.
func (t *flights) len() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
