package logtails

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/follow"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// Log readers: what gRPC fetch streams read. Per cluster there is
//
//   - one shared live-tail consumer (assignment only) for every topic being
//     streamed, feeding one ring per topic: the recent tail, each record
//     framed once (Framer) for every stream to send as is;
//   - a small pool of history readers, leased per batch, for the part of a
//     stream's history the ring does not hold (a compacted topic's history is
//     its view instead).
//
// A stream's position is, per partition, the next offset it has dispatched
// up to ("next offset" in message ids). A stream joins the ring as soon as
// its position is inside it in every partition; from the moment its position
// equals the ring's own (every stream at the tail reaches that) it sends the
// shared frames, whose ids are the ring's positions. Until then, and for
// history, frames are encoded per stream. Work per stream depends on what it
// is sent, not on the size of the topic.
//
// Memory is bounded per topic by the ring (Options.RingRecords,
// RingBytes) and per stream by one batch (BatchBytes). A stream more than its
// lag budget behind the tail is told so (Stream.Lagged) and ends; the
// client resumes by id from the ring or a history reader.
//
// A ring's partition count is fixed when its tail starts. Topics that gain
// partitions later are found by a periodic check (Options.PartitionCheck):
// their tail is retired, its streams end with ErrPartitionsChanged, and the
// next stream of the topic starts a fresh tail with every partition. A
// client resuming by id continues where it was in the partitions the id
// names and from the earliest offset in the new ones, so nothing is lost and
// nothing is sent twice.

// ErrLagged means a stream fell more records behind the tail than its lag
// budget, or behind the oldest record the ring holds.
var ErrLagged = errors.New("the stream fell too far behind the tail")

// ErrClosed means the cluster's log readers were closed (shutdown).
var ErrClosed = errors.New("log readers closed")

// ErrPartitionsChanged means the stream's topic gained partitions: its tail
// was retired, and the client resumes by id on a fresh one. Streams end with
// a *PartitionsChangedError wrapping it.
var ErrPartitionsChanged = errors.New("the topic gained partitions")

// PartitionsChangedError is how streams of a retired tail end: their topic
// went from Was partitions to Now.
type PartitionsChangedError struct {
	Topic    string
	Was, Now int
}

func (e *PartitionsChangedError) Error() string {
	return fmt.Sprintf("topic %s gained partitions (%d → %d)", e.Topic, e.Was, e.Now)
}

func (e *PartitionsChangedError) Unwrap() error { return ErrPartitionsChanged }

// Framer encodes what a stream sends for one record: a frame embedding the
// value verbatim at ValueOffset, and the positions after the record (next
// offset per partition). Implementations are comparable values: streams
// whose framer equals the one a topic's ring was opened with share its
// frames.
type Framer interface {
	AppendFrame(dst, value []byte, next []int64) []byte
	ValueOffset() int
	// MaxFrame bounds the length of a frame.
	MaxFrame(valueLen, partitions int) int
}

// TombstoneFramer is a Framer that frames tombstones (records with a null
// value) too, with their key: a stream with one sends them (an SSE stream's
// delete events); other streams leave tombstones out, as a gRPC message
// cannot say "deleted". A ring never shares tombstone frames: each stream
// that sends one frames it for its own position.
type TombstoneFramer interface {
	Framer
	AppendTombstone(dst, key []byte, next []int64) []byte
}

// StreamDecoder turns a record's value as written into what streams send: a
// topic's model checking it and taking off the registry's framing. A topic's
// ring decodes each record once, as it enters (shared by every stream);
// records read from history are decoded by the stream reading them. An
// error wrapping ErrLater means the value cannot be decoded now (its schema
// cannot be had): a stream reaching it ends with that error, before the
// record, so its client resumes at the record and it is decoded again then.
// Any other error means the record does not match: it is left out of every
// stream (the decoder counts and logs it).
type StreamDecoder func(ctx context.Context, r *client.Record) ([]byte, error)

// ringDecodeWait bounds how long the tail waits for a decoder per batch: a
// schema that cannot be had within it leaves the record to the streams
// reaching it (held), so a slow registry never stalls the shared tail.
const ringDecodeWait = 100 * time.Millisecond

