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

// KeyIndexOptions configure a KeyIndex.
type KeyIndexOptions struct {
	Name         string            // the kafka binding's name, for logs
	Properties   map[string]string // librdkafka properties of the binding
	KafkaTimeout time.Duration     // bound of each look-up (default 5s)
	// Window is how long a correlation id answers as written
	// (limits.idempotency-window, default 10m). Ids are read back from
	// now - 2×Window and forgotten 2×Window after their first record, so
	// that between the two a replay is known to be expired rather than new.
	Window time.Duration
	// MaxKeys bounds the ids remembered (limits.idempotency-keys, default
	// 1,000,000); beyond it the oldest are evicted first.
	MaxKeys int
	Logger  *slog.Logger
	Stats   *RdStats // receives the consumer's statistics as role keys (optional)
	// PartitionCheck is how often the partition counts of the request
	// topics are read, to follow partitions added to them (default 30s).
	PartitionCheck time.Duration
}

// KeyState is what the log holds of one correlation id.
type KeyState struct {
	Records int       // records with the id (a terminal one included)
	Ended   bool      // a null-value record with the id (a gRPC request's end) was read
	First   time.Time // timestamp of the first record
	Expired bool      // the first record is older than the window
}

// Written tells whether any record with the id is in the log.
func (s KeyState) Written() bool { return s.Records > 0 }

// KeyIndexStats are a key index's size and counters.
type KeyIndexStats struct {
	Keys      int    // correlation ids remembered
	Topics    int    // request topics read
	Records   uint64 // records read back
	Syncs     uint64 // end-offset look-ups run (concurrent Syncs share one)
	Evicted   uint64 // ids dropped for MaxKeys while within 2×Window
	Forgotten uint64 // ids dropped 2×Window after their first record
	Hits      uint64 // look-ups that found an id within the window
	Expired   uint64 // look-ups that found an id past the window
}

// ErrKeysClosed is a look-up after Close.
var ErrKeysClosed = errors.New("the key index is closed")

// KeyIndex remembers, per correlation id written to the request topics of
// a cluster, how many records carry it and when the first was written. It
// reads the topics back with one consumer of its own (assignment only, no
// commits) from now - 2×Window, so any replica, and a replica after a
// restart, learns what every replica wrote: Kafka is the source of truth,
// as for replies.
//
// A request topic is added on its first Sync, so a cluster whose requests
// carry no idempotency key reads nothing back. Records without a
// correlation header (the requests without a key) only advance the reading
// position.
//
// Memory is one entry per id (see BENCHMARKS.md for its size), bounded by
// MaxKeys and by 2×Window. Ids leave in the order they were first read,
// which is the order of their first records' timestamps up to the skew
// between partitions.
type KeyIndex struct {
	opts   KeyIndexOptions
	logger *slog.Logger
	cons   *kafka.Consumer
	admin  *kafka.AdminClient
	// lookups answers the look-ups a keyed write waits for (metadata, end
	// offsets) on connections of its own: on the consumer's, a request
	// waits behind the fetch the broker holds for up to fetch.wait.max.ms
	// (100 ms), which every keyed write would pay.
	lookups     *kafka.Producer
	lookupAdmin *kafka.AdminClient
	now         func() time.Time

	// assignMu serialises assignment changes: confluent-kafka-go's
	// IncrementalAssign writes consumer state without a lock.
	assignMu sync.Mutex
	mu       sync.Mutex
	topics   map[string]*keyTopic
	fifo     []*keyEntry // ids in the order first read; fifo[head:] are live
	head     int
	stats    KeyIndexStats
	closed   bool

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopLogs chan struct{}
	logsDone chan struct{}
}

type keyTopic struct {
	name    string
	headers []string // correlation header names (one per binding writing here)
	entries map[string]*keyEntry

	startMu sync.Mutex // held while the partitions are being assigned
	started bool       // guarded by KeyIndex.mu
	// next is, per assigned partition, the offset the consumer reads next
	// (guarded by KeyIndex.mu).
	next []int64
	// changed is closed when a partition's position moves; nil until a
	// look-up waits on it.
	changed chan struct{}
	// A look-up reads the end offsets and waits until the consumer reached
	// them. Callers that come while one is under way share the next one:
	// the running one may have read the offsets before their write was
	// acknowledged.
	running, queued *keySync
}

// keySync is one look-up that several callers share.
type keySync struct {
	done chan struct{}
	err  error
}

type keyEntry struct {
	topic   *keyTopic
	id      string
	first   int64 // unix milliseconds of the first record
	records uint32
	ended   bool
}

// NewKeyIndex creates the index's consumer; topics come with Sync.
func NewKeyIndex(opts KeyIndexOptions) (*KeyIndex, error) {
	return newKeyIndex(opts, time.Now)
}

