package writtenids

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/follow"
)

// Options configure an Index.
type Options struct {
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
	Stats   *client.RdStats // receives the consumer's statistics as role keys (optional)
	// PartitionCheck is how often the partition counts of the request
	// topics are read, to follow partitions added to them (default 30s).
	PartitionCheck time.Duration
	// Now is the index's clock (the window and the sweeps); nil = time.Now.
	Now func() time.Time
}

// State is what the log holds of one correlation id.
type State struct {
	Records int       // records with the id (a terminal one included)
	Ended   bool      // a null-value record with the id (a gRPC request's end) was read
	First   time.Time // timestamp of the first record
	Expired bool      // the first record is older than the window
	// CID is the correlation id these records carry: by LookupKey, the
	// first written under the key, which may be another request's.
	CID string
	// Fingerprint is the request fingerprint of the last of them (what
	// follows the '.' of their fingerprint header), "" when they carry
	// none (written before the header existed).
	Fingerprint string
}

// Written tells whether any record with the id is in the log.
func (s State) Written() bool { return s.Records > 0 }

// Stats are a key index's size and counters.
type Stats struct {
	Keys      int    // correlation ids remembered
	Topics    int    // request topics read
	Records   uint64 // records read back
	Syncs     uint64 // end-offset look-ups run (concurrent Syncs share one)
	Evicted   uint64 // ids dropped for MaxKeys while within 2×Window
	Forgotten uint64 // ids dropped 2×Window after their first record
	Hits      uint64 // look-ups that found an id within the window
	Expired   uint64 // look-ups that found an id past the window
}

// ErrClosed is a look-up after Close.
var ErrClosed = errors.New("the key index is closed")

// Index remembers, per correlation id written to the request topics of
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
type Index struct {
	opts   Options
	logger *slog.Logger
	f      *follow.Follower
	// lookups answers the look-ups a keyed write waits for (metadata, end
	// offsets) on connections of its own: on the consumer's, a request
	// waits behind the fetch the broker holds for up to fetch.wait.max.ms
	// (100 ms), which every keyed write would pay.
	lookups     *kafka.Producer
	lookupAdmin *kafka.AdminClient
	now         func() time.Time

	mu     sync.Mutex
	topics map[string]*keyTopic
	fifo   []*keyEntry // ids in the order first read; fifo[head:] are live
	head   int
	stats  Stats
	closed bool

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopLogs chan struct{}
	logsDone chan struct{}

	// assigning, if set, runs in the first Sync of a topic just before the
	// follower is asked to read it (a test's seam: a Sync that comes
	// meanwhile).
	assigning func()
}

type keyTopic struct {
	name    string
	headers []string // correlation header names (one per binding writing here)
	// fpHeaders are the fingerprint header names, in the order of headers.
	fpHeaders []string
	entries   map[string]*keyEntry
	// keys maps an idempotency key, as the fingerprint header names it
	// (its part before the '.'), to the first id written under it.
	keys map[useKey]*keyEntry

	startMu sync.Mutex // held while the partitions are being assigned
	// started is set once the follower reads the topic, not before: a Sync
	// that finds it set waits on the follower for the topic's end offsets,
	// and one that came while the partitions were being assigned failed
	// with "not being read" (a 503 or UNAVAILABLE that said to retry).
	// Guarded by Index.mu.
	started bool
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
	use     *keyUse // nil: its records carry no fingerprint header
	first   int64   // unix milliseconds of the first record
	records uint32
	ended   bool
}

// A useKey is the key part of a fingerprint header, 32 hex digits, as the
// bytes they spell: a map key of its own size, with no string behind it.
type useKey [16]byte

// keyUse is what the fingerprint headers of an id's records said. It is
// apart from keyEntry, and its hex held as bytes, so that an id without
// one costs nothing more and one with one 83 bytes (BENCHMARKS.md).
type keyUse struct {
	key   useKey
	fp    [16]byte // the fingerprint of the last record read, fpLen bytes of it
	fpLen uint8
}

// parseFingerprint splits a fingerprint header's value, "<key>.<fp>", both
// hex (32 digits, and at most 32), as the bindings write it; anything else
// is not one.
func parseFingerprint(v []byte) (key useKey, fp [16]byte, fpLen int, ok bool) {
	k, f, found := bytes.Cut(v, []byte("."))
	if !found || len(k) != 2*len(key) || len(f) == 0 || len(f) > 2*len(fp) || len(f)%2 != 0 {
		return key, fp, 0, false
	}
	if _, err := hex.Decode(key[:], k); err != nil {
		return key, fp, 0, false
	}
	n, err := hex.Decode(fp[:], f)
	if err != nil {
		return key, fp, 0, false
	}
	return key, fp, n, true
}

// New creates the index's consumer; topics come with Sync.
func New(opts Options) (*Index, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return newIndex(opts, now)
}

