package replies

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// store is what the reply index holds: per reply topic, the records of each
// correlation id, bounded by maxBytes (the least recently written ids go
// first) and by retention; ids with waiters are pinned and never dropped.
// It is guarded by Index.mu and knows nothing of how the records are
// read. An evicted id keeps its location in its topic's located set
// (evicted.go), from which the index reads it back.
type store struct {
	maxBytes  int64
	retention time.Duration
	order     replyOrder // entries with records, least recently written first
	bytes     int64
	pinned    int
	stats     Stats
}

type replyEntry struct {
	topic   *replyTopic
	id      string
	records []*client.Record // append-only: a slice handed out never changes
	// first backs records until a second record comes: a request-reply
	// gets one reply, and its slice is then no allocation of its own.
	first     [1]*client.Record
	terminal  bool
	partition int32
	split     bool
	bytes     int64
	newest    time.Time     // newest record timestamp, for Retention
	pins      int           // waiters
	changed   chan struct{} // closed at the next record; nil until asked for
	// The entry's place in store.order once it has records. The links
	// are the entry's own, not a container/list element: one object less
	// to allocate per id and for the collector to scan while it is kept.
	listed     bool
	prev, next *replyEntry
	// indexed is whether topic.entries[id] is this entry: removing an
	// entry then needs no second look-up of its id (a cold map slot and
	// key, at every eviction of a full index).
	indexed bool
}

// replyOrder is a doubly linked list of entries through their own links.
type replyOrder struct {
	front, back *replyEntry
	n           int
}

func (o *replyOrder) pushBack(e *replyEntry) {
	e.prev, e.next = o.back, nil
	if o.back != nil {
		o.back.next = e
	} else {
		o.front = e
	}
	o.back = e
	e.listed = true
	o.n++
}

func (o *replyOrder) remove(e *replyEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		o.front = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		o.back = e.prev
	}
	e.prev, e.next, e.listed = nil, nil, false
	o.n--
}

func (o *replyOrder) moveToBack(e *replyEntry) {
	if o.back == e {
		return
	}
	o.remove(e)
	o.pushBack(e)
}

// Bytes an id and a record cost beyond their data (structs, slice and map
// slots, string headers). An id's entry is allocated with its first watch
// (watchedEntry), which it keeps.
const (
	replyEntryOverhead  = 200
	replyRecordOverhead = 128
	replyHeaderOverhead = 40
)

// add appends r to the id's entry; it returns the entry when r is
// the first record of the id in another partition. The id is the header's
// bytes: a waiter's entry exists already and is found without converting
// them, so only an id nobody waits for is copied into a string.
func (s *store) add(t *replyTopic, id []byte, r *client.Record) (split *replyEntry) {
	if t.located.n > 0 && s.addLocated(t, id, r) {
		return nil // an evicted id's records stay together in its location
	}
	e := t.entries[string(id)]
	if e == nil {
		e = &replyEntry{topic: t, id: string(id), indexed: true}
		e.records = e.first[:0]
		t.entries[e.id] = e
	}
	size := recordBytes(r)
	if len(e.records) == 0 {
		e.partition = r.Partition
		size += replyEntryOverhead + int64(len(id))
		s.order.pushBack(e)
	} else {
		s.order.moveToBack(e)
		if r.Partition != e.partition && !e.split {
			e.split = true
			s.stats.SplitReplies++
			split = e
		}
	}
	e.records = append(e.records, r)
	if r.Value == nil {
		e.terminal = true
	}
	e.bytes += size
	s.bytes += size
	if r.Timestamp.After(e.newest) {
		e.newest = r.Timestamp
	}
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
	return split
}

// evict drops the least recently written unpinned ids while the index
// is over MaxBytes, keeping where their records lie.
func (s *store) evict() {
	for e := s.order.front; e != nil && s.bytes > s.maxBytes; {
		next := e.next
		if e.pins == 0 {
			s.locate(e) // its records can be read back
			s.remove(e)
			s.stats.Evicted++
		}
		e = next
	}
}

