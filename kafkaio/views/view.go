package views

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// Entry is the current record of one key in a view. Its key, value and
// headers alias the view's read-only storage, which a write never changes in
// place: a caller may keep an Entry after the view moved on, and it reads
// the record it was given.
type Entry struct {
	Partition int32
	Offset    int64
	Timestamp int64 // milliseconds since the epoch
	Key       string
	Value     []byte
	headers   []byte // varint-length-prefixed name/value pairs, one allocation
}

// Header returns the first value of the named header. It allocates nothing:
// a fetch looks up a record's etag and content-type on every answer.
func (e *Entry) Header(name string) ([]byte, bool) {
	var val []byte
	found := false
	e.walkHeaders(func(k, v []byte) bool {
		if string(k) == name { // compared, not converted
			val, found = v, true
			return false
		}
		return true
	})
	return val, found
}

// EachHeader calls fn for every header in record order until fn returns false.
func (e *Entry) EachHeader(fn func(name string, value []byte) bool) {
	e.walkHeaders(func(k, v []byte) bool { return fn(string(k), v) })
}

// walkHeaders decodes the headers in place; name and value alias the entry.
func (e *Entry) walkHeaders(fn func(name, value []byte) bool) {
	b := e.headers
	for len(b) > 0 {
		n, w := binary.Uvarint(b)
		b = b[w:]
		name := b[:n:n]
		b = b[n:]
		n, w = binary.Uvarint(b)
		b = b[w:]
		val := b[:n:n]
		b = b[n:]
		if !fn(name, val) {
			return
		}
	}
}

