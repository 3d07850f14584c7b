package logtails

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// slabSize is the size of the blocks frames are packed into: consecutive
// frames of a block are contiguous, so a stream at the tail sends a run of
// them as one slice, without copying.
const slabSize = 64 << 10

// ringEntryOverhead approximates what an entry costs beyond its bytes.
const ringEntryOverhead = 96

// ring is the recent tail of one topic, in the order the tail consumer read
// it (offset order within a partition). Each entry holds its record's key and
// headers (for filters and metadata) and its frame, encoded with the ring's
// framer and the ring's positions after the record. Entries are immutable
// once appended, so readers hold the read lock only while they copy out.
type ring struct {
	framer     Framer
	partitions int
	topic      string
	decode     StreamDecoder // nil: values are framed as written

	mu       sync.RWMutex
	entries  []ringEntry // circular; the oldest is at seq head-count
	head     uint64      // sequence number of the next entry
	count    int
	bytes    int64
	maxBytes int64
	start    []int64 // positions before the oldest entry: records from here on are held
	pos      []int64 // positions after the newest entry
	end      []int64 // highest end offset seen per partition (watermarks, EOF, records)
	notify   chan struct{}
	slab     []byte
	cursors  map[*cursor]struct{}

	// The tail starts behind the end (its backfill): the ring is caught up
	// once every partition reached the end offset seen at the start.
	initEnd  []int64
	behind   int           // partitions still behind initEnd
	caughtUp chan struct{} // closed when behind reaches 0
}

// vlenTombstone is the vlen of a tombstone's ring entry.
const vlenTombstone = -2

type ringEntry struct {
	partition int32
	vlen      int32 // value length; vlenTombstone for a tombstone, -1 for a record left out or held
	offset    int64
	key       []byte // nil: no key
	headers   []kafka.Header
	frame     []byte // nil for a tombstone, a record left out, or a held one
	// held is a value the decoder could not decode when it entered (its
	// schema could not be had then): each stream reaching it decodes it.
	held []byte
}

// cursor is a stream reading the ring; the tail checks its lag after every
// batch.
type cursor struct {
	seq    atomic.Uint64 // next entry the stream will read
	budget uint64
	lagged chan struct{} // closed once the stream fell behind
	fired  bool          // guarded by ring.mu
	// catchUp, guarded by ring.mu, is the least lag seen since the stream
	// joined the ring. A stream joins at the ring's oldest entry, which can
	// be more than its budget behind (the ring holds at least 1,024
	// entries, or the largest budget of its streams) although its own
	// position is near the head: it is cut only when it falls further
	// behind than it ever was since joining, until it is within its budget.
	catchUp uint64
}

// fellBehind tells whether c, reading at seq, fell behind: more than its
// budget (or than its catch-up allowance) behind before, the head before a
// batch. It narrows the allowance as the stream catches up.
func (c *cursor) fellBehind(seq, before uint64) bool {
	if seq >= before {
		c.catchUp = 0
		return false
	}
	lag := before - seq
	c.catchUp = min(c.catchUp, lag)
	return lag > max(c.budget, c.catchUp)
}

func newRing(framer Framer, partitions, capacity int, maxBytes int64, start, end []int64) *ring {
	r := &ring{
		framer: framer, partitions: partitions,
		entries: make([]ringEntry, capacity), maxBytes: maxBytes,
		start: append([]int64(nil), start...), pos: append([]int64(nil), start...),
		end: make([]int64, partitions), notify: make(chan struct{}), cursors: map[*cursor]struct{}{},
	}
	r.initEnd = make([]int64, partitions)
	r.caughtUp = make(chan struct{})
	for p := range r.end {
		r.end[p] = max(end[p], start[p])
		r.initEnd[p] = r.end[p]
		if start[p] < r.initEnd[p] {
			r.behind++
		}
	}
	if r.behind == 0 {
		close(r.caughtUp)
	}
	return r
}

// reached notes that partition p's tail is at next; called with mu held.
func (r *ring) reached(p int32, next int64) {
	if r.behind > 0 && next >= r.initEnd[p] && r.initEnd[p] >= 0 {
		r.initEnd[p] = -1 // counted
		if r.behind--; r.behind == 0 {
			close(r.caughtUp)
		}
	}
}

func (r *ring) at(seq uint64) *ringEntry { return &r.entries[seq%uint64(len(r.entries))] }

// grow makes the ring hold at least n records, so that a stream within its
// lag budget is never dropped from it.
func (r *ring) grow(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n <= len(r.entries) {
		return
	}
	entries := make([]ringEntry, n)
	for seq := r.head - uint64(r.count); seq < r.head; seq++ {
		entries[seq%uint64(n)] = *r.at(seq)
	}
	r.entries = entries
}

// noteEnd records an end offset a watermark query returned.
func (r *ring) noteEnd(p int32, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p >= 0 && int(p) < r.partitions && end > r.end[p] {
		r.end[p] = end
	}
}

// sawEnd records that the tail reached the end of a partition (PartitionEOF).
func (r *ring) sawEnd(p int32, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p < 0 || int(p) >= r.partitions {
		return
	}
	if end > r.end[p] {
		r.end[p] = end
	}
	// An end of partition at or past the initial end: the backfill of p is
	// read (its last offsets may be control records, never delivered).
	r.reached(p, end)
}