// Filter selects records: the key (when set) and every header (first
// value of the name) must be equal. Filters of a stream are ORed.
type Filter struct {
	Key     *string
	Headers []client.Header
}

// Options configure Tails.
type Options struct {
	Name         string            // the kafka binding's name, for logs
	Properties   map[string]string // librdkafka properties of the binding
	KafkaTimeout time.Duration     // bound of metadata look-ups and history reads (default 5s)
	// RingRecords is how many recent records a topic's ring keeps (default
	// 10000); it grows to the largest lag budget of the streams.
	RingRecords int
	// RingBytes bounds the bytes a ring keeps (default 64MiB).
	RingBytes int64
	// Readers is how many history reads may run at once (default 4).
	Readers int
	// TopicIdle is how long a topic's tail outlives its last stream, so a
	// reconnecting client resumes from the ring (default 1m).
	TopicIdle time.Duration
	// BatchBytes bounds the frames one Next returns (default 64KiB; a
	// larger frame is returned alone).
	BatchBytes int
	// PartitionCheck is how often the partition counts of the topics with a
	// tail are checked, so that partitions added later are read (default:
	// the client's; one describe request per check for all topics).
	PartitionCheck time.Duration
	// Decoders gives a topic's value decoder (its model), or nil: values
	// are sent as written (optional).
	Decoders func(topic string) StreamDecoder
	Logger   *slog.Logger
}

// Tails reads log topics for streams: one per cluster (Cluster.LogTails).
type Tails struct {
	c      *views.Views
	opts   Options
	logger *slog.Logger
	tail   *kafka.Consumer
	// admin looks up partitions and log bounds on connections of its own
	// (lookups): on the tail's, a ListOffsets waits behind the fetch the
	// broker holds open (fetch.wait.max.ms), which made a resume 200 ms.
	admin   *kafka.AdminClient
	lookups *kafka.Producer
	pool    *readerPool
	bufs    sync.Pool // *[]byte batch buffers of streams that copy or encode

	// assignMu orders assignments of the tail consumer: a topic's tail is
	// unassigned before a new tail of the same topic is registered and
	// assigned.
	assignMu sync.Mutex
	// pollMu is held by the poll loop for each batch, from polling to
	// folding into rings: taking it after an unassignment waits out a batch
	// that may still hold records of the old assignment, which must not
	// reach a new ring of the same topic.
	pollMu sync.Mutex
	// rangeCheck is set while a check of the tail's positions against the
	// log bounds runs (checkTailRange): errors of one fall share it.
	rangeCheck atomic.Bool

	mu     sync.Mutex
	topics map[string]*logTopic
	closed bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// logTopic is one topic being streamed: its ring, fed by the tail consumer.
type logTopic struct {
	name  string
	ready chan struct{} // closed once the tail started, or failed (err)
	err   error
	ring  *ring
	// decode is the topic's value decoder (nil: values as written).
	decode StreamDecoder
	lo     []int64 // low watermarks when the tail started: where fresh streams begin
	// id is the topic's id when the tail started (zero: unknown), so a
	// check finding another tells a recreated topic.
	id   [16]byte
	refs int // streams holding the topic (guarded by Tails.mu)
	idle *time.Timer

	// retired is closed once the topic gained partitions and the tail was
	// retired; retiredErr (set before, under Tails.mu) is what its streams
	// end with.
	retired    chan struct{}
	retiredErr error
}

// New creates the log readers of the cluster of c (whose views a
// compacted topic's history is read from). The caller closes them before c:
// a Cluster does.
func New(c *views.Views, opts Options) (*Tails, error) {
	if opts.KafkaTimeout <= 0 {
		opts.KafkaTimeout = c.Options().KafkaTimeout
	}
	if opts.RingRecords <= 0 {
		opts.RingRecords = 10000
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = 64 << 20
	}
	if opts.Readers <= 0 {
		opts.Readers = 4
	}
	if opts.TopicIdle <= 0 {
		opts.TopicIdle = time.Minute
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 64 << 10
	}
	if opts.PartitionCheck <= 0 {
		opts.PartitionCheck = c.Options().PartitionCheck // the client's, defaulted
	}
	if opts.Name == "" {
		opts.Name = c.Options().Name
	}
	if opts.Properties == nil {
		opts.Properties = c.Options().Properties
	}
	logger := opts.Logger
	if logger == nil {
		logger = c.Logger()
	} else {
		logger = logger.With("kafka", opts.Name)
	}
	if c.Closed() {
		return nil, fmt.Errorf("creating the log readers of kafka binding %q: %w", opts.Name, ErrClosed)
	}
	tail, err := client.NewLogTailConsumer(opts.Name, opts.Properties, opts.KafkaTimeout, c.GroupID()+"-logs")
	if err != nil {
		return nil, err
	}
	lookups, admin, err := client.NewLookupClient(opts.Name, opts.Properties, opts.KafkaTimeout, "log tails")
	if err != nil {
		_ = tail.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Tails{
		c: c, opts: opts, logger: logger, tail: tail, admin: admin, lookups: lookups,
		topics: map[string]*logTopic{},
		ctx:    ctx, cancel: cancel,
	}
	l.pool = newReaderPool(l)
	l.bufs.New = func() any { b := make([]byte, 0, 16<<10); return &b }
	l.wg.Add(4)
	go func() { defer l.wg.Done(); client.ForwardLogs(logger, tail.Logs(), "log-tail", ctx.Done()) }()
	go func() { defer l.wg.Done(); client.ForwardLogs(logger, lookups.Logs(), "log-tail-lookups", ctx.Done()) }()
	go l.poll()
	go l.watchPartitions()
	return l, nil
}

// Close stops the tail consumer and the history readers; open streams end
// with ErrClosed.
func (l *Tails) Close() {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		for _, t := range l.topics {
			if t.idle != nil {
				t.idle.Stop()
			}
		}
		l.mu.Unlock()
		l.cancel()
		l.pool.close() // before the wait: the readers' log forwarders end with them
		l.wg.Wait()
		l.admin.Close()
		l.lookups.Close()
		_ = l.tail.Close()
	})
}