func appendHeaders(b []byte, hs []client.Header) []byte {
	for _, h := range hs {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	return b
}

// Converter turns a record as written into what a view serves: a topic's
// models check it and convert it (to JSON), in place. A view calls it once
// per record, as the record enters the view, so fetches never convert.
//
// An error means the record is not served: an error wrapping ErrLater (its
// schema cannot be had now) holds the record aside, and it is tried again
// every HeldRetry until it converts, unless a newer record of its key came
// meanwhile; any other error leaves it out for good, and its key keeps the
// previous record.
type Converter func(r *client.Record) error

// ErrLater is wrapped by Converter errors for records to try again later.
var ErrLater = errors.New("cannot be converted now")

// HeldRetry is how often records held aside are converted again.
const HeldRetry = time.Second

// View is the current record per key of one topic (compaction semantics
// applied here, whatever the broker's compaction lag): a tombstone removes
// its key, and records without a key are not part of the view.
type View struct {
	// The fields a fetch reads and writes come first and together: the
	// hold, the last use, the read lock, then the store, whose look-up
	// fields lead (120 bytes in all), so that on a view whose lines are cold
	// (one GET to each of many routes) a fetch misses on two or three
	// adjacent cache lines of one object, not on lines of two objects.
	//
	// hold counts the callers using the view now (the low bits) and is
	// holdEvicted once the view is evicted. Holding is on every fetch's
	// path, so it takes no lock: a hold adds one and backs out if the view
	// was evicted, and the eviction (retire) sets holdEvicted only while the
	// count is 0, both on this one word: no view is evicted from under a
	// holder, and none is held once evicted, whether the holder found it in
	// the client's map or kept it from an earlier request (Handle).
	hold    atomic.Int64
	lastUse atomic.Int64 // when a holder last let go, Unix nanoseconds
	// disk is the view's store when it is kept on disk; nil: entries.
	disk    *diskStore
	mu      sync.RWMutex
	entries entryStore
	version uint64
	ready   chan struct{}

	topic   string
	topicID [16]byte
	window  time.Duration // coalescing window of Changed
	convert Converter     // nil: records are served as written
	// held are records whose conversion must wait, by key: each the latest
	// of its key; a newer record of the key removes it. Guarded by mu.
	held      map[string]*client.Record
	heldTimer *time.Timer
	// heldFloor is the lowest offset of a record held aside, by partition,
	// while heldStale is false: a view on disk never stores a position
	// past it (storedNext).
	heldFloor map[int32]int64
	heldStale bool

	positions []int64 // next offset per partition
	starts    []int64 // log start per partition at the last topic check
	nullKeys  uint64
	keyWaits  map[string]*keyWait
	anyWait   chan struct{}
	anyTimer  *time.Timer
	scratch   []byte // a record's header encoding, while it is applied
	readyOnce sync.Once

	// serial tells this view from every other view of the process, an
	// earlier view of the same topic included: answers rendered from a view
	// are cached by it, and a rebuilt view starts counting versions again.
	serial uint64
	// gone is set, with goneErr, once the view no longer shows its topic
	// (deleted, recreated, or its log went back): see Gone.
	gone    atomic.Bool
	goneErr error
	// catchUpErr is the last failure of the view's catch-up, while it is
	// not ready; caughtUp the records its catch-up applied, once it is.
	catchUpErr atomic.Pointer[error]
	caughtUp   int
}

// holdEvicted is set in View.hold once the view is evicted; the bits below
// it count the holders.
const (
	holdEvicted = int64(1) << 40
	holdCount   = holdEvicted - 1
)

func newView(topic string, id [16]byte, partitions int, window time.Duration) *View {
	v := &View{
		topic:     topic,
		topicID:   id,
		window:    window,
		positions: make([]int64, partitions),
		keyWaits:  map[string]*keyWait{},
		anyWait:   make(chan struct{}),
		ready:     make(chan struct{}),
	}
	v.entries.init()
	v.lastUse.Store(time.Now().UnixNano())
	return v
}

// Release lets go of a view taken with Views.HoldView, once per HoldView:
// an idle-view eviction never takes a view from under a request (a long poll
// holds it for its whole wait).
func (v *View) Release() {
	v.lastUse.Store(time.Now().UnixNano())
	// One release too many takes the count from 0 to all ones (evicted or
	// not).
	if v.hold.Add(-1)&holdCount == holdCount {
		panic("kafkaio: View.Release without HoldView")
	}
}

// tryHold holds the view unless it was evicted.
func (v *View) tryHold() bool {
	if v.hold.Add(1)&holdEvicted != 0 {
		v.hold.Add(-1)
		return false
	}
	return true
}

// retire marks the view evicted if nobody holds it; it reports whether it
// did. A retired view is never held again.
func (v *View) retire() bool {
	return v.hold.CompareAndSwap(0, holdEvicted)
}

func (v *View) idleSince() (last time.Time, held bool) {
	return time.Unix(0, v.lastUse.Load()), v.hold.Load()&holdCount > 0
}

// isReady reports whether Ready is closed, without waiting.
func (v *View) isReady() bool {
	select {
	case <-v.ready:
		return true
	default:
		return false
	}
}

// Topic is the topic's name.
func (v *View) Topic() string { return v.topic }

// TopicID is the topic's id, so a recreated topic cannot be mistaken for the old one.
func (v *View) TopicID() [16]byte { return v.topicID }

// Ready is closed once the view caught up with the topic as it was when the
// view was created.
func (v *View) Ready() <-chan struct{} { return v.ready }

// Get returns the current record of key.
//
// A view on disk whose store cannot read answers absent here: what answers a
// client uses Lookup, which says so.
func (v *View) Get(key string) (Entry, bool) {
	e, ok, _ := v.Lookup(key)
	return e, ok
}

// Lookup is Get that fails when the view cannot tell: a view on disk whose
// store fails a read (ErrStoreFailed). An answer of "no such record" would
// then be a wrong one.
func (v *View) Lookup(key string) (Entry, bool, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.disk != nil {
		return v.disk.get(key)
	}
	e, ok := v.entries.get(key)
	return e, ok, nil
}

// Scan calls fn for every current record, in no particular order, until fn
// returns false. The view is read-locked meanwhile: fn must be quick and
// must not call the view. It fails only for a view on disk whose store
// fails a read (ErrStoreFailed), having called fn for part of the records:
// the caller must not answer from them.
func (v *View) Scan(fn func(Entry) bool) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.disk != nil {
		return v.disk.scan(fn)
	}
	v.entries.scan(fn)
	return nil
}

// Version counts the changes applied to the view.
func (v *View) Version() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.version
}

// Stats are a view's sizes.
type Stats struct {
	Keys int
	// Bytes is the memory the view's entries hold: their storage chunks
	// (dead bytes not compacted yet included), records and index.
	Bytes    int64
	NullKeys uint64 // records skipped for having no key
	// DiskBytes is what a view kept on disk takes there (its store's
	// files), and CompactionBytes the store's estimated compaction debt:
	// the bytes its compactions would still rewrite.
	DiskBytes, CompactionBytes int64
}

