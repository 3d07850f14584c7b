package replies

import (
	"context"
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
	Name         string            // the kafka binding's name, for logs and readiness
	Properties   map[string]string // librdkafka properties of the binding
	KafkaTimeout time.Duration     // bound of each metadata or offsets look-up (default 5s)
	// Retention is how far back replies are read and how long they are
	// kept (limits.reply-retention, default 10m).
	Retention time.Duration
	// MaxBytes bounds the index (limits.reply-index-bytes, default 64MiB);
	// beyond it the least recently written unpinned ids are evicted to
	// their location in the topic, read back when asked for (evicted.go).
	MaxBytes  int64
	Readiness client.Readiness // one condition per reply topic (optional)
	Logger    *slog.Logger
	Stats     *client.RdStats // receives the consumer's statistics as role replies (optional)
	// PartitionCheck is how often the partition counts of the reply topics
	// are read, to follow partitions added to them (default 30s).
	PartitionCheck time.Duration
}

// Stats are a reply index's sizes and counters.
type Stats struct {
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
	// (evicted.go).
	Located      int
	LocatedBytes int64
	// Read-backs of evicted ids by outcome: the records found, the reply
	// no longer in its topic (expired), or Kafka not answering in time.
	ReadBacksFound, ReadBacksExpired, ReadBacksFailed uint64
	ReadBackLatency                                   ReadBackHistogram
}

