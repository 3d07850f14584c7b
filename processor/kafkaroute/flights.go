package kafkaroute

import (
	"context"
	"hash/maphash"
	"sync"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
)

// A Flight is one correlation id being produced (or replayed) by this
// replica. Requests with the same id that arrive while it exists — a replay
// of a request still in flight — attach to it instead of producing again:
// they share its reply watch and the outcome of its produce. Another
// replica cannot see it; there the responder's duplicate detection (same
// idempotency key and correlation id) keeps the effect single.
type Flight struct {
	Key   FlightKey
	Watch *replies.Watch // registered before anything is produced

	// Written by the lead before Finish.
	Replayed bool  // a reply was stored already: nothing was produced
	Err      error // the record was not written (or its outcome is unknown)

	sh *flightShard // the flight's shard, found once
	// Guarded by sh.mu.
	refs     int  // requests attached, plus the lead
	listed   bool // sh.m[Key] is this flight: leaving needs no look-up
	finished bool
	// done is closed at Finish; made only when a request waits before it,
	// as a replay attached to a flight does: most leads finish before
	// anything waits, and then no channel is made.
	done chan struct{}
}

// FlightKey names a flight: the cluster (kafka binding), the reply topic (or
// for a oneway write the request topic) and the correlation id.
type FlightKey struct {
	Cluster, ReplyTo, Topic, CID string
}

// Flights is a table of flights. A flight leaves the table when its last
// request leaves, or at once when its produce failed (Forget), so a retry
// after a failure produces afresh. The table is sharded by correlation id:
// every request-reply joins and leaves it, and one lock was the most
// contended after the reply index's. The zero value is ready to use.
type Flights struct {
	shards [flightShards]flightShard
}

const flightShards = 32

type flightShard struct {
	mu sync.Mutex
	m  map[FlightKey]*Flight
}

// flightSeed seeds the shard hash; it is set once and only read.
var flightSeed = maphash.MakeSeed()

// shard is the shard of k, by its correlation id. A correlation id is about
// 70 bytes and every round trip hashes it twice (Join, Leave): the runtime's
// string hash does that in a few nanoseconds where a byte-at-a-time loop
// took a fraction of a microsecond.
func (t *Flights) shard(k FlightKey) *flightShard {
	return &t.shards[maphash.String(flightSeed, k.CID)%flightShards]
}

// Join attaches to the flight of k, or creates it (lead true: the caller
// holds two references, its request's and the lead's, and calls Leave once
// for each). watch is called under the shard's lock, so the watch exists
// before anyone can attach.
func (t *Flights) Join(k FlightKey, watch func() *replies.Watch) (f *Flight, lead bool) {
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f := sh.m[k]; f != nil {
		f.refs++
		return f, false
	}
	if sh.m == nil {
		sh.m = map[FlightKey]*Flight{}
	}
	f = &Flight{Key: k, Watch: watch(), sh: sh, refs: 2, listed: true}
	sh.m[k] = f
	return f, true
}

// Finish says the lead knows: replayed, produced or failed, Replayed and
// Err written. It wakes the requests waiting in Wait. (A binding whose lead
// answers itself may never call it.)
func (f *Flight) Finish() {
	f.sh.mu.Lock()
	f.finished = true
	done := f.done
	f.sh.mu.Unlock()
	if done != nil {
		close(done)
	}
}

// Wait waits until the lead finished (nil; Replayed and Err are then
// readable) or ctx ends first (its error).
func (f *Flight) Wait(ctx context.Context) error {
	f.sh.mu.Lock()
	if f.finished {
		f.sh.mu.Unlock()
		return nil
	}
	if f.done == nil {
		f.done = make(chan struct{})
	}
	done := f.done
	f.sh.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leave drops one reference; the last one releases the watch.
func (t *Flights) Leave(f *Flight) {
	sh := f.sh
	sh.mu.Lock()
	f.refs--
	last := f.refs == 0
	if last {
		sh.unlistLocked(f)
	}
	sh.mu.Unlock()
	if last && f.Watch != nil {
		f.Watch.Close()
	}
}

// Lead waits until no other request of this replica holds the flight of k,
// then holds it: a oneway keyed write, which has no reply to share, writes
// only once the one before it ended, so its Claim sees what that one
// wrote. The flight has no watch; release ends it. It fails only when ctx
// ends first.
func (t *Flights) Lead(ctx context.Context, k FlightKey) (release func(), err error) {
	for {
		f, lead := t.Join(k, func() *replies.Watch { return nil })
		if lead {
			return func() {
				// Out of the table first: the requests woken by Finish
				// join a new flight, not this ended one again.
				t.Forget(f)
				f.Finish()
				t.Leave(f)
				t.Leave(f)
			}, nil
		}
		err := f.Wait(ctx)
		t.Leave(f)
		if err != nil {
			return nil, err
		}
	}
}

// Forget takes a failed flight out of the table; the requests attached to
// it still see its outcome.
func (t *Flights) Forget(f *Flight) {
	sh := f.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.unlistLocked(f)
}

// unlistLocked takes f out of the table if it is still there.
func (sh *flightShard) unlistLocked(f *Flight) {
	if f.listed {
		delete(sh.m, f.Key)
		f.listed = false
	}
}

// Len is the number of flights in the table.
func (t *Flights) Len() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
