package replies

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// Evicted replies. MaxBytes bounds the replies the index holds in memory,
// not the answers it gives: an id evicted for it keeps where its records
// lie in the reply topic (a location) for as long as Retention would have
// kept its records, and a watch of it reads them back from Kafka
// (readback.go). Until then every question "is a reply stored?"
// (Watch.Stored) is answered yes, so nothing is written twice, and
// the waiters of the id wake when the records are back, as if just indexed.
//
// An id is in one of two places, never both: its entry holds its records,
// or its topic's located set holds its location.
//
// A location is kept by a 128-bit hash of its id, not the id: ids are
// most of a location's bytes otherwise (69 characters as the processor
// issues them), and locations are what grows with the request rate until
// Retention turns them over. A hash that two ids share would read back
// the other id's span, whose records do not carry the asked id: the read
// finds nothing and the answer is "removed", never another id's reply.

// RemovedError is an evicted reply that its topic no longer holds:
// its retention (or compaction) removed it before it was asked for. Its
// result expired.
type RemovedError struct {
	Topic     string
	Partition int32
	Offset    int64 // the offset of the id's first reply record
	LogStart  int64 // the partition's first offset when it was looked for; -1 if unknown
}

func (e *RemovedError) Error() string {
	if e.LogStart > e.Offset {
		return fmt.Sprintf("the reply was removed from topic %q by its retention: it was at offset %d of partition %d, which now starts at offset %d",
			e.Topic, e.Offset, e.Partition, e.LogStart)
	}
	return fmt.Sprintf("the reply is no longer at offset %d of partition %d of topic %q (compacted away, or the topic was recreated)",
		e.Offset, e.Partition, e.Topic)
}

// replySpan is where an id's records lie in one partition: count records
// between offsets first and last. An id's replies are normally next to
// each other (one reply per request, a call's replies in a burst), so a
// span is the same few bytes whatever the number of records; reading it
// back reads forward from first and keeps the records carrying the id.
type replySpan struct {
	partition   int32
	count       int32
	first, last int64
}

// replyLocation is an evicted id: where its records lie, whether the
// terminal record came, and its newest record's time for Retention. The
// rarely needed parts (other partitions, a read under way) are in more.
type replyLocation struct {
	key        idKey
	span       replySpan
	newest     int64 // unix nanoseconds
	terminal   bool
	more       *locationMore
	prev, next *replyLocation // in the topic's located order, oldest eviction first
}

type locationMore struct {
	id      string           // the id, once a watch asked for it (the map holds its hash)
	spans   []replySpan      // in other partitions: a responder that does not key by correlation id
	read    *replyRead       // the read-back under way, which every asker shares
	err     error            // why the last read-back failed; a *RemovedError stays
	pending []*client.Record // records of the id indexed while read is under way
}

// replyLocationBytes is what a location costs, whatever the length of
// its id: the struct's size class (80 B) and its map slot, as
// BenchmarkReplyEvictedBytes measured them.
const replyLocationBytes = 115

// idKey is the hash a location is kept by.
type idKey [16]byte

// locatedReplies are a topic's evicted ids, in eviction order: close to
// the order of their newest records, so expiry stops at the first one
// still within Retention, as it does for entries.
type locatedReplies struct {
	byKey       map[idKey]*replyLocation
	seeds       [2]maphash.Seed // of the key's two halves; this set's own
	front, back *replyLocation
	n           int
	bytes       int64
}

// keyOf hashes id with the set's seeds (made with its first location).
func (l *locatedReplies) keyOf(id []byte) idKey {
	var k idKey
	binary.LittleEndian.PutUint64(k[:8], maphash.Bytes(l.seeds[0], id))
	binary.LittleEndian.PutUint64(k[8:], maphash.Bytes(l.seeds[1], id))
	return k
}

// find returns the location of id, or nil.
func (l *locatedReplies) find(id []byte) *replyLocation {
	if l.n == 0 {
		return nil
	}
	return l.byKey[l.keyOf(id)]
}

// findString is find for an id held as a string.
func (l *locatedReplies) findString(id string) *replyLocation {
	if l.n == 0 {
		return nil
	}
	return l.byKey[l.keyOfString(id)]
}

func (l *locatedReplies) keyOfString(id string) idKey {
	var k idKey
	binary.LittleEndian.PutUint64(k[:8], maphash.String(l.seeds[0], id))
	binary.LittleEndian.PutUint64(k[8:], maphash.String(l.seeds[1], id))
	return k
}

func (l *locatedReplies) add(loc *replyLocation) {
	l.byKey[loc.key] = loc
	loc.prev, loc.next = l.back, nil
	if l.back != nil {
		l.back.next = loc
	} else {
		l.front = loc
	}
	l.back = loc
	l.n++
	l.bytes += loc.size()
}