// Stats are the log readers' sizes.
type Stats struct {
	Topics      int   // topics with a tail
	Streams     int   // streams holding a topic
	RingRecords int   // records held in rings
	RingBytes   int64 // bytes accounted to rings
	Readers     int   // history readers leased now
}

// Stats reports the log readers' sizes.
func (l *Tails) Stats() Stats {
	l.mu.Lock()
	topics := make([]*logTopic, 0, len(l.topics))
	var st Stats
	for _, t := range l.topics {
		topics = append(topics, t)
		st.Streams += t.refs
	}
	l.mu.Unlock()
	for _, t := range topics {
		select {
		case <-t.ready:
		default:
			continue
		}
		if t.err != nil {
			continue
		}
		st.Topics++
		t.ring.mu.RLock()
		st.RingRecords += t.ring.count
		st.RingBytes += t.ring.bytes
		t.ring.mu.RUnlock()
	}
	st.Readers = l.pool.leased()
	return st
}

// acquire returns the topic's tail, starting it on first use, held until
// release. framer frames the ring's records when this call starts it;
// budget grows the ring to at least that many records. A tail retired
// meanwhile (its topic gained partitions) is let go of, and the stream
// starts on a fresh one.
func (l *Tails) acquire(ctx context.Context, topic string, framer Framer, budget int) (*logTopic, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, ErrClosed
		}
		t := l.topics[topic]
		if t == nil {
			t = &logTopic{name: topic, ready: make(chan struct{}), retired: make(chan struct{})}
			if l.opts.Decoders != nil {
				t.decode = l.opts.Decoders(topic)
			}
			l.topics[topic] = t
			l.wg.Add(1)
			go l.start(t, framer)
		}
		t.refs++
		if t.idle != nil {
			t.idle.Stop()
			t.idle = nil
		}
		l.mu.Unlock()

		select {
		case <-t.ready:
		case <-ctx.Done():
			l.release(t)
			return nil, fmt.Errorf("%w: the tail of topic %s: %w", client.ErrNotReady, topic, ctx.Err())
		case <-l.ctx.Done():
			l.release(t)
			return nil, ErrClosed
		}
		if t.err != nil {
			l.release(t)
			return nil, t.err
		}
		// Retiring happens under mu: a tail not retired by now is retired
		// only with this stream counted, which then ends with it.
		l.mu.Lock()
		retired := t.retiredErr != nil
		l.mu.Unlock()
		if retired {
			l.release(t)
			continue
		}
		t.ring.grow(budget)
		return t, nil
	}
}