func newKeyIndex(opts KeyIndexOptions, now func() time.Time) (*KeyIndex, error) {
	if opts.KafkaTimeout <= 0 {
		opts.KafkaTimeout = DefaultKafkaTimeout
	}
	if opts.Window <= 0 {
		opts.Window = 10 * time.Minute
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.PartitionCheck <= 0 {
		opts.PartitionCheck = defaultPartitionCheck
	}
	logger := bindingLogger(opts.Logger, opts.Name)
	cons, admin, err := newConsumer(opts.Name, opts.Properties, opts.KafkaTimeout, "kafka-ext-proc-keys-"+uuid.NewString(), "key index consumer")
	if err != nil {
		return nil, err
	}
	lookups, err := kafka.NewProducer(lookupConfig(opts.Properties, opts.KafkaTimeout))
	if err != nil {
		admin.Close()
		_ = cons.Close()
		return nil, fmt.Errorf("creating the look-up client of the key index of kafka binding %q: %w", opts.Name, err)
	}
	lookupAdmin, err := kafka.NewAdminClientFromProducer(lookups)
	if err != nil {
		lookups.Close()
		admin.Close()
		_ = cons.Close()
		return nil, fmt.Errorf("creating the look-up client of the key index of kafka binding %q: %w", opts.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &KeyIndex{
		opts: opts, logger: logger, cons: cons, admin: admin, lookups: lookups, lookupAdmin: lookupAdmin, now: now,
		topics: map[string]*keyTopic{},
		ctx:    ctx, cancel: cancel,
		stopLogs: make(chan struct{}), logsDone: make(chan struct{}),
	}
	go func() {
		defer close(x.logsDone)
		done := make(chan struct{})
		go func() {
			defer close(done)
			forwardRdLogs(logger, lookups.Logs(), "keys-lookups", x.stopLogs)
		}()
		forwardRdLogs(logger, cons.Logs(), "keys", x.stopLogs)
		<-done
	}()
	x.wg.Add(2)
	go x.poll()
	go func() {
		defer x.wg.Done()
		checkEvery(x.ctx, x.opts.PartitionCheck, x.logger, "the request topics", x.checkPartitions)
	}()
	return x, nil
}

// Window is the index's idempotency window.
func (x *KeyIndex) Window() time.Duration { return x.opts.Window }

// Close stops the consumer; look-ups under way fail with ErrKeysClosed.
func (x *KeyIndex) Close() {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	x.closed = true
	x.mu.Unlock()
	x.cancel()
	x.wg.Wait()
	x.lookupAdmin.Close()
	x.lookups.Close()
	x.admin.Close()
	_ = x.cons.Close()
	close(x.stopLogs)
	<-x.logsDone
}

// Sync returns once the index has read every record acknowledged in topic
// before the call, by any producer: it reads the end offset of every
// partition and waits until the consumer got there. header names the
// correlation header of the caller's binding. The first Sync of a topic
// starts reading it from now - 2×Window. Errors wrap ErrNotReady (and
// ErrUnknownTopic for a topic that does not exist); each look-up is bounded
// by the Kafka timeout and by ctx.
func (x *KeyIndex) Sync(ctx context.Context, topic, header string) error {
	t, err := x.topic(ctx, topic, header)
	if err != nil {
		return fmt.Errorf("%w: reading back %s: %w", ErrNotReady, topic, err)
	}
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return ErrKeysClosed
	}
	s := t.queued
	if s == nil {
		s = &keySync{done: make(chan struct{})}
		t.queued = s
		if t.running == nil {
			x.wg.Add(1)
			go x.runSyncs(t)
		}
	}
	x.mu.Unlock()
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return fmt.Errorf("%w: reading back %s: %w", ErrNotReady, topic, ctx.Err())
	}
}

// runSyncs runs the topic's queued look-ups one after the other.
func (x *KeyIndex) runSyncs(t *keyTopic) {
	defer x.wg.Done()
	for {
		x.mu.Lock()
		s := t.queued
		t.queued, t.running = nil, s
		x.mu.Unlock()
		if s == nil {
			return
		}
		x.mu.Lock()
		x.stats.Syncs++
		x.mu.Unlock()
		s.err = x.reachEnd(t)
		if s.err != nil {
			s.err = fmt.Errorf("%w: reading back %s: %w", ErrNotReady, t.name, s.err)
		}
		close(s.done)
	}
}

// reachEnd reads the end offsets of t's partitions and waits, within the
// Kafka timeout, until the consumer has read that far.
func (x *KeyIndex) reachEnd(t *keyTopic) error {
	ctx, cancel := context.WithTimeout(x.ctx, x.opts.KafkaTimeout)
	defer cancel()
	x.mu.Lock()
	n := len(t.next)
	x.mu.Unlock()
	end, err := listOffsets(ctx, x.lookupAdmin, t.name, n, kafka.LatestOffsetSpec, x.opts.KafkaTimeout)
	if err != nil {
		if x.ctx.Err() != nil {
			return ErrKeysClosed
		}
		return err
	}
	for {
		x.mu.Lock()
		behind := -1
		for p, e := range end {
			if t.next[p] < e {
				behind = p
				break
			}
		}
		if behind < 0 {
			x.mu.Unlock()
			return nil
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		changed, at := t.changed, t.next[behind]
		x.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			if x.ctx.Err() != nil {
				return ErrKeysClosed
			}
			return fmt.Errorf("partition %d read to offset %d of %d within limits.kafka-timeout (%v)", behind, at, end[behind], x.opts.KafkaTimeout)
		}
	}
}

// topic returns the topic's state, adding it and assigning its partitions
// on first use. A failed assignment is tried again by the next caller.
func (x *KeyIndex) topic(ctx context.Context, topic, header string) (*keyTopic, error) {
	for {
		x.mu.Lock()
		if x.closed {
			x.mu.Unlock()
			return nil, ErrKeysClosed
		}
		t := x.topics[topic]
		if t == nil {
			t = &keyTopic{name: topic, headers: []string{header}, entries: map[string]*keyEntry{}}
			x.topics[topic] = t
			x.stats.Topics++
		} else if !hasString(t.headers, header) {
			t.headers = append(t.headers, header)
		}
		started := t.started
		x.mu.Unlock()
		if started {
			return t, nil
		}
		t.startMu.Lock()
		x.mu.Lock()
		started, current := t.started, x.topics[topic] == t
		x.mu.Unlock()
		if started || !current {
			// Started by another caller meanwhile, or dropped after a
			// failure: look again.
			t.startMu.Unlock()
			continue
		}
		err := x.assign(ctx, t)
		if err != nil {
			// A topic that could not be read is not kept: requests naming
			// topics that do not exist must not grow the index.
			x.mu.Lock()
			delete(x.topics, topic)
			x.stats.Topics--
			x.mu.Unlock()
		}
		t.startMu.Unlock()
		return t, err
	}
}

// assign reads the end offsets, then the offsets of now - 2×Window, and
// assigns the partitions there (at the end where nothing is that recent).
// The end offsets come first so that a record written in between is at or
// after the start: it is read.
func (x *KeyIndex) assign(ctx context.Context, t *keyTopic) error {
	n, err := topicPartitionCount(x.lookups, t.name, "request topic", x.opts.KafkaTimeout)
	if err != nil {
		return err
	}
	end, err := listOffsets(ctx, x.lookupAdmin, t.name, n, kafka.LatestOffsetSpec, x.opts.KafkaTimeout)
	if err != nil {
		return err
	}
	since := x.now().Add(-2 * x.opts.Window).UnixMilli()
	start, err := listOffsets(ctx, x.lookupAdmin, t.name, n, kafka.OffsetSpec(since), x.opts.KafkaTimeout)
	if err != nil {
		return err
	}
	assign := make([]kafka.TopicPartition, n)
	for p := range assign {
		if start[p] < 0 {
			start[p] = end[p]
		}
		assign[p] = kafka.TopicPartition{Topic: &t.name, Partition: int32(p), Offset: kafka.Offset(start[p])}
	}
	x.assignMu.Lock()
	defer x.assignMu.Unlock()
	x.mu.Lock()
	t.next = start
	t.started = true // before the assignment: its first records count
	x.mu.Unlock()
	if err := x.cons.IncrementalAssign(assign); err != nil {
		x.mu.Lock()
		t.started, t.next = false, nil
		x.mu.Unlock()
		return fmt.Errorf("assigning request topic %s: %w", t.name, err)
	}
	return nil
}

// checkPartitions assigns the partitions added to the request topics, at
// their beginning: an added partition holds only records written since.
func (x *KeyIndex) checkPartitions() error {
	x.mu.Lock()
	var names []string
	for name, t := range x.topics {
		if t.started {
			names = append(names, name)
		}
	}
	x.mu.Unlock()
	return growEach(x.ctx, x.lookupAdmin, names, x.opts.KafkaTimeout, x.grow)
}

// grow assigns the partitions added to a started topic (see assignAdded);
// a smaller n is a stale answer and ignored.
func (x *KeyIndex) grow(topic string, n int) error {
	x.assignMu.Lock()
	defer x.assignMu.Unlock()
	x.mu.Lock()
	t := x.topics[topic]
	if t == nil || !t.started || n <= len(t.next) {
		x.mu.Unlock()
		return nil
	}
	old := len(t.next)
	for range n - old {
		t.next = append(t.next, 0)
	}
	x.mu.Unlock()
	if err := assignAdded(x.cons, topic, "request topic", old, n); err != nil {
		x.mu.Lock()
		t.next = t.next[:old]
		x.mu.Unlock()
		return err
	}
	x.logger.Info("reading back partitions added to a request topic", "topic", topic, "partitions_before", old, "partitions", n)
	return nil
}

// poll is the one goroutine that polls the consumer, indexes ids and
// forgets old ones.
func (x *KeyIndex) poll() {
	defer x.wg.Done()
	interval := min(max(x.opts.Window/10, 100*time.Millisecond), 30*time.Second)
	nextSweep := x.now().Add(interval)
	for x.ctx.Err() == nil {
		switch ev := x.cons.Poll(100).(type) {
		case *kafka.Message:
			x.apply(ev)
		case kafka.PartitionEOF:
			if ev.Topic != nil && ev.Offset >= 0 {
				x.mu.Lock()
				x.progressLocked(x.topics[*ev.Topic], ev.Partition, int64(ev.Offset))
				x.mu.Unlock()
			}
		case kafka.Error:
			x.logger.Debug("key index consumer", "err", ev)
		case *kafka.Stats:
			x.opts.Stats.record("keys", ev.String())
		}
		if now := x.now(); !now.Before(nextSweep) {
			x.forget(now)
			nextSweep = now.Add(interval)
		}
	}
}

// progressLocked records that partition p of t is read up to next, and
// wakes the look-ups waiting for it.
func (x *KeyIndex) progressLocked(t *keyTopic, p int32, next int64) {
	if t == nil || int(p) >= len(t.next) || next <= t.next[p] {
		return
	}
	t.next[p] = next
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

func (x *KeyIndex) apply(m *kafka.Message) {
	if m.TopicPartition.Error != nil || m.TopicPartition.Topic == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[*m.TopicPartition.Topic]
	if t == nil {
		return
	}
	x.stats.Records++
	for i, name := range t.headers {
		id, ok := headerValue(m.Headers, name)
		if !ok || (i > 0 && sameID(m.Headers, t.headers[:i], id)) {
			continue
		}
		x.indexLocked(t, id, m)
	}
	x.progressLocked(t, m.TopicPartition.Partition, int64(m.TopicPartition.Offset)+1)
}

func (x *KeyIndex) indexLocked(t *keyTopic, id string, m *kafka.Message) {
	e := t.entries[id]
	if e == nil {
		ts := m.Timestamp
		if m.TimestampType == kafka.TimestampNotAvailable || ts.IsZero() {
			ts = x.now()
		}
		e = &keyEntry{topic: t, id: id, first: ts.UnixMilli()}
		t.entries[id] = e
		x.fifo = append(x.fifo, e)
		x.stats.Keys++
		for x.stats.Keys > x.opts.MaxKeys {
			x.dropOldestLocked()
			x.stats.Evicted++
		}
	}
	if e.records < ^uint32(0) {
		e.records++
	}
	if m.Value == nil {
		e.ended = true
	}
}

// dropOldestLocked removes the id first read longest ago.
func (x *KeyIndex) dropOldestLocked() {
	e := x.fifo[x.head]
	x.fifo[x.head] = nil
	x.head++
	delete(e.topic.entries, e.id)
	x.stats.Keys--
	// The slice is compacted once its dead head outgrows its live part, so
	// the backing array stays within twice the ids remembered.
	if x.head > 1024 && x.head > len(x.fifo)/2 {
		n := copy(x.fifo, x.fifo[x.head:])
		clear(x.fifo[n:])
		x.fifo, x.head = x.fifo[:n], 0
	}
}

// forget drops the ids whose first record is older than 2×Window.
func (x *KeyIndex) forget(now time.Time) {
	cutoff := now.Add(-2 * x.opts.Window).UnixMilli()
	x.mu.Lock()
	defer x.mu.Unlock()
	for x.head < len(x.fifo) && x.fifo[x.head].first < cutoff {
		x.dropOldestLocked()
		x.stats.Forgotten++
	}
}

// Lookup returns what the index has read of id in topic. Call Sync first
// to include every acknowledged write.
func (x *KeyIndex) Lookup(topic, id string) KeyState {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[topic]
	if t == nil {
		return KeyState{}
	}
	e := t.entries[id]
	if e == nil {
		return KeyState{}
	}
	s := KeyState{Records: int(e.records), Ended: e.ended, First: time.UnixMilli(e.first)}
	s.Expired = s.First.Before(x.now().Add(-x.opts.Window))
	if s.Expired {
		x.stats.Expired++
	} else {
		x.stats.Hits++
	}
	return s
}

// Stats reports the index's size and counters.
func (x *KeyIndex) Stats() KeyIndexStats {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.stats
}

func hasString(ss []string, s string) bool {
	for _, v := range ss {
		if v == s {
			return true
		}
	}
	return false
}