// append folds a batch of records into the ring, then wakes its streams once
// and tells those beyond their budget: streams that were already more than
// their budget behind before this batch (a burst larger than the budget does
// not fail streams that keep up), and streams whose next record the ring no
// longer holds. It reports a record below the ring's position: the log went
// back (the topic was created again), and nothing of the batch from that
// record on is taken.
func (r *ring) append(msgs []*kafka.Message) (wentBack bool) {
	decoded := r.decodeAll(msgs)
	r.mu.Lock()
	defer r.mu.Unlock()
	before := r.head
	for i, m := range msgs {
		p, off := m.TopicPartition.Partition, int64(m.TopicPartition.Offset)
		if p < 0 || int(p) >= r.partitions {
			continue // not ours
		}
		if off < r.pos[p] {
			// A ring reads one assignment from its start: the tail never
			// reads an offset twice, so the log itself went back.
			wentBack = true
			break
		}
		r.pos[p] = off + 1
		r.end[p] = max(r.end[p], off+1)
		r.reached(p, off+1)
		e := ringEntry{partition: p, offset: off, key: m.Key, headers: m.Headers, vlen: -1}
		switch {
		case m.Value == nil:
			e.vlen = vlenTombstone
		case decoded == nil:
			e.vlen = int32(len(m.Value))
			e.frame = r.encode(m.Value)
		case decoded[i].held:
			e.vlen, e.held = 0, m.Value
		case !decoded[i].skip:
			e.vlen = int32(len(decoded[i].value))
			e.frame = r.encode(decoded[i].value)
		}
		r.push(e)
	}
	close(r.notify)
	r.notify = make(chan struct{})
	oldest := r.head - uint64(r.count)
	for c := range r.cursors {
		if c.fired {
			continue
		}
		if seq := c.seq.Load(); seq < oldest || c.fellBehind(seq, before) {
			c.fired = true
			close(c.lagged)
		}
	}
	return wentBack
}

// decodedValue is what the decoder made of one record's value.
type decodedValue struct {
	value []byte
	skip  bool // the record does not match: left out of every stream
	held  bool // the decoder could not decode it now
}

// decodeAll decodes a batch's values before the ring is locked (streams keep
// reading meanwhile): nil when the topic has no decoder. The batch shares
// one bounded wait, so a registry that does not answer holds the tail up by
// ringDecodeWait at most; what it could not decode is held.
func (r *ring) decodeAll(msgs []*kafka.Message) []decodedValue {
	if r.decode == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ringDecodeWait)
	defer cancel()
	out := make([]decodedValue, len(msgs))
	for i, m := range msgs {
		if m.Value == nil {
			continue
		}
		v, err := r.decode(ctx, &client.Record{
			Topic: r.topic, Partition: m.TopicPartition.Partition, Offset: int64(m.TopicPartition.Offset),
			Timestamp: m.Timestamp, Key: m.Key, Value: m.Value,
		})
		switch {
		case err == nil:
			out[i].value = v
		case errors.Is(err, views.ErrLater):
			out[i].held = true
		default:
			out[i].skip = true
		}
	}
	return out
}

// encode frames a value with the ring's positions, packing small frames into
// the current slab block.
func (r *ring) encode(value []byte) []byte {
	need := r.framer.MaxFrame(len(value), r.partitions)
	if need > slabSize/4 {
		f := r.framer.AppendFrame(make([]byte, 0, need), value, r.pos)
		return f[:len(f):len(f)]
	}
	if cap(r.slab)-len(r.slab) < need {
		r.slab = make([]byte, 0, slabSize)
	}
	at := len(r.slab)
	r.slab = r.framer.AppendFrame(r.slab, value, r.pos)
	return r.slab[at:len(r.slab)]
}

func entrySize(e *ringEntry) int64 {
	n := int64(ringEntryOverhead + len(e.frame) + len(e.held) + len(e.key))
	for _, h := range e.headers {
		n += int64(len(h.Key) + len(h.Value) + 40)
	}
	return n
}

func (r *ring) push(e ringEntry) {
	if r.count == len(r.entries) {
		r.dropOldest()
	}
	size := entrySize(&e)
	*r.at(r.head) = e
	r.head++
	r.count++
	r.bytes += size
	for r.bytes > r.maxBytes && r.count > 1 {
		r.dropOldest()
	}
}

func (r *ring) dropOldest() {
	e := r.at(r.head - uint64(r.count))
	r.start[e.partition] = e.offset + 1
	r.bytes -= entrySize(e)
	*e = ringEntry{}
	r.count--
}

// register adds a cursor at the oldest entry if the positions next are held
// by the ring in every partition; it returns the ring's positions before
// that entry.
func (r *ring) register(c *cursor, next []int64) ([]int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, off := range next {
		if off < r.start[p] {
			return nil, false
		}
	}
	c.seq.Store(r.head - uint64(r.count))
	c.catchUp = uint64(r.count)
	r.cursors[c] = struct{}{}
	return append([]int64(nil), r.start...), true
}

func (r *ring) unregister(c *cursor) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cursors, c)
}

// positions returns a copy of the next offset the tail reads, per
// partition.
func (r *ring) positions() []int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]int64(nil), r.pos...)
}

// starts returns a copy of the positions the ring holds records from.
func (r *ring) starts() []int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]int64(nil), r.start...)
}

// ends returns a copy of the highest end offsets seen.
func (r *ring) ends() []int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]int64(nil), r.end...)
}

// contiguous reports whether b starts right where a ends in the same block,
// so a[:len(a)+len(b)] holds both.
func contiguous(a, b []byte) bool {
	return len(a) < cap(a) && len(b) > 0 && &a[:len(a)+1][len(a)] == &b[0]
}
