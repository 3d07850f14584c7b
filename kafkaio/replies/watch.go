package replies

import "github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"

// Watch is a waiter's hold on one correlation id of one reply topic.
// The id stays in the index (pinned) until Close.
//
// To wait without missing a record: take Changed (or State), read Records,
// and if they are not enough wait on the channel, then read again; every
// record closes the channel and a later call returns a fresh one.
type Watch struct {
	x      *Index
	e      *replyEntry
	closed bool // guarded by x.mu
}

// watchedEntry is a new id's entry and the watch that created it, in one
// allocation: every request-reply watches an id nobody asked for before.
// The entry keeps the watch's few bytes for as long as it is kept.
type watchedEntry struct {
	e replyEntry
	w Watch
}

// Watch pins correlationID in topic's index and returns the hold. Register
// it before producing the request record, so no reply can be missed. topic
// must have been added; a watch of a topic that was not never changes.
func (x *Index) Watch(topic, correlationID string) *Watch {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[topic]
	if t == nil {
		x.logger.Error("watching a reply topic that is not indexed", "topic", topic)
		return &Watch{}
	}
	var w *Watch
	e := t.entries[correlationID]
	if e == nil {
		we := &watchedEntry{e: replyEntry{topic: t, id: correlationID, indexed: true}}
		e, w = &we.e, &we.w
		e.records = e.first[:0]
		t.entries[correlationID] = e
	} else {
		w = new(Watch)
	}
	w.x, w.e = x, e
	e.pins++
	if e.pins == 1 {
		x.store.pinned++
	}
	if len(e.records) == 0 && t.located.n > 0 {
		x.readBackLocked(e) // evicted: every waiting path wakes when it is back
	}
	return w
}

// State returns, consistently, the records so far, whether the terminal
// (null-value) record came, and a channel closed at the next record.
func (w *Watch) State() (records []*client.Record, terminal bool, changed <-chan struct{}) {
	if w.x == nil {
		return nil, false, nil
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	return w.e.records[:len(w.e.records):len(w.e.records)], w.e.terminal, w.changedLocked()
}

// First returns the id's first reply record, or when none came yet nil and
// a channel closed at the next record: what an HTTP answer waits for. Unlike
// State it makes no channel once a record is there, which the stored reply
// would keep for as long as the index keeps it.
func (w *Watch) First() (first *client.Record, changed <-chan struct{}) {
	if w.x == nil {
		return nil, nil
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	if len(w.e.records) > 0 {
		return w.e.records[0], nil
	}
	return nil, w.changedLocked()
}

// Records returns the id's reply records in arrival order. The slice is
// the caller's: later records do not change it. HTTP answers with the first.
func (w *Watch) Records() []*client.Record {
	if w.x == nil {
		return nil
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	return w.e.records[:len(w.e.records):len(w.e.records)]
}

// Terminal tells whether a null-value record (the end of a gRPC call) came.
func (w *Watch) Terminal() bool {
	if w.x == nil {
		return false
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	return w.e.terminal
}

// Changed returns a channel closed when the next record of the id arrives;
// all waiters of the id share it.
func (w *Watch) Changed() <-chan struct{} {
	if w.x == nil {
		return nil
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	return w.changedLocked()
}

func (w *Watch) changedLocked() chan struct{} {
	if w.e.changed == nil {
		w.e.changed = make(chan struct{})
	}
	return w.e.changed
}

// Close releases the hold; the id may then be evicted or expire.
func (w *Watch) Close() {
	if w.x == nil {
		return
	}
	x := w.x
	x.mu.Lock()
	defer x.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	e := w.e
	e.pins--
	if e.pins > 0 {
		return
	}
	x.store.pinned--
	if len(e.records) == 0 {
		// Nothing came: the id holds nothing.
		e.unindexLocked()
		return
	}
	x.store.evict() // it may have been spared while over MaxBytes
}