// Stats reports the view's sizes.
func (v *View) Stats() Stats {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.disk != nil {
		ds := v.disk.stats()
		return Stats{Keys: int(v.disk.count), NullKeys: v.nullKeys, DiskBytes: ds.bytes, CompactionBytes: ds.compactionBytes}
	}
	return Stats{Keys: v.entries.count, Bytes: v.entries.mem, NullKeys: v.nullKeys}
}

// Position returns the next offset the view will read in partition p (-1
// for a partition it does not have).
func (v *View) Position(p int32) int64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if int(p) >= len(v.positions) || p < 0 {
		return -1
	}
	return v.positions[p]
}

// Partitions is the number of partitions the view reads.
func (v *View) Partitions() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.positions)
}

// grow makes the view read n partitions: partitions added to the topic
// start at offset 0, and the records there are applied as they come. It
// returns the partitions added.
func (v *View) grow(n int) []int32 {
	v.mu.Lock()
	defer v.mu.Unlock()
	var added []int32
	for p := len(v.positions); p < n; p++ {
		v.positions = append(v.positions, 0)
		added = append(added, int32(p))
	}
	return added
}

// shrink undoes a grow whose partitions could not be assigned: nothing was
// read from them.
func (v *View) shrink(n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if n < len(v.positions) {
		v.positions = v.positions[:n]
	}
}

type keyWait struct {
	ch   chan struct{}
	refs int
}

// KeyWatch is a waiter's registration on a key (WatchKey). C is closed at
// the next write to the key. A value, not a closure: a long poll holds one
// for its whole wait, and with many waiters a per-watch allocation adds up.
// The zero KeyWatch watches nothing; its Stop does nothing.
type KeyWatch struct {
	C   <-chan struct{}
	v   *View
	key string
	w   *keyWait
}

// WatchKey registers a watch on key: its C is closed at the next write to
// key (a new value or a tombstone). The waiter calls Stop exactly once when
// it gives up, so keys nobody waits for hold nothing. All waiters of a key
// share one channel. Register before reading the current value, so no write
// can fall between the read and the wait.
func (v *View) WatchKey(key string) KeyWatch {
	v.mu.Lock()
	defer v.mu.Unlock()
	w, ok := v.keyWaits[key]
	if !ok {
		w = &keyWait{ch: make(chan struct{})}
		v.keyWaits[key] = w
	}
	w.refs++
	return KeyWatch{C: w.ch, v: v, key: key, w: w}
}

// Stop ends the watch; the last watch of a key that was not written drops
// the key's channel.
func (kw KeyWatch) Stop() {
	if kw.w == nil {
		return
	}
	select {
	case <-kw.C:
		// The write that closed C removed the key's channel with it: nothing
		// is left to drop, and the waiters it woke (all at once, however
		// many) need not each take the view's write lock to find that out.
		return
	default:
	}
	kw.v.mu.Lock()
	defer kw.v.mu.Unlock()
	kw.w.refs--
	if kw.w.refs == 0 && kw.v.keyWaits[kw.key] == kw.w {
		delete(kw.v.keyWaits, kw.key)
	}
}

// Changed returns a channel closed shortly after the next change to the view
// (changes within the coalescing window wake waiters once).
func (v *View) Changed() <-chan struct{} {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.anyWait
}