func newIndex(opts Options, now func() time.Time) (*Index, error) {
	if opts.KafkaTimeout <= 0 {
		opts.KafkaTimeout = client.DefaultKafkaTimeout
	}
	if opts.Window <= 0 {
		opts.Window = 10 * time.Minute
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.PartitionCheck <= 0 {
		opts.PartitionCheck = follow.DefaultPartitionCheck
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &Index{
		opts: opts, logger: client.Logger(opts.Logger, opts.Name), now: now,
		topics: map[string]*keyTopic{},
		ctx:    ctx, cancel: cancel,
		stopLogs: make(chan struct{}), logsDone: make(chan struct{}),
	}
	lookups, lookupAdmin, err := client.NewLookupClient(opts.Name, opts.Properties, opts.KafkaTimeout, "key index")
	if err != nil {
		cancel()
		return nil, err
	}
	f, err := follow.New(follow.Options{
		Name: opts.Name, Properties: opts.Properties, KafkaTimeout: opts.KafkaTimeout,
		GroupPrefix: "kafka-ext-proc-keys-", What: "key index consumer", Role: "keys", TopicRole: "request topic",
		AddedLog: "reading back partitions added to a request topic",
		Logger:   x.logger, Stats: opts.Stats, PartitionCheck: opts.PartitionCheck,
		Describer: lookupAdmin, // the look-ups then know the added partitions
		Apply:     x.apply, Sweep: x.forget, Now: now, Gone: x.gone,
		SweepEvery: min(max(opts.Window/10, 100*time.Millisecond), 30*time.Second),
	})
	if err != nil {
		cancel()
		lookupAdmin.Close()
		lookups.Close()
		return nil, err
	}
	x.f, x.lookups, x.lookupAdmin = f, lookups, lookupAdmin
	go func() {
		defer close(x.logsDone)
		client.ForwardLogs(x.logger, lookups.Logs(), "keys-lookups", x.stopLogs)
	}()
	return x, nil
}

// Window is the index's idempotency window.
func (x *Index) Window() time.Duration { return x.opts.Window }

// Close stops the consumer; look-ups under way fail with ErrClosed.
func (x *Index) Close() {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	x.closed = true
	x.mu.Unlock()
	x.cancel()
	x.wg.Wait()
	x.f.Close()
	x.lookupAdmin.Close()
	x.lookups.Close()
	close(x.stopLogs)
	<-x.logsDone
}

// Sync returns once the index has read every record acknowledged in topic
// before the call, by any producer: it reads the end offset of every
// partition and waits until the consumer got there. header names the
// correlation header of the caller's binding, fpHeader its fingerprint
// header. The first Sync of a topic
// starts reading it from now - 2×Window. Errors wrap ErrNotReady (and
// ErrUnknownTopic for a topic that does not exist); each look-up is bounded
// by the Kafka timeout and by ctx.
func (x *Index) Sync(ctx context.Context, topic, header, fpHeader string) error {
	t, err := x.topic(ctx, topic, header, fpHeader)
	if err != nil {
		return fmt.Errorf("%w: reading back %s: %w", client.ErrNotReady, topic, err)
	}
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return ErrClosed
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
		return fmt.Errorf("%w: reading back %s: %w", client.ErrNotReady, topic, ctx.Err())
	}
}

// runSyncs runs the topic's queued look-ups one after the other.
func (x *Index) runSyncs(t *keyTopic) {
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
			s.err = fmt.Errorf("%w: reading back %s: %w", client.ErrNotReady, t.name, s.err)
		}
		close(s.done)
	}
}

// reachEnd reads the end offsets of t's partitions and waits, within the
// Kafka timeout, until the consumer has read that far.
func (x *Index) reachEnd(t *keyTopic) error {
	ctx, cancel := context.WithTimeout(x.ctx, x.opts.KafkaTimeout)
	defer cancel()
	n := x.f.Partitions(t.name)
	end, err := follow.ListOffsets(ctx, x.lookupAdmin, t.name, n, kafka.LatestOffsetSpec, x.opts.KafkaTimeout)
	if err != nil {
		if x.ctx.Err() != nil {
			return ErrClosed
		}
		return err
	}
	err = x.f.WaitReached(ctx, t.name, end)
	if be, ok := errors.AsType[*follow.BehindError](err); ok {
		if x.ctx.Err() != nil {
			return ErrClosed
		}
		return fmt.Errorf("partition %d read to offset %d of %d within limits.kafka-timeout (%v)", be.Partition, be.At, be.End, x.opts.KafkaTimeout)
	}
	return err
}