func (l *locatedReplies) remove(loc *replyLocation) {
	delete(l.byKey, loc.key)
	if loc.prev != nil {
		loc.prev.next = loc.next
	} else {
		l.front = loc.next
	}
	if loc.next != nil {
		loc.next.prev = loc.prev
	} else {
		l.back = loc.prev
	}
	loc.prev, loc.next = nil, nil
	l.n--
	l.bytes -= loc.size()
}

func (loc *replyLocation) size() int64 {
	n := int64(replyLocationBytes)
	if loc.more != nil {
		n += int64(len(loc.more.spans)) * 24
	}
	return n
}

// spans returns every span of the location, the first partition's first.
func (loc *replyLocation) spans() []replySpan {
	out := []replySpan{loc.span}
	if loc.more != nil {
		out = append(out, loc.more.spans...)
	}
	return out
}

// extend adds a record of the id to its spans.
func (loc *replyLocation) extend(r *client.Record) {
	if r.Value == nil {
		loc.terminal = true
	}
	if ns := r.Timestamp.UnixNano(); ns > loc.newest {
		loc.newest = ns
	}
	if loc.span.count == 0 {
		loc.span = replySpan{partition: r.Partition, count: 1, first: r.Offset, last: r.Offset}
		return
	}
	if s := &loc.span; s.partition == r.Partition {
		s.count++
		s.first, s.last = min(s.first, r.Offset), max(s.last, r.Offset)
		return
	}
	if loc.more == nil {
		loc.more = &locationMore{}
	}
	for i := range loc.more.spans {
		if s := &loc.more.spans[i]; s.partition == r.Partition {
			s.count++
			s.first, s.last = min(s.first, r.Offset), max(s.last, r.Offset)
			return
		}
	}
	loc.more.spans = append(loc.more.spans, replySpan{partition: r.Partition, count: 1, first: r.Offset, last: r.Offset})
}

// locate keeps where the records of e lie, as e is evicted.
func (s *store) locate(e *replyEntry) {
	if len(e.records) == 0 {
		return
	}
	t := e.topic
	l := &t.located
	if l.byKey == nil {
		l.byKey = map[idKey]*replyLocation{}
		l.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	}
	if old := l.findString(e.id); old != nil { // not expected: an id is in one place
		l.remove(old)
	}
	loc := &replyLocation{key: l.keyOfString(e.id)}
	for _, r := range e.records {
		loc.extend(r)
	}
	if ns := e.newest.UnixNano(); ns > loc.newest {
		loc.newest = ns
	}
	l.add(loc)
}

// addLocated takes a record of an evicted id: into its location, or,
// while a read-back is under way, aside until the read ends. It tells
// whether the id was evicted (the record is then taken).
func (s *store) addLocated(t *replyTopic, id []byte, r *client.Record) bool {
	loc := t.located.find(id)
	if loc == nil {
		return false
	}
	if loc.more != nil && loc.more.read != nil {
		loc.more.pending = append(loc.more.pending, r)
		return true
	}
	before := loc.size()
	loc.extend(r)
	t.located.bytes += loc.size() - before
	return true
}

// readBackLocked starts reading back the evicted id of e, unless a read is
// under way (its askers share it) or the reply is known to be gone.
func (x *Index) readBackLocked(e *replyEntry) {
	t := e.topic
	loc := t.located.findString(e.id)
	if loc == nil {
		return
	}
	if loc.more == nil {
		loc.more = &locationMore{}
	}
	m := loc.more
	m.id = e.id
	var removed *RemovedError
	if m.read != nil || errors.As(m.err, &removed) {
		return
	}
	if x.closed {
		m.err = fmt.Errorf("%w: the reply index is closed", client.ErrNotReady)
		return
	}
	// The read's bound is real time, whatever clock the index's retention
	// runs on.
	now := time.Now()
	m.err = nil
	m.read = &replyRead{
		topic: t.name, id: e.id, headers: append([]string(nil), t.headers...), spans: loc.spans(),
		started: now, deadline: now.Add(x.opts.KafkaTimeout),
	}
	x.reader().enqueue(m.read)
}

// readBackDone puts the records a read-back found back into the index, as
// if just indexed, or keeps why it failed; either way the id's waiters wake.
func (x *Index) readBackDone(rd *replyRead) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[rd.topic]
	if t == nil {
		return
	}
	loc := t.located.findString(rd.id)
	if loc == nil || loc.more == nil || loc.more.read != rd {
		return // not expected: a read under way keeps its location
	}
	m := loc.more
	m.read = nil
	x.readBacks.observe(time.Since(rd.started))
	var removed *RemovedError
	switch {
	case rd.err == nil && len(rd.found) > 0:
		x.store.stats.ReadBacksFound++
		t.located.remove(loc)
		x.store.restore(t, rd.id, append(rd.found, m.pending...), x.now())
		return
	case errors.As(rd.err, &removed):
		x.store.stats.ReadBacksExpired++
	default:
		x.store.stats.ReadBacksFailed++
	}
	m.err = rd.err
	before := loc.size()
	for _, r := range m.pending {
		loc.extend(r)
	}
	t.located.bytes += loc.size() - before
	m.pending = nil
	if e := t.entries[rd.id]; e != nil && e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// restore indexes records read back for id, as the newest written:
// counted in bytes, at the back of the order, its time now; the id's
// waiters wake. The time is the read's, not the records': the order is by
// time, and expiry stops at the first id still within Retention, so an
// old time at the back would keep the id until every younger one expired.
func (s *store) restore(t *replyTopic, id string, records []*client.Record, now time.Time) {
	e := t.entries[id]
	if e == nil {
		e = &replyEntry{topic: t, id: id, indexed: true}
		e.records = e.first[:0]
		t.entries[id] = e
	}
	size := int64(replyEntryOverhead + len(id))
	e.partition = records[0].Partition
	e.newest = now
	for _, r := range records {
		size += recordBytes(r)
		if r.Value == nil {
			e.terminal = true
		}
		if r.Timestamp.After(e.newest) {
			e.newest = r.Timestamp
		}
		if r.Partition != e.partition {
			e.split = true
		}
	}
	e.records = append(e.records, records...)
	e.bytes += size
	s.bytes += size
	s.order.pushBack(e)
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
	s.evict() // others, oldest first: this one is the newest
}

// expireLocated drops evicted ids whose newest record is older than
// cutoff, as expire drops entries; an id being read back or waited for
// stays.
func (s *store) expireLocated(t *replyTopic, cutoff int64) {
	for loc := t.located.front; loc != nil; {
		next := loc.next
		if loc.newest >= cutoff {
			return
		}
		// Only an id a watch asked for can have a pinned entry, and that
		// watch left the id in more.
		busy, pinned := false, false
		if m := loc.more; m != nil {
			busy = m.read != nil
			if e := t.entries[m.id]; m.id != "" && e != nil {
				pinned = e.pins > 0
			}
		}
		if !busy && !pinned {
			t.located.remove(loc)
			s.stats.Expired++
		}
		loc = next
	}
}

// Stored tells whether a reply of the id was indexed: its records are
// held, or it was evicted and can be read back. A request whose reply is
// stored is a replay: nothing is written.
func (w *Watch) Stored() bool {
	if w.x == nil {
		return false
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	return len(w.e.records) > 0 || w.e.topic.located.findString(w.e.id) != nil
}

// Evicted tells whether the id's reply is stored but not held: it is being
// read back from its topic (or the last read failed, see Err). A waiter
// that would not wait for a reply still to come waits for this read,
// which ends within the Kafka timeout.
func (w *Watch) Evicted() bool {
	if w.x == nil {
		return false
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	return len(w.e.records) == 0 && w.e.topic.located.findString(w.e.id) != nil
}

// Err tells why the id's evicted reply could not be read back: a
// *RemovedError (it is no longer in its topic: its result expired),
// or an error wrapping client.ErrNotReady (Kafka did not answer in time). nil
// while the records are held, being read, or were never written. The id's
// changed channel closes when a read-back fails, so waiters see it.
func (w *Watch) Err() error {
	if w.x == nil {
		return nil
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	if len(w.e.records) > 0 {
		return nil
	}
	loc := w.e.topic.located.findString(w.e.id)
	if loc == nil || loc.more == nil || loc.more.read != nil {
		return nil
	}
	return loc.more.err
}

// Located tells whether topic's index holds correlationID as evicted: its
// records read back when asked for. For tests and diagnostics.
func (x *Index) Located(topic, correlationID string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[topic]
	return t != nil && t.located.findString(correlationID) != nil
}

// readBackLatency is the histogram of read-back latencies: fixed bounds,
// counts per bucket (cumulative on export), their sum.
type readBackLatency struct {
	counts [readBackBuckets + 1]uint64
	sum    time.Duration
	n      uint64
}

const readBackBuckets = 13

// readBackBounds are the buckets' upper bounds: a read-back is a fetch
// round trip or a few (milliseconds), and at most the Kafka timeout.
func readBackBounds() [readBackBuckets]time.Duration {
	return [...]time.Duration{
		time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
		25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
		500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
	}
}

func (h *readBackLatency) observe(d time.Duration) {
	bounds := readBackBounds()
	i := 0
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += d
	h.n++
}

// ReadBackHistogram is the latency of read-backs of evicted replies, as
// Prometheus wants a histogram: cumulative counts by upper bound.
type ReadBackHistogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets map[float64]uint64 // upper bound in seconds → read-backs at most that long
}

func (h *readBackLatency) export() ReadBackHistogram {
	out := ReadBackHistogram{Count: h.n, Sum: h.sum, Buckets: make(map[float64]uint64, readBackBuckets)}
	var cum uint64
	for i, b := range readBackBounds() {
		cum += h.counts[i]
		out.Buckets[b.Seconds()] = cum
	}
	return out
}