// release lets go of a topic; the last stream out starts its idle timer.
func (l *Tails) release(t *logTopic) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t.refs--
	if t.refs > 0 || l.closed || l.topics[t.name] != t {
		return
	}
	select {
	case <-t.ready:
		if t.err != nil {
			delete(l.topics, t.name) // a failed start is retried by the next stream
			return
		}
	default: // still starting: the idle timer stops it if nobody comes
	}
	t.idle = time.AfterFunc(l.opts.TopicIdle, func() { l.evict(t) })
}

// evict stops the tail of a topic nobody streamed for TopicIdle.
func (l *Tails) evict(t *logTopic) {
	l.assignMu.Lock()
	defer l.assignMu.Unlock()
	l.mu.Lock()
	if t.refs > 0 || l.closed || l.topics[t.name] != t {
		l.mu.Unlock()
		return
	}
	select {
	case <-t.ready:
	default: // still starting: look again later
		t.idle = time.AfterFunc(l.opts.TopicIdle, func() { l.evict(t) })
		l.mu.Unlock()
		return
	}
	delete(l.topics, t.name)
	l.mu.Unlock()
	if t.err != nil {
		return
	}
	if err := l.unassign(t); err != nil {
		l.logger.Warn("stopping the tail of an idle topic failed", "topic", t.name, "err", err)
	}
	l.logger.Debug("tail of an idle topic stopped", "topic", t.name)
}

// retire ends the tail of a topic whose ring no longer fits it: the topic
// gained partitions (the ring cannot grow them), was deleted, or was
// created again. Its streams end with why (RetiredErr) and the next stream
// of the topic starts a fresh tail.
func (l *Tails) retire(t *logTopic, why error) {
	l.assignMu.Lock()
	defer l.assignMu.Unlock()
	l.mu.Lock()
	if l.closed || l.topics[t.name] != t {
		l.mu.Unlock()
		return
	}
	delete(l.topics, t.name)
	if t.idle != nil {
		t.idle.Stop()
		t.idle = nil
	}
	t.retiredErr = why
	close(t.retired)
	streams := t.refs
	l.mu.Unlock()
	l.logger.Info("a streamed topic changed: its fetch streams end, and the next starts a fresh tail",
		"topic", t.name, "reason", why, "streams", streams)
	if err := l.unassign(t); err != nil {
		l.logger.Warn("stopping the tail of a topic that changed failed", "topic", t.name, "err", err)
	}
}

// ErrTopicDeleted is wrapped, with client.ErrUnknownTopic, by the error
// the streams of a topic deleted under them end with.
var ErrTopicDeleted = views.ErrTopicDeleted

// unassign takes a started topic's partitions from the tail consumer, then
// waits out a poll batch that may still hold their records. Called with
// assignMu held, after the topic left l.topics.
func (l *Tails) unassign(t *logTopic) error {
	parts := make([]kafka.TopicPartition, t.ring.partitions)
	for p := range parts {
		parts[p] = kafka.TopicPartition{Topic: &t.name, Partition: int32(p)}
	}
	if err := l.tail.IncrementalUnassign(parts); err != nil {
		return fmt.Errorf("unassigning topic %s from the log tail: %w", t.name, err)
	}
	// librdkafka drops what it queued for the partitions; a batch the poll
	// loop took before is done (its records dropped, as the topic is gone)
	// once pollMu is free.
	l.pollMu.Lock()
	//nolint:staticcheck // SA2001: the empty critical section is the barrier.
	l.pollMu.Unlock()
	return nil
}