// expire drops unpinned ids whose newest record is older than Retention,
// and the locations of evicted ids of topics as old. The order is by last
// write, close to timestamp order, so the walk stops at the first id still
// within retention.
func (s *store) expire(now time.Time, topics map[string]*replyTopic) {
	cutoff := now.Add(-s.retention)
	for _, t := range topics {
		s.expireLocated(t, cutoff.UnixNano())
	}
	for e := s.order.front; e != nil; {
		next := e.next
		if !e.newest.Before(cutoff) {
			return
		}
		if e.pins == 0 {
			s.remove(e)
			s.stats.Expired++
		}
		e = next
	}
}

func (s *store) remove(e *replyEntry) {
	if e.listed {
		s.order.remove(e)
	}
	e.unindexLocked()
	s.bytes -= e.bytes
}

// unindexLocked takes e out of its topic's map if it is the id's entry.
func (e *replyEntry) unindexLocked() {
	if e.indexed {
		delete(e.topic.entries, e.id)
		e.indexed = false
	}
}

// toReplyRecord converts a reply read from topic. The record names the
// topic with the index's own string rather than the message's copy, which
// a stored reply would otherwise keep alive.
func toReplyRecord(topic string, m *kafka.Message, now func() time.Time) *client.Record {
	r := newReplyRecord(len(m.Headers))
	*r = client.Record{
		Topic:     topic,
		Partition: m.TopicPartition.Partition,
		Offset:    int64(m.TopicPartition.Offset),
		Timestamp: m.Timestamp,
		Key:       m.Key,
		Value:     m.Value,
		Headers:   r.Headers,
	}
	if m.TimestampType == kafka.TimestampNotAvailable || r.Timestamp.IsZero() {
		r.Timestamp = now()
	}
	for i, h := range m.Headers {
		r.Headers[i] = client.Header{Key: h.Key, Value: h.Value}
	}
	return r
}

// newReplyRecord returns a record with room for n headers (Headers has
// length n): with a few, record and headers are one allocation, which the
// stored reply keeps together anyway.
func newReplyRecord(n int) *client.Record {
	switch {
	case n == 0:
		return &client.Record{}
	case n <= 2:
		b := new(recordWith2)
		b.r.Headers = b.h[:n:n]
		return &b.r
	case n <= 4:
		b := new(recordWith4)
		b.r.Headers = b.h[:n:n]
		return &b.r
	}
	return &client.Record{Headers: make([]client.Header, n)}
}

// A record and room for its headers (two sizes: a reply's few headers
// fill most of either).
type (
	recordWith2 struct {
		r client.Record
		h [2]client.Header
	}
	recordWith4 struct {
		r client.Record
		h [4]client.Header
	}
)

func recordBytes(r *client.Record) int64 {
	n := int64(replyRecordOverhead + len(r.Key) + len(r.Value))
	for _, h := range r.Headers {
		n += int64(replyHeaderOverhead + len(h.Key) + len(h.Value))
	}
	return n
}

// dropTopic forgets the replies the store holds of a reply topic whose
// generation ended (deleted, or deleted and created again): they are no
// longer in any log. An id nobody waits for becomes a location that says
// so (a *RemovedError, as for a reply retention removed), as does every
// evicted id of the topic; their waiters wake and see it. An id with
// waiters keeps what it has and waits on: it is a request in flight, whose
// reply the responder writes to the topic as it is now. It returns how
// many ids were turned into removed locations.
func (s *store) dropTopic(t *replyTopic) (dropped int) {
	for _, e := range t.entries {
		if e.pins > 0 {
			continue
		}
		if len(e.records) > 0 {
			s.locate(e)
			dropped++
		}
		s.remove(e)
	}
	for loc := t.located.front; loc != nil; loc = loc.next {
		if loc.more == nil {
			loc.more = &locationMore{}
		}
		// A read-back under way finds its location taken (readBackDone).
		loc.more.read, loc.more.pending = nil, nil
		loc.more.err = &RemovedError{Topic: t.name, Partition: loc.span.partition, Offset: loc.span.first, LogStart: -1}
		// Only an id a watch asked for has waiters, and the watch left
		// the id in more (a location is kept by its hash).
		if e := t.entries[loc.more.id]; loc.more.id != "" && e != nil && e.changed != nil {
			close(e.changed)
			e.changed = nil
		}
	}
	return dropped
}