// topic returns the topic's state, adding it and assigning its partitions
// on first use. A failed assignment is tried again by the next caller.
func (x *Index) topic(ctx context.Context, topic, header, fpHeader string) (*keyTopic, error) {
	for {
		x.mu.Lock()
		if x.closed {
			x.mu.Unlock()
			return nil, ErrClosed
		}
		t := x.topics[topic]
		if t == nil {
			t = &keyTopic{name: topic, headers: []string{header}, fpHeaders: []string{fpHeader},
				entries: map[string]*keyEntry{}, keys: map[useKey]*keyEntry{}}
			x.topics[topic] = t
			x.stats.Topics++
		} else if !hasString(t.headers, header) {
			t.headers = append(t.headers, header)
			t.fpHeaders = append(t.fpHeaders, fpHeader)
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
// has the follower read the partitions from there (at the end where nothing
// is that recent).
// The end offsets come first so that a record written in between is at or
// after the start: it is read.
func (x *Index) assign(ctx context.Context, t *keyTopic) error {
	n, err := follow.PartitionCount(x.lookups, t.name, "request topic", x.opts.KafkaTimeout)
	if err != nil {
		return err
	}
	end, err := follow.ListOffsets(ctx, x.lookupAdmin, t.name, n, kafka.LatestOffsetSpec, x.opts.KafkaTimeout)
	if err != nil {
		return err
	}
	since := x.now().Add(-2 * x.opts.Window).UnixMilli()
	start, err := follow.ListOffsets(ctx, x.lookupAdmin, t.name, n, kafka.OffsetSpec(since), x.opts.KafkaTimeout)
	if err != nil {
		return err
	}
	for p := range start {
		if start[p] < 0 {
			start[p] = end[p]
		}
	}
	if x.assigning != nil {
		x.assigning()
	}
	if err := x.f.Assign(t.name, start, end); err != nil {
		return err
	}
	x.mu.Lock()
	t.started = true
	x.mu.Unlock()
	return nil
}

// apply remembers the ids of a record the follower read.
func (x *Index) apply(m *kafka.Message) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[*m.TopicPartition.Topic]
	if t == nil {
		return
	}
	x.stats.Records++
	follow.EachID(m.Headers, t.headers, func(id []byte) { x.indexLocked(t, string(id), m) })
}

// fingerprint is the record's fingerprint header, of the binding whose
// correlation header carries id.
func (t *keyTopic) fingerprint(hs []kafka.Header, id string) []byte {
	for i, name := range t.headers {
		for _, h := range hs {
			if h.Key != name || string(h.Value) != id {
				continue
			}
			for _, f := range hs {
				if f.Key == t.fpHeaders[i] {
					return f.Value
				}
			}
			return nil
		}
	}
	return nil
}

func (x *Index) indexLocked(t *keyTopic, id string, m *kafka.Message) {
	key, fp, fpLen, keyed := parseFingerprint(t.fingerprint(m.Headers, id))
	e := t.entries[id]
	if e == nil {
		ts := m.Timestamp
		if m.TimestampType == kafka.TimestampNotAvailable || ts.IsZero() {
			ts = x.now()
		}
		e = &keyEntry{topic: t, id: id, first: ts.UnixMilli()}
		t.entries[id] = e
		if keyed {
			e.use = &keyUse{key: key}
		}
		if keyed && t.keys[key] == nil {
			// The first id under a key keeps it: a later one under the
			// same key is a request two replicas wrote at the same
			// instant, and the log's order decides.
			t.keys[key] = e
		}
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
	if keyed && e.use != nil {
		e.use.fp, e.use.fpLen = fp, uint8(fpLen)
	}
}

// dropOldestLocked removes the id first read longest ago.
func (x *Index) dropOldestLocked() {
	e := x.fifo[x.head]
	x.fifo[x.head] = nil
	x.head++
	delete(e.topic.entries, e.id)
	if e.use != nil && e.topic.keys[e.use.key] == e {
		delete(e.topic.keys, e.use.key)
	}
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
func (x *Index) forget(now time.Time) {
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
func (x *Index) Lookup(topic, id string) State {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[topic]
	if t == nil {
		return State{}
	}
	return x.stateLocked(t.entries[id])
}

// LookupKey returns what the index has read under the idempotency key
// named key (the fingerprint header's part before the '.'): the state of
// the first id written under it, which is not id when the key was used for
// another request. A key no record names falls back to id itself, for
// records written without a fingerprint header. Call Sync first.
func (x *Index) LookupKey(topic, key, id string) State {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.topics[topic]
	if t == nil {
		return State{}
	}
	var k useKey
	if n, err := hex.Decode(k[:], []byte(key)); err == nil && n == len(k) {
		if e := t.keys[k]; e != nil {
			return x.stateLocked(e)
		}
	}
	return x.stateLocked(t.entries[id])
}

func (x *Index) stateLocked(e *keyEntry) State {
	if e == nil {
		return State{}
	}
	s := State{Records: int(e.records), Ended: e.ended, First: time.UnixMilli(e.first), CID: e.id}
	if e.use != nil && e.use.fpLen > 0 {
		s.Fingerprint = hex.EncodeToString(e.use.fp[:e.use.fpLen])
	}
	s.Expired = s.First.Before(x.now().Add(-x.opts.Window))
	if s.Expired {
		x.stats.Expired++
	} else {
		x.stats.Hits++
	}
	return s
}

// Stats reports the index's size and counters.
func (x *Index) Stats() Stats {
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
