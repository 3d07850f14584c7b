package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
)

// ReplyIndexOptions configure a ReplyIndex.
type ReplyIndexOptions struct {
	Name         string            // the kafka binding's name, for logs and readiness
	Properties   map[string]string // librdkafka properties of the binding
	KafkaTimeout time.Duration     // bound of each metadata or offsets look-up (default 5s)
	// Retention is how far back replies are read and how long they are
	// kept (limits.reply-retention, default 10m).
	Retention time.Duration
	// MaxBytes bounds the index (limits.reply-index-bytes, default 64MiB);
	// beyond it the least recently written unpinned ids are evicted to
	// their location in the topic, read back when asked for
	// (replies_evicted.go).
	MaxBytes  int64
	Readiness Readiness // one condition per reply topic (optional)
	Logger    *slog.Logger
	Stats     *RdStats // receives the consumer's statistics as role replies (optional)
	// PartitionCheck is how often the partition counts of the reply topics
	// are read, to follow partitions added to them (default 30s).
	PartitionCheck time.Duration
}

// ReplyIndexStats are a reply index's sizes and counters.
type ReplyIndexStats struct {
	Entries int    // correlation ids with stored replies
	Pinned  int    // correlation ids with waiters
	Bytes   int64  // accounted bytes of stored replies
	Evicted uint64 // ids evicted for MaxBytes
	Expired uint64 // ids expired for Retention
	// SplitReplies counts ids whose replies came in more than one
	// partition: the responder did not key its replies by correlation id,
	// so their order is not guaranteed.
	SplitReplies uint64
	// WithoutHeader counts records of reply topics without the
	// correlation header (not indexed).
	WithoutHeader uint64
	// Evicted ids held as locations, read back when asked for
	// (replies_evicted.go).
	Located      int
	LocatedBytes int64
	// Read-backs of evicted ids by outcome: the records found, the reply
	// no longer in its topic (expired), or Kafka not answering in time.
	ReadBacksFound, ReadBacksExpired, ReadBacksFailed uint64
	ReadBackLatency                                   ReadBackHistogram
}

// ReplyIndex maps correlation id → reply records for every reply-to topic
// of a cluster, read by one consumer of its own (assignment only, no
// commits) from now - Retention, so any replica answers follow-ups and
// replays. Records are indexed by the value of the topic's correlation
// header; each id keeps its records in arrival order (offset order within a
// partition) and whether a null-value (terminal) record came.
//
// Memory is bounded by Retention (ids whose newest record is older expire)
// and MaxBytes (least recently written ids are evicted first); ids with
// waiters are pinned and never dropped.
//
// All reply topics share the one consumer, so a topic added while others
// are live delays their replies by its catch-up; reply topics are normally
// added at startup. An assign-only consumer is never told of partitions
// added to a topic, so the index looks for them every PartitionCheck.
type ReplyIndex struct {
	opts   ReplyIndexOptions
	logger *slog.Logger
	now    func() time.Time

	// connMu guards the creation of cons and admin, which connect does
	// for the first topic added; whatever reads them runs after it.
	connMu sync.Mutex
	cons   *kafka.Consumer
	admin  *kafka.AdminClient // derived from cons: describes the reply topics

	// assignMu serialises assignment changes: confluent-kafka-go's
	// IncrementalAssign writes consumer state without a lock.
	assignMu sync.Mutex
	mu       sync.Mutex
	topics   map[string]*replyTopic
	order    replyOrder // entries with records, least recently written first
	bytes    int64
	pinned   int
	stats    ReplyIndexStats
	closed   bool
	// Evicted replies read back (replies_evicted.go, replies_readback.go):
	// the reader, created with the first read-back, and its latencies.
	rdr       *replyReader
	readBacks readBackLatency
	// beforeAdmit, when set (tests), is called by the reader before it
	// takes the read-backs asked for.
	beforeAdmit func()

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopLogs chan struct{}
	logsDone chan struct{}
}