// Index maps correlation id → reply records for every reply-to topic
// of a cluster, read by one follower of its own (one assign-only consumer,
// no commits) from now - Retention, so any replica answers follow-ups and
// replays. Records are indexed by the value of the topic's correlation
// header; each id keeps its records in arrival order (offset order within a
// partition) and whether a null-value (terminal) record came.
//
// What it keeps, and how much, is its store; the follower only feeds it.
//
// All reply topics share the one consumer, so a topic added while others
// are live delays their replies by its catch-up; reply topics are normally
// added at startup. The follower assigns partitions added to a reply topic
// (every PartitionCheck).
type Index struct {
	opts   Options
	logger *slog.Logger
	now    func() time.Time

	// connMu guards the creation of f, which connect does for the first
	// topic added; whatever reads it runs after it.
	connMu sync.Mutex
	f      *follow.Follower

	mu     sync.Mutex
	topics map[string]*replyTopic
	store  store // guarded by mu
	closed bool
	// Evicted replies read back (evicted.go, readback.go): the reader,
	// created with the first read-back, and its latencies.
	rdr       *replyReader
	readBacks readBackLatency
	// beforeAdmit, when set (tests), is called by the reader before it
	// takes the read-backs asked for.
	beforeAdmit func()

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type replyTopic struct {
	name      string
	headers   []string // correlation header names (usually one)
	readiness string
	entries   map[string]*replyEntry
	located   locatedReplies // evicted ids (evicted.go)
	added     time.Time

	// Catch-up state, guarded by Index.mu.
	started   bool // partitions assigned
	caught    bool
	caughtUp  chan struct{} // closed once caught up
	attempted chan struct{} // closed after the first attempt to start
	tried     bool
	lastErr   error
}

// New returns an index without topics; topics are added with Add.
// Its consumer is created with the first topic: a binding no route replies
// through has no reply consumer, whose librdkafka threads, poll loop, log
// poller and partition check a quiet processor would otherwise run.
func New(opts Options) (*Index, error) {
	return newIndex(opts, time.Now)
}

func newIndex(opts Options, now func() time.Time) (*Index, error) {
	if opts.KafkaTimeout <= 0 {
		opts.KafkaTimeout = client.DefaultKafkaTimeout
	}
	if opts.Retention <= 0 {
		opts.Retention = 10 * time.Minute
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 64 << 20
	}
	if opts.PartitionCheck <= 0 {
		opts.PartitionCheck = follow.DefaultPartitionCheck
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &Index{
		opts: opts, logger: client.Logger(opts.Logger, opts.Name), now: now,
		topics: map[string]*replyTopic{},
		store:  store{maxBytes: opts.MaxBytes, retention: opts.Retention},
		ctx:    ctx, cancel: cancel,
	}
	return x, nil
}

// connect creates the index's follower, once. It runs in a topic's start
// goroutine, which the wait group counts, so Close waits for it.
func (x *Index) connect() error {
	x.connMu.Lock()
	defer x.connMu.Unlock()
	if x.f != nil {
		return nil
	}
	if err := x.ctx.Err(); err != nil {
		return err
	}
	f, err := follow.New(follow.Options{
		Name: x.opts.Name, Properties: x.opts.Properties, KafkaTimeout: x.opts.KafkaTimeout,
		GroupPrefix: "kafka-ext-proc-replies-", What: "reply consumer", Role: "replies", TopicRole: "reply topic",
		AddedLog: "reading partitions added to a reply topic",
		Logger:   x.logger, Stats: x.opts.Stats, PartitionCheck: x.opts.PartitionCheck,
		Apply: x.apply, Sweep: x.expire, Now: x.now,
		SweepEvery: min(max(x.opts.Retention/10, 100*time.Millisecond), 30*time.Second),
		CaughtUp:   x.caughtUp, Gone: x.gone,
	})
	if err != nil {
		return err
	}
	x.f = f
	return nil
}

// Close stops the follower. Watches stop changing; waiters are not woken.
func (x *Index) Close() {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	x.closed = true
	x.mu.Unlock()
	x.cancel()
	x.connMu.Lock() // a connect under way ends first; none starts after
	f := x.f
	x.connMu.Unlock()
	x.wg.Wait()
	if f != nil {
		f.Close()
	}
}

// Add starts indexing topic by the correlation header named header, and
// reports the topic to the Readiness until it has caught up. Adding a topic
// again is a no-op; a second header name for a topic already being read
// applies to the records read from then on.
func (x *Index) Add(topic, header string) {
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

func (x *Index) setReady(t *replyTopic, ready bool, reason string) {
	if x.opts.Readiness != nil {
		x.opts.Readiness.Set(t.readiness, ready, reason)
	}
}

// start assigns the topic's partitions, retrying every second until it
// works (a missing topic may be created later).
func (x *Index) start(t *replyTopic) {
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
		if errors.Is(err, client.ErrUnknownTopic) {
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
// has the follower read the partitions from there. End offsets come first
// so a record written in between is at or after the start offset: it is
// read, and the topic is caught up once every partition reached the end
// seen first.
func (x *Index) assign(t *replyTopic) error {
	n, err := follow.PartitionCount(x.f.Lookups(), t.name, "reply topic", x.opts.KafkaTimeout)
	if err != nil {
		return err
	}
	start, end, err := x.startAndEnd(t.name, n)
	if err != nil {
		return err
	}
	x.mu.Lock()
	t.started = true // before the assignment: a caught-up report finds it
	t.lastErr = nil
	x.mu.Unlock()
	if err := x.f.Assign(t.name, start, end); err != nil {
		x.mu.Lock()
		t.started = false
		x.mu.Unlock()
		return err
	}
	return nil
}

// startAndEnd reads the end offsets of a reply topic's n partitions, then
// the offsets of now - Retention: where the index starts reading each
// partition (the end where nothing is that recent).
func (x *Index) startAndEnd(topic string, n int) (start, end []int64, err error) {
	ms := int(x.opts.KafkaTimeout / time.Millisecond)
	end = make([]int64, n)
	for p := 0; p < n; p++ {
		if x.ctx.Err() != nil {
			return nil, nil, x.ctx.Err()
		}
		_, hi, err := x.f.Lookups().QueryWatermarkOffsets(topic, int32(p), ms)
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
	found, err := x.f.Lookups().OffsetsForTimes(query, ms)
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

// caughtUp is the follower's report that topic has read what it held when
// it was assigned.
func (x *Index) caughtUp(topic string) {
	x.mu.Lock()
	t := x.topics[topic]
	if t == nil || t.caught {
		x.mu.Unlock()
		return
	}
	t.caught = true
	close(t.caughtUp)
	x.mu.Unlock()
	x.setReady(t, true, "")
	x.logger.Debug("reply index caught up", "topic", t.name, "took", x.now().Sub(t.added))
}

// apply indexes a record the follower read.
func (x *Index) apply(m *kafka.Message) {
	p, offset := m.TopicPartition.Partition, int64(m.TopicPartition.Offset)
	x.mu.Lock()
	t := x.topics[*m.TopicPartition.Topic]
	if t == nil {
		x.mu.Unlock()
		return
	}
	var split []string
	indexed := false
	var r *client.Record
	follow.EachID(m.Headers, t.headers, func(id []byte) {
		if r == nil {
			r = toReplyRecord(t.name, m, x.now)
		}
		indexed = true
		if e := x.store.add(t, id, r); e != nil {
			split = append(split, e.id)
		}
	})
	if !indexed {
		x.store.stats.WithoutHeader++
	}
	x.store.evict()
	x.mu.Unlock()
	for _, id := range split {
		x.logger.Warn("replies of one correlation id in several partitions: the responder does not key replies by correlation id",
			"topic", t.name, "correlation_id", id, "partition", p, "offset", offset)
	}
}

// expire drops the replies past Retention (see store.expire).
func (x *Index) expire(now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.store.expire(now, x.topics)
}

// CaughtUp tells, without waiting, whether topic's index has caught up (see
// WaitCaughtUp): once it has, a caller can skip the bounded wait and the
// timer it needs.
func (x *Index) CaughtUp(topic string) bool {
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
func (x *Index) WaitCaughtUp(ctx context.Context, topic string) error {
	x.mu.Lock()
	t := x.topics[topic]
	x.mu.Unlock()
	if t == nil {
		return fmt.Errorf("%w: reply topic %s was not added to the reply index", client.ErrNotReady, topic)
	}
	select {
	case <-t.caughtUp:
		return nil
	case <-t.attempted:
	case <-ctx.Done():
		return fmt.Errorf("%w: reply index of %s: %w", client.ErrNotReady, topic, ctx.Err())
	}
	x.mu.Lock()
	lastErr, caught := t.lastErr, t.caught
	x.mu.Unlock()
	if caught {
		return nil
	}
	if errors.Is(lastErr, client.ErrUnknownTopic) {
		return fmt.Errorf("%w: reply index: %w", client.ErrNotReady, lastErr)
	}
	select {
	case <-t.caughtUp:
		return nil
	case <-ctx.Done():
		if lastErr != nil {
			return fmt.Errorf("%w: reply index of %s: %w (last error: %v)", client.ErrNotReady, topic, ctx.Err(), lastErr)
		}
		return fmt.Errorf("%w: reply index of %s: %w", client.ErrNotReady, topic, ctx.Err())
	}
}

// Stats reports the index's sizes and counters.
func (x *Index) Stats() Stats {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.store.stats
	s.Entries = x.store.order.n
	s.Pinned = x.store.pinned
	s.Bytes = x.store.bytes
	for _, t := range x.topics {
		s.Located += t.located.n
		s.LocatedBytes += t.located.bytes
	}
	s.ReadBackLatency = x.readBacks.export()
	return s
}

// SplitReplies counts correlation ids whose replies came in more than one
// partition.
func (x *Index) SplitReplies() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.store.stats.SplitReplies
}
