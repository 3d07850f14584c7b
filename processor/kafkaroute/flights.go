package kafkaroute

import (
	"context"
	"hash/maphash"
	"sync"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
)

// A Flight is one correlation id being produced (or replayed) by this
// replica. Requests with the same id that arrive while it exists — a replay
// of a request still in flight — attach to it instead of producing again:
// they share its reply watch and the outcome of its produce. Another
// replica cannot see it; there the responder's duplicate detection (same
// idempotency key and correlation id) keeps the effect single.
type Flight struct {
	Key   FlightKey
	Watch *kafkaio.ReplyWatch // registered before anything is produced
	// Done is closed once the lead knows: replayed, produced or failed (a
	// binding whose lead answers itself may leave it open).
	Done chan struct{}

	// Written by the lead before Done is closed.
	Replayed bool  // a reply was stored already: nothing was produced
	Err      error // the record was not written (or its outcome is unknown)

	refs int // guarded by its shard's mu: requests attached, plus the lead
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
func (t *Flights) Join(k FlightKey, watch func() *kafkaio.ReplyWatch) (f *Flight, lead bool) {
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
	f = &Flight{Key: k, Watch: watch(), Done: make(chan struct{}), refs: 2}
	sh.m[k] = f
	return f, true
}

// Leave drops one reference; the last one releases the watch.
func (t *Flights) Leave(f *Flight) {
	sh := t.shard(f.Key)
	sh.mu.Lock()
	f.refs--
	last := f.refs == 0
	if last && sh.m[f.Key] == f {
		delete(sh.m, f.Key)
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
		f, lead := t.Join(k, func() *kafkaio.ReplyWatch { return nil })
		if lead {
			return func() {
				// Out of the table first: the requests woken by Done
				// join a new flight, not this ended one again.
				t.Forget(f)
				close(f.Done)
				t.Leave(f)
				t.Leave(f)
			}, nil
		}
		select {
		case <-f.Done:
			t.Leave(f)
		case <-ctx.Done():
			t.Leave(f)
			return nil, ctx.Err()
		}
	}
}

// Forget takes a failed flight out of the table; the requests attached to
// it still see its outcome.
func (t *Flights) Forget(f *Flight) {
	sh := t.shard(f.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[f.Key] == f {
		delete(sh.m, f.Key)
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