type replyTopic struct {
	name      string
	headers   []string // correlation header names (usually one)
	readiness string
	entries   map[string]*replyEntry
	located   locatedReplies // evicted ids (replies_evicted.go)
	added     time.Time

	// Catch-up state, guarded by ReplyIndex.mu. end and done have one
	// element per assigned partition, added partitions included.
	started   bool    // partitions assigned
	end       []int64 // end offsets when indexing began
	done      []bool  // partition reached its end offset
	remaining int
	caught    bool
	caughtUp  chan struct{} // closed once caught up
	attempted chan struct{} // closed after the first attempt to start
	tried     bool
	lastErr   error
}

type replyEntry struct {
	topic   *replyTopic
	id      string
	records []*Record // append-only: a slice handed out never changes
	// first backs records until a second record comes: a request-reply
	// gets one reply, and its slice is then no allocation of its own.
	first     [1]*Record
	terminal  bool
	partition int32
	split     bool
	bytes     int64
	newest    time.Time     // newest record timestamp, for Retention
	pins      int           // waiters
	changed   chan struct{} // closed at the next record; nil until asked for
	// The entry's place in ReplyIndex.order once it has records. The links
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

// NewReplyIndex returns an index without topics; topics are added with Add.
// Its consumer is created with the first topic: a binding no route replies
// through has no reply consumer, whose librdkafka threads, poll loop, log
// poller and partition check a quiet processor would otherwise run.
func NewReplyIndex(opts ReplyIndexOptions) (*ReplyIndex, error) {
	return newReplyIndex(opts, time.Now)
}

func newReplyIndex(opts ReplyIndexOptions, now func() time.Time) (*ReplyIndex, error) {
	if opts.KafkaTimeout <= 0 {
		opts.KafkaTimeout = DefaultKafkaTimeout
	}
	if opts.Retention <= 0 {
		opts.Retention = 10 * time.Minute
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 64 << 20
	}
	if opts.PartitionCheck <= 0 {
		opts.PartitionCheck = defaultPartitionCheck
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &ReplyIndex{
		opts: opts, logger: bindingLogger(opts.Logger, opts.Name), now: now,
		topics: map[string]*replyTopic{},
		ctx:    ctx, cancel: cancel,
		stopLogs: make(chan struct{}), logsDone: make(chan struct{}),
	}
	return x, nil
}

// connect creates the index's consumer and starts its goroutines, once.
// It runs in a topic's start goroutine, which the wait group counts, so
// Close waits for it and for what it starts.
func (x *ReplyIndex) connect() error {
	x.connMu.Lock()
	defer x.connMu.Unlock()
	if x.cons != nil {
		return nil
	}
	if err := x.ctx.Err(); err != nil {
		return err
	}
	cons, admin, err := newConsumer(x.opts.Name, x.opts.Properties, x.opts.KafkaTimeout, "kafka-ext-proc-replies-"+uuid.NewString(), "reply consumer")
	if err != nil {
		return err
	}
	x.cons, x.admin = cons, admin
	go func() {
		defer close(x.logsDone)
		forwardRdLogs(x.logger, cons.Logs(), "replies", x.stopLogs)
	}()
	x.wg.Add(2)
	go x.poll()
	go x.followPartitions()
	return nil
}

// Close stops the consumer. Watches stop changing; waiters are not woken.
func (x *ReplyIndex) Close() {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	x.closed = true
	x.mu.Unlock()
	x.cancel()
	x.connMu.Lock() // a connect under way ends first; none starts after
	cons, admin := x.cons, x.admin
	x.connMu.Unlock()
	x.wg.Wait()
	if cons == nil {
		return
	}
	admin.Close()
	_ = cons.Close()
	close(x.stopLogs)
	<-x.logsDone
}

// Add starts indexing topic by the correlation header named header, and
// reports the topic to the Readiness until it has caught up. Adding a topic
// again is a no-op; a second header name for a topic already being read
// applies to the records read from then on.
func (x *ReplyIndex) Add(topic, header string) {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	if t, ok := x.topics[topic]; ok {
		for _, h := range t.headers {
			if h == header {
				x.mu.Unlock()
				return
			}
		}
		t.headers = append(t.headers, header)
		started := t.started
		x.mu.Unlock()
		if started {
			x.logger.Warn("a second correlation header for a reply topic already read: earlier replies are not indexed by it",
				"topic", topic, "header", header)
		}
		return
	}
	t := &replyTopic{
		name: topic, headers: []string{header},
		readiness: "kafka " + x.opts.Name + " replies " + topic,
		entries:   map[string]*replyEntry{},
		added:     x.now(),
		caughtUp:  make(chan struct{}), attempted: make(chan struct{}),
	}
	x.topics[topic] = t
	x.wg.Add(1)
	x.mu.Unlock()
	x.setReady(t, false, "catching up")
	go x.start(t)
}

func (x *ReplyIndex) setReady(t *replyTopic, ready bool, reason string) {
	if x.opts.Readiness != nil {
		x.opts.Readiness.Set(t.readiness, ready, reason)
	}
}

// start assigns the topic's partitions, retrying every second until it
// works (a missing topic may be created later).
func (x *ReplyIndex) start(t *replyTopic) {
	defer x.wg.Done()
	for {
		err := x.connect()
		if err == nil {
			err = x.assign(t)
		}
		x.mu.Lock()
		t.lastErr = err
		if !t.tried {
			t.tried = true
			close(t.attempted)
		}
		x.mu.Unlock()
		if err == nil {
			return
		}
		if x.ctx.Err() != nil {
			return
		}
		x.setReady(t, false, err.Error())
		if errors.Is(err, ErrUnknownTopic) {
			x.logger.Warn("a reply topic does not exist", "topic", t.name)
		} else {
			x.logger.Warn("starting to read a reply topic failed; retrying", "topic", t.name, "err", err)
		}
		select {
		case <-x.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// assign reads the end offsets, then the offsets of now - Retention, and
// assigns the partitions there. End offsets come first so a record written
// in between is at or after the start offset: it is read, and the topic is
// caught up once every partition reached the end seen first.
func (x *ReplyIndex) assign(t *replyTopic) error {
	topic := t.name
	n, err := x.partitionCount(topic)
	if err != nil {
		return err
	}
	start, end, err := x.startAndEnd(topic, n)
	if err != nil {
		return err
	}

	assign := make([]kafka.TopicPartition, n)
	for p := range assign {
		assign[p] = kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: kafka.Offset(start[p])}
	}
	// assignMu is held from the state to the assignment: grow sees a
	// started topic only once its partitions are assigned.
	x.assignMu.Lock()
	x.mu.Lock()
	t.end = end
	t.done = make([]bool, n)
	t.remaining = 0
	for p := 0; p < n; p++ {
		if start[p] >= end[p] {
			t.done[p] = true
		} else {
			t.remaining++
		}
	}
	t.started = true // before the assignment: its first records count
	t.lastErr = nil
	x.mu.Unlock()
	err = x.cons.IncrementalAssign(assign)
	if err != nil {
		x.mu.Lock()
		t.started = false
		x.mu.Unlock()
		x.assignMu.Unlock()
		return fmt.Errorf("assigning reply topic %s: %w", topic, err)
	}
	x.assignMu.Unlock()
	x.mu.Lock()
	caught := x.checkCaughtUpLocked(t) // nothing to read in any partition
	x.mu.Unlock()
	if caught {
		x.caughtUp(t)
	}
	return nil
}

// partitionCount reads the number of partitions of a reply topic.
func (x *ReplyIndex) partitionCount(topic string) (int, error) {
	return topicPartitionCount(x.cons, topic, "reply topic", x.opts.KafkaTimeout)
}

// startAndEnd reads the end offsets of a reply topic's n partitions, then
// the offsets of now - Retention: where the index starts reading each
// partition (the end where nothing is that recent).
func (x *ReplyIndex) startAndEnd(topic string, n int) (start, end []int64, err error) {
	ms := int(x.opts.KafkaTimeout / time.Millisecond)
	end = make([]int64, n)
	for p := 0; p < n; p++ {
		if x.ctx.Err() != nil {
			return nil, nil, x.ctx.Err()
		}
		_, hi, err := x.cons.QueryWatermarkOffsets(topic, int32(p), ms)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the end offset of %s[%d]: %w", topic, p, err)
		}
		end[p] = hi
	}
	since := kafka.Offset(x.now().Add(-x.opts.Retention).UnixMilli())
	query := make([]kafka.TopicPartition, n)
	for p := range query {
		query[p] = kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: since}
	}
	found, err := x.cons.OffsetsForTimes(query, ms)
	if err != nil {
		return nil, nil, fmt.Errorf("looking up the offsets of %s since %v: %w", topic, x.opts.Retention, err)
	}
	start = make([]int64, n)
	copy(start, end) // no record since then: start at the end
	for _, f := range found {
		if f.Error != nil {
			return nil, nil, fmt.Errorf("looking up the offset of %s[%d] since %v: %w", topic, f.Partition, x.opts.Retention, f.Error)
		}
		if int(f.Partition) < n && f.Offset >= 0 {
			start[f.Partition] = int64(f.Offset)
		}
	}
	return start, end, nil
}

// followPartitions looks for partitions added to the started reply topics
// every PartitionCheck, and assigns them.
func (x *ReplyIndex) followPartitions() {
	defer x.wg.Done()
	checkEvery(x.ctx, x.opts.PartitionCheck, x.logger, "the reply topics", x.checkPartitions)
}

// checkPartitions describes every started reply topic in one request and
// assigns the partitions each gained.
func (x *ReplyIndex) checkPartitions() error {
	x.mu.Lock()
	var names []string
	for name, t := range x.topics {
		if t.started {
			names = append(names, name)
		}
	}
	x.mu.Unlock()
	return growEach(x.ctx, x.admin, names, x.opts.KafkaTimeout, x.grow)
}

// grow assigns the partitions of a started topic from the number assigned
// up to n, at their beginning: a partition added later holds only records
// written since it was created, so none is missed. A smaller n is ignored
// (Kafka never removes partitions; it is a stale answer).
func (x *ReplyIndex) grow(topic string, n int) error {
	x.assignMu.Lock()
	defer x.assignMu.Unlock()
	x.mu.Lock()
	t := x.topics[topic]
	if t == nil || !t.started || n <= len(t.done) {
		x.mu.Unlock()
		return nil
	}
	old := len(t.done)
	// The catch-up covers what was there when indexing began: the new
	// partitions count as done, so a caught-up topic stays caught up.
	for range n - old {
		t.end = append(t.end, 0)
		t.done = append(t.done, true)
	}
	x.mu.Unlock()
	if err := assignAdded(x.cons, topic, "reply topic", old, n); err != nil {
		x.mu.Lock()
		t.end, t.done = t.end[:old], t.done[:old]
		x.mu.Unlock()
		return err
	}
	x.logger.Info("reading partitions added to a reply topic", "topic", topic, "partitions_before", old, "partitions", n)
	return nil
}

// checkCaughtUpLocked marks the topic caught up once no partition remains;
// true the first time, when the caller must call caughtUp.
func (x *ReplyIndex) checkCaughtUpLocked(t *replyTopic) bool {
	if t.caught || !t.started || t.remaining > 0 {
		return false
	}
	t.caught = true
	close(t.caughtUp)
	return true
}

func (x *ReplyIndex) caughtUp(t *replyTopic) {
	x.setReady(t, true, "")
	x.logger.Debug("reply index caught up", "topic", t.name, "took", x.now().Sub(t.added))
}

// poll is the one goroutine that polls the consumer, indexes replies and
// expires old ones.
func (x *ReplyIndex) poll() {
	defer x.wg.Done()
	interval := min(max(x.opts.Retention/10, 100*time.Millisecond), 30*time.Second)
	nextSweep := x.now().Add(interval)
	for x.ctx.Err() == nil {
		switch ev := x.cons.Poll(100).(type) {
		case *kafka.Message:
			x.apply(ev)
		case kafka.PartitionEOF:
			x.eof(ev)
		case kafka.Error:
			x.logger.Debug("reply consumer", "err", ev)
		case *kafka.Stats:
			x.opts.Stats.record("replies", ev.String())
		}
		if now := x.now(); !now.Before(nextSweep) {
			x.expire(now)
			nextSweep = now.Add(interval)
		}
	}
}

// progressLocked records that partition p of t will next read offset next.
func (x *ReplyIndex) progressLocked(t *replyTopic, p int32, next int64) bool {
	if !t.started || int(p) >= len(t.done) || t.done[p] || next < t.end[p] {
		return false
	}
	t.done[p] = true
	t.remaining--
	return x.checkCaughtUpLocked(t)
}

func (x *ReplyIndex) eof(ev kafka.PartitionEOF) {
	if ev.Topic == nil {
		return
	}
	x.mu.Lock()
	t := x.topics[*ev.Topic]
	caught := false
	if t != nil && t.started && int(ev.Partition) < len(t.done) && !t.done[ev.Partition] {
		// The end of a partition now is at or beyond its end when indexing
		// began (trailing control records included).
		caught = x.progressLocked(t, ev.Partition, t.end[ev.Partition])
	}
	x.mu.Unlock()
	if caught {
		x.caughtUp(t)
	}
}

func (x *ReplyIndex) apply(m *kafka.Message) {
	if m.TopicPartition.Error != nil || m.TopicPartition.Topic == nil {
		return
	}
	p, offset := m.TopicPartition.Partition, int64(m.TopicPartition.Offset)
	x.mu.Lock()
	t := x.topics[*m.TopicPartition.Topic]
	if t == nil {
		x.mu.Unlock()
		return
	}
	caught := x.progressLocked(t, p, offset+1)
	var split []string
	indexed := false
	var r *Record
	for i, name := range t.headers {
		id, ok := headerBytes(m.Headers, name)
		if !ok || (i > 0 && sameIDBytes(m.Headers, t.headers[:i], id)) {
			continue
		}
		if r == nil {
			r = toReplyRecord(t.name, m, x.now)
		}
		indexed = true
		if e := x.indexLocked(t, id, r); e != nil {
			split = append(split, e.id)
		}
	}
	if !indexed {
		x.stats.WithoutHeader++
	}
	x.evictLocked()
	x.mu.Unlock()
	for _, id := range split {
		x.logger.Warn("replies of one correlation id in several partitions: the responder does not key replies by correlation id",
			"topic", t.name, "correlation_id", id, "partition", p, "offset", offset)
	}
	if caught {
		x.caughtUp(t)
	}
}

// indexLocked appends r to the id's entry; it returns the entry when r is
// the first record of the id in another partition. The id is the header's
// bytes: a waiter's entry exists already and is found without converting
// them, so only an id nobody waits for is copied into a string.
func (x *ReplyIndex) indexLocked(t *replyTopic, id []byte, r *Record) (split *replyEntry) {
	if t.located.n > 0 && x.locatedRecordLocked(t, id, r) {
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
		x.order.pushBack(e)
	} else {
		x.order.moveToBack(e)
		if r.Partition != e.partition && !e.split {
			e.split = true
			x.stats.SplitReplies++
			split = e
		}
	}
	e.records = append(e.records, r)
	if r.Value == nil {
		e.terminal = true
	}
	e.bytes += size
	x.bytes += size
	if r.Timestamp.After(e.newest) {
		e.newest = r.Timestamp
	}
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
	return split
}

// evictLocked drops the least recently written unpinned ids while the index
// is over MaxBytes.
func (x *ReplyIndex) evictLocked() {
	for e := x.order.front; e != nil && x.bytes > x.opts.MaxBytes; {
		next := e.next
		if e.pins == 0 {
			x.locateLocked(e) // its records can be read back
			x.removeLocked(e)
			x.stats.Evicted++
		}
		e = next
	}
}

// expire drops unpinned ids whose newest record is older than Retention.
// The order is by last write, close to timestamp order, so the walk stops
// at the first id still within retention.
func (x *ReplyIndex) expire(now time.Time) {
	cutoff := now.Add(-x.opts.Retention)
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, t := range x.topics {
		x.expireLocatedLocked(t, cutoff.UnixNano())
	}
	for e := x.order.front; e != nil; {
		next := e.next
		if !e.newest.Before(cutoff) {
			return
		}
		if e.pins == 0 {
			x.removeLocked(e)
			x.stats.Expired++
		}
		e = next
	}
}

func (x *ReplyIndex) removeLocked(e *replyEntry) {
	if e.listed {
		x.order.remove(e)
	}
	e.unindexLocked()
	x.bytes -= e.bytes
}

// unindexLocked takes e out of its topic's map if it is the id's entry.
func (e *replyEntry) unindexLocked() {
	if e.indexed {
		delete(e.topic.entries, e.id)
		e.indexed = false
	}
}

// CaughtUp tells, without waiting, whether topic's index has caught up (see
// WaitCaughtUp): once it has, a caller can skip the bounded wait and the
// timer it needs.
func (x *ReplyIndex) CaughtUp(topic string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[topic]
	return t != nil && t.caught
}

// WaitCaughtUp waits until topic's index has read everything that was in
// the topic when indexing began, so a lookup that finds nothing means no
// reply was written before. It fails at once, wrapping ErrNotReady and
// ErrUnknownTopic, if the topic does not exist; with ErrNotReady when ctx
// ends first.
func (x *ReplyIndex) WaitCaughtUp(ctx context.Context, topic string) error {
	x.mu.Lock()
	t := x.topics[topic]
	x.mu.Unlock()
	if t == nil {
		return fmt.Errorf("%w: reply topic %s was not added to the reply index", ErrNotReady, topic)
	}
	select {
	case <-t.caughtUp:
		return nil
	case <-t.attempted:
	case <-ctx.Done():
		return fmt.Errorf("%w: reply index of %s: %w", ErrNotReady, topic, ctx.Err())
	}
	x.mu.Lock()
	lastErr, caught := t.lastErr, t.caught
	x.mu.Unlock()
	if caught {
		return nil
	}
	if errors.Is(lastErr, ErrUnknownTopic) {
		return fmt.Errorf("%w: reply index: %w", ErrNotReady, lastErr)
	}
	select {
	case <-t.caughtUp:
		return nil
	case <-ctx.Done():
		if lastErr != nil {
			return fmt.Errorf("%w: reply index of %s: %w (last error: %v)", ErrNotReady, topic, ctx.Err(), lastErr)
		}
		return fmt.Errorf("%w: reply index of %s: %w", ErrNotReady, topic, ctx.Err())
	}
}

// Stats reports the index's sizes and counters.
func (x *ReplyIndex) Stats() ReplyIndexStats {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.stats
	s.Entries = x.order.n
	s.Pinned = x.pinned
	s.Bytes = x.bytes
	for _, t := range x.topics {
		s.Located += t.located.n
		s.LocatedBytes += t.located.bytes
	}
	s.ReadBackLatency = x.readBacks.export()
	return s
}

// SplitReplies counts correlation ids whose replies came in more than one
// partition.
func (x *ReplyIndex) SplitReplies() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.stats.SplitReplies
}

// ReplyWatch is a waiter's hold on one correlation id of one reply topic.
// The id stays in the index (pinned) until Close.
//
// To wait without missing a record: take Changed (or State), read Records,
// and if they are not enough wait on the channel, then read again; every
// record closes the channel and a later call returns a fresh one.
type ReplyWatch struct {
	x      *ReplyIndex
	e      *replyEntry
	closed bool // guarded by x.mu
}

// watchedEntry is a new id's entry and the watch that created it, in one
// allocation: every request-reply watches an id nobody asked for before.
// The entry keeps the watch's few bytes for as long as it is kept.
type watchedEntry struct {
	e replyEntry
	w ReplyWatch
}

// Watch pins correlationID in topic's index and returns the hold. Register
// it before producing the request record, so no reply can be missed. topic
// must have been added; a watch of a topic that was not never changes.
func (x *ReplyIndex) Watch(topic, correlationID string) *ReplyWatch {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[topic]
	if t == nil {
		x.logger.Error("watching a reply topic that is not indexed", "topic", topic)
		return &ReplyWatch{}
	}
	var w *ReplyWatch
	e := t.entries[correlationID]
	if e == nil {
		we := &watchedEntry{e: replyEntry{topic: t, id: correlationID, indexed: true}}
		e, w = &we.e, &we.w
		e.records = e.first[:0]
		t.entries[correlationID] = e
	} else {
		w = new(ReplyWatch)
	}
	w.x, w.e = x, e
	e.pins++
	if e.pins == 1 {
		x.pinned++
	}
	if len(e.records) == 0 && t.located.n > 0 {
		x.readBackLocked(e) // evicted: every waiting path wakes when it is back
	}
	return w
}

// State returns, consistently, the records so far, whether the terminal
// (null-value) record came, and a channel closed at the next record.
func (w *ReplyWatch) State() (records []*Record, terminal bool, changed <-chan struct{}) {
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
func (w *ReplyWatch) First() (first *Record, changed <-chan struct{}) {
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
func (w *ReplyWatch) Records() []*Record {
	if w.x == nil {
		return nil
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	return w.e.records[:len(w.e.records):len(w.e.records)]
}

// Terminal tells whether a null-value record (the end of a gRPC call) came.
func (w *ReplyWatch) Terminal() bool {
	if w.x == nil {
		return false
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	return w.e.terminal
}

// Changed returns a channel closed when the next record of the id arrives;
// all waiters of the id share it.
func (w *ReplyWatch) Changed() <-chan struct{} {
	if w.x == nil {
		return nil
	}
	w.x.mu.Lock()
	defer w.x.mu.Unlock()
	return w.changedLocked()
}

func (w *ReplyWatch) changedLocked() chan struct{} {
	if w.e.changed == nil {
		w.e.changed = make(chan struct{})
	}
	return w.e.changed
}

// Close releases the hold; the id may then be evicted or expire.
func (w *ReplyWatch) Close() {
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
	x.pinned--
	if len(e.records) == 0 {
		// Nothing came: the id holds nothing.
		e.unindexLocked()
		return
	}
	x.evictLocked() // it may have been spared while over MaxBytes
}

func headerValue(hs []kafka.Header, name string) (string, bool) {
	v, ok := headerBytes(hs, name)
	return string(v), ok
}

// headerBytes is headerValue without the copy into a string.
func headerBytes(hs []kafka.Header, name string) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}

// sameID tells whether one of the earlier header names carries id too, so a
// record is indexed once per id.
func sameID(hs []kafka.Header, names []string, id string) bool {
	for _, n := range names {
		if v, ok := headerBytes(hs, n); ok && string(v) == id {
			return true
		}
	}
	return false
}

// sameIDBytes is sameID for an id still in the header's bytes.
func sameIDBytes(hs []kafka.Header, names []string, id []byte) bool {
	for _, n := range names {
		if v, ok := headerBytes(hs, n); ok && string(v) == string(id) {
			return true
		}
	}
	return false
}

// toReplyRecord converts a reply read from topic. The record names the
// topic with the index's own string rather than the message's copy, which
// a stored reply would otherwise keep alive.
func toReplyRecord(topic string, m *kafka.Message, now func() time.Time) *Record {
	r := newReplyRecord(len(m.Headers))
	*r = Record{
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
		r.Headers[i] = Header{Key: h.Key, Value: h.Value}
	}
	return r
}

// newReplyRecord returns a record with room for n headers (Headers has
// length n): with a few, record and headers are one allocation, which the
// stored reply keeps together anyway.
func newReplyRecord(n int) *Record {
	switch {
	case n == 0:
		return &Record{}
	case n <= 2:
		b := new(recordWith2)
		b.r.Headers = b.h[:n:n]
		return &b.r
	case n <= 4:
		b := new(recordWith4)
		b.r.Headers = b.h[:n:n]
		return &b.r
	}
	return &Record{Headers: make([]Header, n)}
}

// A record and room for its headers (two sizes: a reply's few headers
// fill most of either).
type (
	recordWith2 struct {
		r Record
		h [2]Header
	}
	recordWith4 struct {
		r Record
		h [4]Header
	}
)

func recordBytes(r *Record) int64 {
	n := int64(replyRecordOverhead + len(r.Key) + len(r.Value))
	for _, h := range r.Headers {
		n += int64(replyHeaderOverhead + len(h.Key) + len(h.Value))
	}
	return n
}