// start reads the topic's partitions and watermarks and assigns the tail
// consumer: at the high watermark, less a backfill of half the ring so that
// recent resumes (and whole small topics) are served from memory.
func (l *Tails) start(t *logTopic, framer Framer) {
	defer l.wg.Done()
	defer close(t.ready)
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.KafkaTimeout)
	defer cancel()
	n, lo, hi, err := l.watermarks(ctx, t.name)
	if err != nil {
		t.err = err
		return
	}
	// The id before the records: a topic recreated in between has records
	// of the new id, which the next check or the ring's went-back retires.
	id := l.topicID(ctx, t.name)
	start := make([]int64, n)
	backfill := int64(max(l.opts.RingRecords/(2*n), 1))
	for p := range start {
		start[p] = max(lo[p], hi[p]-backfill)
	}
	r := newRing(framer, n, l.opts.RingRecords, l.opts.RingBytes, start, hi)
	r.topic, r.decode = t.name, t.decode
	assign := make([]kafka.TopicPartition, n)
	for p := range assign {
		assign[p] = kafka.TopicPartition{Topic: &t.name, Partition: int32(p), Offset: kafka.Offset(start[p])}
	}
	// The ring is registered under assignMu: not before an earlier tail of
	// the topic is unassigned and its records are out of the poll loop.
	l.assignMu.Lock()
	l.mu.Lock() // the poll loop looks rings up under mu
	t.lo, t.ring, t.id = lo, r, id
	l.mu.Unlock()
	err = l.tail.IncrementalAssign(assign)
	l.assignMu.Unlock()
	if err != nil {
		l.mu.Lock() // the poll loop reads err of a registered ring under mu
		t.err = fmt.Errorf("assigning topic %s to the log tail: %w", t.name, err)
		l.mu.Unlock()
		return
	}
	l.logger.Debug("log tail started", "topic", t.name, "partitions", n, "start", start, "end", hi)
}