// apply folds one record into the view. The caller owns the partition's
// order: records of a partition arrive in offset order. The view keeps
// neither r nor its headers slice (a catch-up reuses them for the next
// record), only its key and value bytes, when it holds r aside.
func (v *View) apply(r *client.Record) {
	if v.convert != nil && r.Key != nil && r.Value != nil {
		if err := v.convert(r); err != nil {
			v.mu.Lock()
			defer v.mu.Unlock()
			if errors.Is(err, ErrLater) {
				v.holdLocked(r) // first: a view on disk stores no position past it
			}
			v.advanceLocked(r.Partition, r.Offset+1)
			return
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.applyLocked(r)
}

// holdLocked keeps r aside (the latest record of its key) and arms the retry.
func (v *View) holdLocked(r *client.Record) {
	if v.held == nil {
		v.held = map[string]*client.Record{}
	}
	held := *r
	held.Headers = slices.Clone(r.Headers) // the caller reuses its slice
	if old, ok := v.held[string(r.Key)]; ok {
		v.unheldLocked(old)
	}
	v.held[string(r.Key)] = &held
	if !v.heldStale {
		v.lowerHeldFloor(&held)
	}
	if v.heldTimer == nil {
		v.heldTimer = time.AfterFunc(HeldRetry, v.retryHeld)
	}
}

// retryHeld converts the held records again; those that convert are
// applied, unless a newer record of their key came meanwhile.
func (v *View) retryHeld() {
	v.mu.Lock()
	rs := make([]*client.Record, 0, len(v.held))
	for _, r := range v.held {
		rs = append(rs, r)
	}
	v.mu.Unlock()
	type done struct {
		held, converted *client.Record
		err             error
	}
	out := make([]done, 0, len(rs))
	for _, r := range rs {
		c := *r // the held record stays as read until it converts
		out = append(out, done{r, &c, v.convert(&c)})
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, d := range out {
		key := string(d.held.Key)
		if v.held[key] != d.held {
			continue // superseded while converting
		}
		switch {
		case d.err == nil:
			delete(v.held, key)
			v.unheldLocked(d.held)
			v.applyLocked(d.converted)
		case !errors.Is(d.err, ErrLater):
			delete(v.held, key)
			v.unheldLocked(d.held)
		}
	}
	if v.disk != nil && len(out) > 0 {
		// The positions the held records kept the store below move on.
		for p, next := range v.positions {
			v.disk.advance(int32(p), v.storedNext(int32(p), next))
		}
	}
	v.heldTimer = nil
	if len(v.held) > 0 {
		v.heldTimer = time.AfterFunc(HeldRetry, v.retryHeld)
	}
}

// applyLocked folds a converted record into the view.
func (v *View) applyLocked(r *client.Record) {
	if int(r.Partition) < len(v.positions) && r.Offset+1 > v.positions[r.Partition] {
		v.positions[r.Partition] = r.Offset + 1
	}
	if r.Key == nil {
		v.nullKeys++
		if v.disk != nil {
			v.disk.advance(r.Partition, v.storedNext(r.Partition, v.nextLocked(r)))
		}
		return
	}
	if len(v.held) > 0 {
		if held, ok := v.held[string(r.Key)]; ok && (held.Partition != r.Partition || held.Offset < r.Offset) {
			delete(v.held, string(r.Key)) // a newer record of the key supersedes it
			v.unheldLocked(held)
		}
	}
	if v.disk != nil {
		v.scratch = appendHeaders(v.scratch[:0], r.Headers)
		if !v.disk.apply(r, v.scratch, v.storedNext(r.Partition, v.nextLocked(r))) {
			return
		}
		v.changedLocked(r.Key)
		return
	}
	s := &v.entries
	h := s.hash(r.Key)
	slot, num, had := s.find(r.Key, h)
	if had {
		if old := s.at(num); old.partition != r.Partition && !beats(r, &old) {
			// The same key in two partitions (a changed partitioner): the
			// order is (timestamp, partition, offset), as for filter
			// winners, so every replica agrees whatever order the
			// partitions were read in.
			return
		}
	}
	if r.Value == nil {
		if !had {
			return
		}
		s.remove(slot, num)
	} else {
		v.scratch = appendHeaders(v.scratch[:0], r.Headers)
		s.put(r, h, slot, num, had, v.scratch)
	}
	v.changedLocked(r.Key)
}

// storedNext is the next offset of partition p a view on disk may store:
// never past a record held aside for conversion, which only the heap holds,
// so that a restart reads it again rather than losing it.
func (v *View) storedNext(p int32, next int64) int64 {
	if len(v.held) == 0 {
		return next
	}
	if v.heldStale {
		clear(v.heldFloor)
		for _, r := range v.held {
			v.lowerHeldFloor(r)
		}
		v.heldStale = false
	}
	if f, ok := v.heldFloor[p]; ok && f < next {
		return f
	}
	return next
}

// lowerHeldFloor takes r, now held, into its partition's floor.
func (v *View) lowerHeldFloor(r *client.Record) {
	if f, ok := v.heldFloor[r.Partition]; ok && f <= r.Offset {
		return
	}
	if v.heldFloor == nil {
		v.heldFloor = map[int32]int64{}
	}
	v.heldFloor[r.Partition] = r.Offset
}

// unheldLocked notes that r is no longer held: the floor of its partition
// is read again if r was it.
func (v *View) unheldLocked(r *client.Record) {
	if f, ok := v.heldFloor[r.Partition]; ok && f == r.Offset {
		v.heldStale = true
	}
}

// nextLocked is the next offset of r's partition once r is applied.
func (v *View) nextLocked(r *client.Record) int64 {
	if int(r.Partition) < len(v.positions) {
		return v.positions[r.Partition]
	}
	return r.Offset + 1
}

// changedLocked counts a change to key and wakes its waiters, and the
// view's after the coalescing window.
func (v *View) changedLocked(key []byte) {
	v.version++
	if len(v.keyWaits) > 0 {
		if w, ok := v.keyWaits[string(key)]; ok {
			close(w.ch)
			delete(v.keyWaits, string(key))
		}
	}
	if v.anyTimer == nil {
		v.anyTimer = time.AfterFunc(v.window, v.fireChanged)
	}
}

func beats(r *client.Record, e *item) bool {
	ts := r.Timestamp.UnixMilli()
	if ts != e.ts {
		return ts > e.ts
	}
	return r.Partition > e.partition
}

func (v *View) fireChanged() {
	v.mu.Lock()
	defer v.mu.Unlock()
	close(v.anyWait)
	v.anyWait = make(chan struct{})
	v.anyTimer = nil
}

// advance moves a partition's position without a record (end of partition,
// skipped control records).
func (v *View) advance(p int32, next int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.advanceLocked(p, next)
}

func (v *View) advanceLocked(p int32, next int64) {
	if int(p) < len(v.positions) && next > v.positions[p] {
		v.positions[p] = next
		if v.disk != nil {
			v.disk.advance(p, v.storedNext(p, next))
		}
	}
}

func (v *View) markReady() { v.readyOnce.Do(func() { close(v.ready) }) }

// Serial tells this view from every other view its Views opened, earlier and
// later views of the same topic included.
func (v *View) Serial() uint64 { return v.serial }

// Gone reports why the view no longer shows its topic (an error wrapping
// ErrTopicDeleted or ErrTopicRecreated), or nil while it does. A gone view
// is never held again; a holder that finds it gone lets go of it and holds
// the topic's view anew, which is rebuilt from the topic as it is now.
func (v *View) Gone() error {
	if !v.gone.Load() {
		return nil
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.goneErr
}

// invalidate marks the view gone for err and wakes every waiter, each key's
// and the view's, at once: what they wait on will never change in this view.
// It also retires the view whatever its holders: none holds it again.
func (v *View) invalidate(err error) {
	v.hold.Or(holdEvicted)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.gone.Load() {
		return
	}
	v.goneErr = err
	v.gone.Store(true)
	if v.disk != nil {
		// Its holders read nothing from now on; the topic's next view
		// opens the store again.
		v.disk.close()
	}
	for key, w := range v.keyWaits {
		close(w.ch)
		delete(v.keyWaits, key)
	}
	close(v.anyWait)
	v.anyWait = make(chan struct{})
	if v.heldTimer != nil {
		v.heldTimer.Stop()
		v.heldTimer = nil
	}
	v.held = nil
}

// applyLive is apply for the live consumer, which reads a partition on from
// the view's position: a record below that position means the log went back
// (the topic was recreated, or the partition truncated), and what the view
// holds is no longer the log. It reports false then, applying nothing.
func (v *View) applyLive(r *client.Record) bool {
	if v.convert == nil || r.Key == nil || r.Value == nil {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.belowLocked(r.Partition, r.Offset) {
			return false
		}
		v.applyLocked(r)
		return true
	}
	if v.Position(r.Partition) > r.Offset {
		return false
	}
	v.apply(r)
	return true
}

// advanceLive is advance for the live consumer's end of partition: an end
// below the view's position means the log went back, as for applyLive, and
// it reports false.
func (v *View) advanceLive(p int32, next int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.belowLocked(p, next) {
		return false
	}
	v.advanceLocked(p, next)
	return true
}

func (v *View) belowLocked(p int32, offset int64) bool {
	return int(p) < len(v.positions) && p >= 0 && offset < v.positions[p]
}