// watermarks reads a topic's partition count and low and high watermarks.
func (l *Tails) watermarks(ctx context.Context, topic string) (n int, lo, hi []int64, err error) {
	ms := int(l.opts.KafkaTimeout / time.Millisecond)
	for {
		md, err := l.tail.GetMetadata(&topic, false, ms)
		if err == nil {
			tm, ok := md.Topics[topic]
			switch {
			case !ok:
				err = fmt.Errorf("topic %s is not in the metadata answer", topic)
			case tm.Error.Code() == kafka.ErrUnknownTopicOrPart || tm.Error.Code() == kafka.ErrUnknownTopic:
				return 0, nil, nil, fmt.Errorf("%w: %s", client.ErrUnknownTopic, topic)
			case tm.Error.Code() != kafka.ErrNoError:
				err = tm.Error
			case len(tm.Partitions) == 0:
				err = fmt.Errorf("topic %s has no partitions yet", topic)
			default:
				n = len(tm.Partitions)
			}
		}
		if n > 0 {
			break
		}
		if ctx.Err() != nil {
			return 0, nil, nil, fmt.Errorf("%w: reading the metadata of topic %s: %v", client.ErrNotReady, topic, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	lo, hi = make([]int64, n), make([]int64, n)
	for p := 0; p < n; p++ {
		l, h, err := l.tail.QueryWatermarkOffsets(topic, int32(p), ms)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("%w: reading the watermarks of %s[%d]: %v", client.ErrNotReady, topic, p, err)
		}
		lo[p], hi[p] = l, h
	}
	return n, lo, hi, nil
}

// highWatermark asks the broker for the end of one partition.
func (l *Tails) highWatermark(topic string, p int32) (int64, error) {
	_, hi, err := l.tail.QueryWatermarkOffsets(topic, p, int(l.opts.KafkaTimeout/time.Millisecond))
	return hi, err
}

// maxPollBatch bounds the events folded into rings per wake-up of streams.
const maxPollBatch = 1024

// poll is the one goroutine of the tail consumer: it folds records into the
// rings in batches, waking the streams of a ring once per batch.
func (l *Tails) poll() {
	defer l.wg.Done()
	byTopic := map[string][]*kafka.Message{}
	var eofs []kafka.PartitionEOF
	for l.ctx.Err() == nil {
		l.pollMu.Lock()
		eofs = l.pollBatch(byTopic, eofs[:0])
		l.pollMu.Unlock()
	}
}

// pollBatch polls one batch (waiting up to 100ms for its first event) and
// folds it into the rings. byTopic and eofs are buffers to reuse: byTopic is
// left empty, eofs returned.
func (l *Tails) pollBatch(byTopic map[string][]*kafka.Message, eofs []kafka.PartitionEOF) []kafka.PartitionEOF {
	ev := l.tail.Poll(100)
	for i := 0; ev != nil && i < maxPollBatch; i++ {
		switch e := ev.(type) {
		case *kafka.Message:
			if e.TopicPartition.Error == nil && e.TopicPartition.Topic != nil {
				byTopic[*e.TopicPartition.Topic] = append(byTopic[*e.TopicPartition.Topic], e)
			}
		case kafka.PartitionEOF:
			eofs = append(eofs, e)
		case kafka.Error:
			if outOfRange(e.Code()) {
				l.checkTailRange()
				break
			}
			l.logger.Debug("log tail consumer", "err", e)
		case *kafka.Stats:
			l.c.Options().Stats.Record("log-tail", e.String())
		}
		ev = l.tail.Poll(0)
	}
	if len(byTopic) == 0 && len(eofs) == 0 {
		return eofs
	}
	topics := l.ringsOf(byTopic, eofs)
	for name, msgs := range byTopic {
		if t := topics[name]; t != nil && t.ring.append(msgs) {
			l.wentBack(t)
		}
		delete(byTopic, name)
	}
	return eofs
}

// ringsOf returns the started topics a batch has records of, and records
// the partition ends it reached.
func (l *Tails) ringsOf(byTopic map[string][]*kafka.Message, eofs []kafka.PartitionEOF) map[string]*logTopic {
	l.mu.Lock()
	defer l.mu.Unlock()
	rings := make(map[string]*logTopic, len(byTopic))
	for name := range byTopic {
		if t := l.topics[name]; t != nil && t.ring != nil && t.err == nil {
			rings[name] = t
		}
	}
	for _, e := range eofs {
		if e.Topic == nil {
			continue
		}
		if t := l.topics[*e.Topic]; t != nil && t.ring != nil {
			t.ring.sawEnd(e.Partition, int64(e.Offset))
		}
	}
	return rings
}

// watchPartitions checks every PartitionCheck whether topics with a tail
// gained partitions, which their ring cannot hold, and retires those tails.
func (l *Tails) watchPartitions() {
	defer l.wg.Done()
	follow.CheckEvery(l.ctx, l.opts.PartitionCheck, l.logger, "streamed topics", l.checkPartitions)
}

// topicID describes a topic for its id; zero when the describe fails (the
// partition check then tells nothing of a recreation, the ring still does).
func (l *Tails) topicID(ctx context.Context, topic string) [16]byte {
	states, err := follow.Describe(ctx, l.admin, []string{topic}, l.opts.KafkaTimeout)
	if err != nil {
		l.logger.Debug("describing a streamed topic for its id failed", "topic", topic, "err", err)
	}
	return states[topic].ID
}

// checkPartitions describes every started topic in one request and retires
// the tails of those that gained partitions, were deleted or were created
// again.
func (l *Tails) checkPartitions() error {
	// A topic still starting reads the current count itself.
	started := map[string]*logTopic{}
	var names []string
	for _, t := range l.startedTopics() {
		started[t.name] = t
		names = append(names, t.name)
	}
	states, err := follow.Describe(l.ctx, l.admin, names, l.opts.KafkaTimeout)
	for name, st := range states {
		if t := started[name]; t != nil {
			if why := changedFrom(t, st); why != nil {
				l.retire(t, why)
			}
		}
	}
	return err
}

// changedFrom is why t's ring no longer fits its topic as described by st
// (deleted, created again, or gained partitions); nil when it still fits.
func changedFrom(t *logTopic, st follow.TopicState) error {
	switch {
	case st.Unknown:
		return fmt.Errorf("%w: %s (%w)", client.ErrUnknownTopic, t.name, ErrTopicDeleted)
	case st.ID != [16]byte{} && t.id != [16]byte{} && st.ID != t.id:
		return &GapError{Topic: t.name, Cause: Recreated, Resume: map[int32]int64{}}
	case st.Partitions > t.ring.partitions:
		return &PartitionsChangedError{Topic: t.name, Was: t.ring.partitions, Now: st.Partitions}
	}
	return nil
}

// retireIfChanged describes t's topic now and retires its tail if the ring
// no longer fits it, reporting whether it did. A resume refused as past the
// end is checked this way before it is answered: between two partition
// checks the ring may be of a generation since deleted, and its partition
// count or ends are then not the topic's.
func (l *Tails) retireIfChanged(ctx context.Context, t *logTopic) bool {
	states, err := follow.Describe(ctx, l.admin, []string{t.name}, l.opts.KafkaTimeout)
	st, ok := states[t.name]
	if err != nil || !ok {
		l.logger.Debug("describing a streamed topic to confirm a refused resume failed", "topic", t.name, "err", err)
		return false
	}
	why := changedFrom(t, st)
	if why == nil {
		return false
	}
	l.retire(t, why)
	return true
}

// checkTailRange looks, off the poll loop, for the partitions whose offset
// the tail consumer was told is out of range, and retires their topics'
// tails: records were removed above the tail's position before it read
// them (a tail fallen behind, DeleteRecords up to past them), which the
// streams of the topic would otherwise skip without knowing; or the topic
// was created again and its log ends below the tail's position. The error
// names no partition, so every started topic is checked; the tail consumer
// fetches such a partition no more (auto.offset.reset is error), so
// nothing is read past the gap meanwhile.
func (l *Tails) checkTailRange() {
	if !l.rangeCheck.CompareAndSwap(false, true) {
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer l.rangeCheck.Store(false)
		ctx, cancel := context.WithTimeout(l.ctx, l.opts.KafkaTimeout)
		defer cancel()
		for _, t := range l.startedTopics() {
			if why := l.tailGap(ctx, t); why != nil {
				l.retire(t, why)
			}
		}
	}()
}

// tailGap is why the tail of t cannot go on from its position: a
// *GapError Truncated (records removed above it) or Recreated (the log
// ends below it); nil when its positions are within the log.
func (l *Tails) tailGap(ctx context.Context, t *logTopic) error {
	lo, hi, err := l.logBounds(ctx, t)
	if err != nil {
		l.logger.Warn("checking the log tail's position after an offset out of range failed", "topic", t.name, "err", err)
		return nil
	}
	var gaps []Gap
	for p, pos := range t.ring.positions() {
		switch {
		case p >= len(lo):
		case pos > hi[p]:
			return &GapError{Topic: t.name, Cause: Recreated, Resume: map[int32]int64{}}
		case pos < lo[p]:
			gaps = append(gaps, Gap{Partition: int32(p), Asked: pos, LogStart: lo[p], LogEnd: -1})
		}
	}
	if len(gaps) == 0 {
		return nil
	}
	// Resume is each stream's own: its position with these partitions
	// moved to their log start (Stream.retiredBy).
	return &GapError{Topic: t.name, Cause: Truncated, Gaps: gaps}
}

// startedTopics are the topics whose tails run.
func (l *Tails) startedTopics() []*logTopic {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*logTopic
	for _, t := range l.topics {
		select {
		case <-t.ready:
			if t.err == nil {
				out = append(out, t)
			}
		default:
		}
	}
	return out
}

// wentBack retires the tail of a topic whose log went back under it (the
// tail read a record below the ring's position: its offset was out of
// range in a new generation and reset to the start). Not from the poll
// loop's own goroutine: retiring waits out its batch.
func (l *Tails) wentBack(t *logTopic) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.retire(t, &GapError{Topic: t.name, Cause: Recreated, Resume: map[int32]int64{}})
	}()
}
