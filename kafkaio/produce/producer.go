package produce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/timerpool"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// The outcomes of a failed produce, distinct because a client is answered
// differently for each: a record never written may be sent again at once,
// one that may have been written may not (a second copy could follow a
// success), and one refused for good would be refused again. Errors
// returned by Produce wrap exactly one of ErrNotEnqueued, ErrUnacknowledged
// or *RejectedError.
var (
	// ErrNotEnqueued: the record was never written to Kafka — librdkafka
	// refused it (queue full, unknown topic, no metadata or no broker within
	// the Kafka timeout) or failed it before sending it. Retrying is safe.
	// An unknown topic also wraps ErrUnknownTopic.
	ErrNotEnqueued = errors.New("record not enqueued")
	// ErrUnacknowledged: the record was handed to librdkafka but no
	// acknowledgement came within the Kafka timeout (or the caller stopped
	// waiting): it may or may not have been written.
	ErrUnacknowledged = errors.New("record not acknowledged in time")
)

// RejectedError is a record the broker (or librdkafka, for one it can tell
// the broker would refuse) turned down for good: too large, not authorized,
// invalid. Retrying the same record fails again.
type RejectedError struct {
	Code   int    // Kafka protocol error code (negative: librdkafka's own)
	Reason string // librdkafka's text for the code, fit for a client
	// Limit is the producer's message.max.bytes when librdkafka itself
	// refused the record for its size (0 otherwise).
	Limit int
}

func (e *RejectedError) Error() string { return "the broker rejected the record: " + e.Reason }

// TooLarge tells whether the record was refused for its size.
func (e *RejectedError) TooLarge() bool {
	switch kafka.ErrorCode(e.Code) {
	case kafka.ErrMsgSizeTooLarge, kafka.ErrRecordListTooLarge, kafka.ErrInvalidMsgSize:
		return true
	}
	return false
}

// NotAuthorized tells whether the record was refused by an ACL.
func (e *RejectedError) NotAuthorized() bool {
	switch kafka.ErrorCode(e.Code) {
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed,
		kafka.ErrTransactionalIDAuthorizationFailed:
		return true
	}
	return false
}

// Options configure a Producer.
type Options struct {
	Name         string            // the kafka binding's name, for logs
	Properties   map[string]string // librdkafka properties of the binding
	KafkaTimeout time.Duration     // bound of one Produce call (default 5s)
	Acks         client.Acks
	Logger       *slog.Logger
	// Results counts the outcome of every Produce call (optional).
	Results *Counts
	// Stats receives the producer's librdkafka statistics, as role
	// producer-<acks> (optional).
	Stats *client.RdStats
	// MaxRecordBytes is the largest record the routes may produce (body,
	// key and headers); message.max.bytes is raised to it, so librdkafka
	// never refuses a request the limits let through. 0 keeps librdkafka's
	// default.
	MaxRecordBytes int
}

// Producer is the one producer of a (cluster, acks mode), shared by every
// request. Each record's delivery report comes back on a channel of its own,
// which the Go client's poller sends to directly: the waiting Produce call
// wakes without a hop through a dispatching goroutine. The events goroutine
// reads errors and statistics only.
//
// The librdkafka properties it sets or drops, and why, are the producer
// rows of client.Properties (the table docs/kafka.md shows); the test of
// that table holds client.ProducerConfig to them.
//
// No record answered as written is in the log twice, on any acks mode.
// librdkafka re-sends a batch in two cases: when the broker's answer (or a
// send that never left) proves nothing was written — leader moved, request
// never sent — and when a request timed out or its connection broke, so the
// batch may already be in the log. The first is always safe and librdkafka
// does it without counting it as a retry. The second is safe only with the
// idempotent producer, whose sequence numbers let the broker drop the copy.
// So acks=all keeps librdkafka's retries, with a request timeout (and
// socket timeout) of a third of the record's, so that one re-send fits
// before the record's own timeout;
// acks=none and acks=leader set retries=0: a possibly written batch fails
// at once as ErrUnacknowledged (outcome unknown, a 504) instead of being
// written a second time behind a success. With retries off, one request in
// flight keeps a batch that is re-sent for free from being overtaken.
type Producer struct {
	opts       Options
	logger     *slog.Logger
	cfg        *kafka.ConfigMap
	negTopicTT time.Duration // how long "topic does not exist" is believed

	mu       sync.RWMutex
	cur      *rdProducer
	closed   bool
	replaced int // producers replaced after a fatal error
	wg       sync.WaitGroup

	topicsMu sync.Mutex
	topics   map[string]*topicCheck

	// deliveries recycles the per-record state of Produce (see delivery).
	deliveries sync.Pool
	// timers recycles the Kafka-timeout timer every record has.
	timers timerpool.Pool
}

// rdProducer is one librdkafka producer instance; a fatal error retires it.
type rdProducer struct {
	kp   *kafka.Producer
	link link
	stop chan struct{} // ends the log forwarder and the prober

	mu      sync.Mutex
	cond    *sync.Cond
	users   int // calls into kp in progress
	closing bool
	probeWG sync.WaitGroup
}

// delivery is one record handed to librdkafka: the message given to the
// Go client and the channel its report comes back on. It is reused only
// once its report was received, so a report that comes after Produce gave
// up waiting lands in a channel nobody else uses.
type delivery struct {
	ch   chan kafka.Event // buffered: the client's poller never blocks on it
	link linkSnap         // the brokers' state when the record was handed over
	msg  kafka.Message
	hdrs []kafka.Header
}

// reset drops the references to the record once the client has copied it.
func (d *delivery) reset() {
	clear(d.hdrs)
	d.hdrs = d.hdrs[:0]
	d.msg = kafka.Message{}
}

type deliveryResult struct {
	partition int32
	offset    int64
	err       error
}

type topicCheck struct {
	done chan struct{}
	err  error // nil: the topic exists
	at   time.Time
}

// New creates the producer. It does not wait for the brokers.
func New(opts Options) (*Producer, error) {
	if opts.KafkaTimeout <= 0 {
		opts.KafkaTimeout = 5 * time.Second
	}
	if opts.Acks < client.AcksNone || opts.Acks > client.AcksAll {
		return nil, fmt.Errorf("creating a producer for kafka binding %q: unknown acks mode %d", opts.Name, int(opts.Acks))
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("kafka", opts.Name, "acks", opts.Acks.String())
	p := &Producer{
		opts: opts, logger: logger,
		cfg:        client.ProducerConfig(opts.Properties, opts.KafkaTimeout, opts.Acks, opts.MaxRecordBytes),
		negTopicTT: time.Second,
		topics:     map[string]*topicCheck{},
	}
	p.deliveries.New = func() any { return &delivery{ch: make(chan kafka.Event, 1)} }
	rd, err := p.newRd()
	if err != nil {
		return nil, fmt.Errorf("creating the %s-acks producer of kafka binding %q: %w", opts.Acks, opts.Name, err)
	}
	p.cur = rd
	return p, nil
}

func (p *Producer) newRd() (*rdProducer, error) {
	kp, err := kafka.NewProducer(p.cfg)
	if err != nil {
		return nil, err
	}
	rd := &rdProducer{kp: kp, stop: make(chan struct{})}
	rd.cond = sync.NewCond(&rd.mu)
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		client.ForwardLogs(p.logger, kp.Logs(), "producer", rd.stop)
	}()
	go func() {
		defer p.wg.Done()
		p.events(rd)
	}()
	return rd, nil
}

// acquire marks a call into the librdkafka instance; false once it closes.
func (rd *rdProducer) acquire() bool {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.closing {
		return false
	}
	rd.users++
	return true
}

func (rd *rdProducer) release() {
	rd.mu.Lock()
	rd.users--
	if rd.users == 0 {
		rd.cond.Broadcast()
	}
	rd.mu.Unlock()
}

// close flushes what is in flight (bounded), waits for the calls in
// progress and destroys the instance; its events goroutine then ends.
func (rd *rdProducer) close(flush time.Duration) {
	rd.kp.Flush(int(flush / time.Millisecond))
	rd.mu.Lock()
	rd.closing = true
	for rd.users > 0 {
		rd.cond.Wait()
	}
	rd.mu.Unlock()
	close(rd.stop)
	rd.probeWG.Wait()
	rd.kp.Close()
}

func (p *Producer) current() *rdProducer {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil
	}
	return p.cur
}

// Close flushes the records in flight (bounded by the Kafka timeout) and
// closes the producer. Produce calls after Close fail with ErrNotEnqueued.
func (p *Producer) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	cur := p.cur
	p.mu.Unlock()
	cur.close(p.opts.KafkaTimeout)
	p.wg.Wait()
}

// Replaced counts the librdkafka instances replaced after a fatal error.
func (p *Producer) Replaced() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.replaced
}

// Produce writes r (Topic, Key, Value, Headers, and Timestamp unless zero;
// the partitioner chooses the partition) and waits for its acknowledgement
// under the producer's acks mode, at most KafkaTimeout. It returns the
// partition and offset written; with AcksNone the offset is -1 (unknown).
//
// Errors wrap ErrNotEnqueued, ErrUnacknowledged or *RejectedError (see
// there); an unknown topic wraps ErrNotEnqueued and ErrUnknownTopic, and
// fails within KafkaTimeout without ever creating the topic. A ctx that ends
// first gives ErrNotEnqueued if the record was not handed over yet, else
// ErrUnacknowledged; both wrap ctx.Err().
func (p *Producer) Produce(ctx context.Context, r *client.Record) (int32, int64, error) {
	var s Sending // on the stack: Produce waits itself
	if err := p.send(ctx, r, &s); err != nil {
		return -1, -1, p.notSent(r.Topic, err)
	}
	res, _ := s.wait(ctx)
	return s.finish(res)
}

// Sending is a record handed to librdkafka by Send whose acknowledgement
// has not been read yet. It is a value, so that a caller that waits itself
// allocates nothing for it; copy it only to hand the wait over, and then
// use the copy alone.
type Sending struct {
	p     *Producer
	topic string
	d     *delivery
	rd    *rdProducer
	timer *time.Timer // the Kafka timeout, counted from Send
}

// Send is the first half of Produce: it hands r over and returns without
// waiting for the acknowledgement, which Wait reads. A caller that must
// stay free to answer its client meanwhile waits on its own goroutine and
// hands the wait to another one only if the client leaves. Errors are
// Produce's.
func (p *Producer) Send(ctx context.Context, r *client.Record) (Sending, error) {
	var s Sending
	if err := p.send(ctx, r, &s); err != nil {
		return Sending{}, p.notSent(r.Topic, err)
	}
	return s, nil
}

// notSent counts and wraps the error of a record send did not hand over.
func (p *Producer) notSent(topic string, err error) error {
	p.opts.Results.count(err)
	return fmt.Errorf("producing to topic %s: %w", topic, err)
}

// Wait waits for the acknowledgement of the record, at most until the Kafka
// timeout counted from Send, and returns what Produce would. If ctx ends
// first the error wraps ErrUnacknowledged and ctx.Err(), and Wait may be
// called again (with another ctx) for the outcome; after any other return
// the Sending is done with.
func (s *Sending) Wait(ctx context.Context) (int32, int64, error) {
	res, final := s.wait(ctx)
	if !final {
		return -1, -1, fmt.Errorf("producing to topic %s: %w", s.topic, res.err)
	}
	return s.finish(res)
}

// finish ends a Sending with its outcome, counted once.
func (s *Sending) finish(res deliveryResult) (int32, int64, error) {
	s.p.timers.Put(s.timer)
	s.timer = nil
	s.p.opts.Results.count(res.err)
	if res.err != nil {
		return -1, -1, fmt.Errorf("producing to topic %s: %w", s.topic, res.err)
	}
	return res.partition, res.offset, nil
}

// send hands r over to librdkafka, filling s.
func (p *Producer) send(ctx context.Context, r *client.Record, s *Sending) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotEnqueued, err)
	}
	if r.Topic == "" {
		return fmt.Errorf("%w: no topic", ErrNotEnqueued)
	}
	timer := p.timers.Get(p.opts.KafkaTimeout) // the Kafka timeout counts from here
	if err := p.checkTopic(ctx, r.Topic, timer.C); err != nil {
		p.timers.Put(timer)
		return err
	}

	d := p.deliveries.Get().(*delivery)
	// The client reads the message, key, value and headers only while
	// its Produce runs (it copies them), so they can point into r.
	d.msg = kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &r.Topic, Partition: kafka.PartitionAny},
		Key:            r.Key,
		Value:          r.Value,
		Timestamp:      r.Timestamp,
	}
	if len(r.Headers) > 0 {
		for _, h := range r.Headers {
			d.hdrs = append(d.hdrs, kafka.Header{Key: h.Key, Value: h.Value})
		}
		d.msg.Headers = d.hdrs
	}
	rd, err := p.enqueue(d)
	d.reset() // the client holds none of it now
	if err != nil {
		p.deliveries.Put(d)
		p.timers.Put(timer)
		return err
	}
	*s = Sending{p: p, topic: r.Topic, d: d, rd: rd, timer: timer}
	return nil
}

// wait reads the acknowledgement; final is false only when ctx ended first.
func (s *Sending) wait(ctx context.Context) (res deliveryResult, final bool) {
	select {
	case ev := <-s.d.ch:
		res = s.p.outcome(s.rd, s.d.link, ev)
		// The report was the channel's one send: the delivery can be reused.
		s.d.link = linkSnap{}
		s.p.deliveries.Put(s.d)
		s.d = nil
		return res, true
	case <-ctx.Done():
		return deliveryResult{err: fmt.Errorf("%w: stopped waiting: %w", ErrUnacknowledged, ctx.Err())}, false
	case <-s.timer.C:
		return deliveryResult{err: fmt.Errorf("%w: no acknowledgement within %v", ErrUnacknowledged, s.p.opts.KafkaTimeout)}, true
	}
}

// enqueue hands d's message to the current librdkafka instance, which it
// returns. A fatal error replaces the instance; the record, refused, is
// then handed to the new one.
func (p *Producer) enqueue(d *delivery) (*rdProducer, error) {
	for attempt := 0; attempt < 3; attempt++ {
		rd := p.current()
		if rd == nil {
			return nil, fmt.Errorf("%w: the producer is closed", ErrNotEnqueued)
		}
		if !rd.acquire() {
			continue // retired meanwhile: the next one is current
		}
		d.link = rd.link.snapshot()
		err := rd.kp.Produce(&d.msg, d.ch)
		rd.release()
		if err == nil {
			return rd, nil
		}
		var ke kafka.Error
		if errors.As(err, &ke) && ke.Code() == kafka.ErrFatal {
			p.replace(rd, err)
			continue
		}
		return nil, p.refused(*d.msg.TopicPartition.Topic, err)
	}
	return nil, fmt.Errorf("%w: the producer kept failing fatally", ErrNotEnqueued)
}

// refused maps an error of Produce itself: librdkafka never took the record.
func (p *Producer) refused(topic string, err error) error {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return fmt.Errorf("%w: %w", ErrNotEnqueued, err)
	}
	switch ke.Code() {
	case kafka.ErrUnknownTopic, kafka.ErrUnknownTopicOrPart:
		p.forgetTopic(topic)
		return fmt.Errorf("%w: %w", ErrNotEnqueued, client.ErrUnknownTopic)
	case kafka.ErrMsgSizeTooLarge:
		// librdkafka's own check; its text for the code says "Broker:".
		limit := client.RecordLimit(p.opts.Properties, p.opts.MaxRecordBytes)
		if limit == 0 {
			limit = client.DefaultMessageMaxBytes
		}
		return &RejectedError{Code: int(ke.Code()), Limit: limit,
			Reason: fmt.Sprintf("the record (value, key and headers) is larger than the producer's message.max.bytes (%d bytes)", limit)}
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed:
		// An ACL refusal seen before: the same record fails again.
		return &RejectedError{Code: int(ke.Code()), Reason: ke.Error()}
	}
	return fmt.Errorf("%w: %w", ErrNotEnqueued, err)
}

// events is the one goroutine per librdkafka instance that reads its
// errors and statistics (delivery reports go to each record's channel); it
// ends when the instance closes.
func (p *Producer) events(rd *rdProducer) {
	for ev := range rd.kp.Events() {
		switch e := ev.(type) {
		case kafka.Error:
			switch {
			case e.IsFatal():
				p.replace(rd, e)
			case e.Code() == kafka.ErrAllBrokersDown:
				// librdkafka repeats this at every failed reconnection:
				// log the transition only.
				wasUp, probe := rd.link.markDown()
				if wasUp {
					p.logger.Warn("no broker reachable", "err", e)
				} else {
					p.logger.Debug("no broker reachable", "err", e)
				}
				if probe && rd.startProbe() {
					go p.probe(rd)
				}
			case e.Code() == kafka.ErrTransport:
				p.logger.Debug("producer connection", "err", e)
			default:
				p.logger.Warn("producer error", "err", e)
			}
		case *kafka.Stats:
			p.opts.Stats.Record("producer-"+p.opts.Acks.String(), e.String())
		}
	}
}

// outcome maps a delivery report; sent is the brokers' state when the
// record was handed over.
func (p *Producer) outcome(rd *rdProducer, sent linkSnap, ev kafka.Event) deliveryResult {
	m, ok := ev.(*kafka.Message)
	if !ok {
		// The client sends only messages on a delivery channel.
		return deliveryResult{err: fmt.Errorf("%w: unexpected delivery event %v", ErrUnacknowledged, ev)}
	}
	if m.TopicPartition.Error == nil {
		p.markUp(rd)
		offset := int64(m.TopicPartition.Offset)
		if offset < 0 {
			offset = -1 // acks=0: no offset comes back
		}
		return deliveryResult{partition: m.TopicPartition.Partition, offset: offset}
	}
	err := m.TopicPartition.Error
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return deliveryResult{err: fmt.Errorf("%w: %w", ErrUnacknowledged, err)}
	}
	switch ke.Code() {
	case kafka.ErrMsgTimedOut:
		// The Go client does not pass on librdkafka's persistence status, so
		// a timeout counts as "never sent" only when no broker answered from
		// before the record was handed over until it timed out.
		if rd.link.downThroughout(sent) {
			return deliveryResult{err: fmt.Errorf("%w: %w: %w", ErrNotEnqueued, errNoBroker, err)}
		}
		return deliveryResult{err: fmt.Errorf("%w: %w", ErrUnacknowledged, err)}
	case kafka.ErrUnknownTopic, kafka.ErrUnknownTopicOrPart:
		if m.TopicPartition.Topic != nil {
			p.forgetTopic(*m.TopicPartition.Topic)
		}
		return deliveryResult{err: fmt.Errorf("%w: %w", ErrNotEnqueued, client.ErrUnknownTopic)}
	case kafka.ErrOutOfOrderSequenceNumber:
		// Final only when librdkafka gives up (the idempotent producer's
		// fatal "sequence desynchronization"; out-of-order answers it can
		// recover from are retried, not reported). The broker checks a
		// batch's sequence before appending it and appends nothing it
		// answers this way, so this attempt wrote nothing. librdkafka
		// still calls the record "possibly persisted", for an earlier
		// attempt of the same batch; but such an attempt, if appended,
		// left the producer's state on the partition, and the retry would
		// have been answered as a duplicate (a success), not out of order:
		// the partition lost that state, which within the message timeout
		// means its log was replaced (a deleted and recreated topic) or
		// truncated, taking the earlier copy with it. So the record is not
		// in the log: a retry, through the replacement producer, is safe.
		return deliveryResult{err: fmt.Errorf("%w: %w: %w", ErrNotEnqueued, err, errSequence)}
	}
	switch persistence(ke.Code()) {
	case notPersisted:
		return deliveryResult{err: fmt.Errorf("%w: %w", ErrNotEnqueued, err)}
	case possiblyPersisted:
		return deliveryResult{err: fmt.Errorf("%w: %w", ErrUnacknowledged, err)}
	}
	if ke.Code() > 0 {
		// Any other broker error is final: the broker refused the record.
		return deliveryResult{err: &RejectedError{Code: int(ke.Code()), Reason: ke.Error()}}
	}
	// Other local errors (fatal, unexpected) leave the outcome unknown.
	return deliveryResult{err: fmt.Errorf("%w: %w", ErrUnacknowledged, err)}
}

type persistenceStatus int

const (
	persistenceOther persistenceStatus = iota
	notPersisted
	possiblyPersisted
)

// persistence is what a failed record's error says about whether it is in
// the log. The Go client does not pass on librdkafka's per-message status,
// so this follows the actions librdkafka gives each error
// (rd_kafka_handle_Produce_error and rd_kafka_err_action in
// rdkafka_request.c): a transient error that librdkafka marks "not
// persisted" is a 503 (retry is safe), one it marks "possibly persisted" a
// 504 (outcome unknown). Under acks=none and acks=leader, where retries are
// off, these are what a failed request reports. OUT_OF_ORDER_SEQUENCE_NUMBER,
// which librdkafka calls possibly persisted, is sorted by outcome (not
// written: see there).
func persistence(code kafka.ErrorCode) persistenceStatus {
	switch code {
	case kafka.ErrUnknownPartition, kafka.ErrPurgeQueue, kafka.ErrQueueFull,
		kafka.ErrTimedOutQueue, kafka.ErrNotEnoughReplicas, kafka.ErrKafkaStorageError,
		kafka.ErrLeaderNotAvailable, kafka.ErrNotLeaderForPartition,
		kafka.ErrBrokerNotAvailable, kafka.ErrReplicaNotAvailable:
		return notPersisted
	case kafka.ErrTransport, kafka.ErrSsl, kafka.ErrTimedOut, kafka.ErrRequestTimedOut,
		kafka.ErrNotEnoughReplicasAfterAppend, kafka.ErrPurgeInflight, kafka.ErrBadMsg,
		kafka.ErrDuplicateSequenceNumber:
		return possiblyPersisted
	}
	return persistenceOther
}

// replace retires an instance after a fatal error (the idempotent producer
// cannot go on) and installs a new one. Queued records of the old instance
// fail as purged (never sent); those in flight get their real outcome.
func (p *Producer) replace(old *rdProducer, cause error) {
	p.mu.Lock()
	if p.closed || p.cur != old {
		p.mu.Unlock()
		return
	}
	rd, err := p.newRd()
	if err != nil {
		p.mu.Unlock()
		p.logger.Error("fatal producer error; creating a new producer failed", "fatal", cause, "err", err)
		return
	}
	p.cur = rd
	p.replaced++
	p.wg.Add(1)
	p.mu.Unlock()
	p.logger.Error("fatal producer error; the producer was replaced", "err", cause)
	go func() {
		defer p.wg.Done()
		old.close(p.opts.KafkaTimeout)
	}()
}

func (p *Producer) markUp(rd *rdProducer) {
	if rd.link.markUp() {
		p.logger.Info("a broker is reachable again")
	}
}

// startProbe counts a prober in unless the instance is closing.
func (rd *rdProducer) startProbe() bool {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.closing {
		rd.link.stillDown() // clears the probing mark
		return false
	}
	rd.probeWG.Add(1)
	return true
}

// probe asks for metadata while no broker is reachable, so the producer
// learns when one is back even if nothing is acknowledged meanwhile.
func (p *Producer) probe(rd *rdProducer) {
	defer rd.probeWG.Done()
	for rd.link.stillDown() {
		select {
		case <-rd.stop:
			return
		case <-time.After(250 * time.Millisecond):
		}
		if !rd.acquire() {
			return
		}
		_, err := rd.kp.GetMetadata(nil, false, 1000)
		rd.release()
		if err == nil {
			p.markUp(rd)
		}
	}
}

// checkTopic makes sure the topic exists before a record is handed over,
// so an unknown topic fails at once rather than after librdkafka's topic
// propagation wait. Existing topics are looked up once; "does not exist" is
// believed for negTopicTT, so a flood of requests to a missing topic costs
// one metadata request per interval.
func (p *Producer) checkTopic(ctx context.Context, topic string, timeout <-chan time.Time) error {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return fmt.Errorf("%w: the producer is closed", ErrNotEnqueued)
	}
	p.topicsMu.Lock()
	c := p.topics[topic]
	if c != nil {
		select {
		case <-c.done: // c.err and c.at are only read once done
			if c.err != nil && time.Since(c.at) > p.negTopicTT {
				c = nil // stale: look again
			}
		default:
		}
	}
	if c == nil {
		c = &topicCheck{done: make(chan struct{})}
		p.topics[topic] = c
		p.pruneTopicsLocked()
		p.wg.Add(1)
		go p.lookUp(topic, c)
	}
	p.topicsMu.Unlock()
	p.mu.RUnlock()

	// A topic looked up before, the usual case, is answered without the
	// three-way select below, which locks every channel it waits on.
	select {
	case <-c.done:
		return c.err
	default:
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("%w: looking the topic up: %w", ErrNotEnqueued, ctx.Err())
	case <-timeout:
		return fmt.Errorf("%w: %w within %v", ErrNotEnqueued, errNoMetadata, p.opts.KafkaTimeout)
	}
}

func (p *Producer) lookUp(topic string, c *topicCheck) {
	defer p.wg.Done()
	keep := false
	defer func() {
		c.at = time.Now()
		if !keep {
			p.topicsMu.Lock()
			if p.topics[topic] == c {
				delete(p.topics, topic)
			}
			p.topicsMu.Unlock()
		}
		close(c.done)
	}()
	rd := p.current()
	if rd == nil || !rd.acquire() {
		c.err = fmt.Errorf("%w: the producer is closed", ErrNotEnqueued)
		return
	}
	// A little under the Kafka timeout, so its answer reaches the callers
	// before they stop waiting.
	wait := p.opts.KafkaTimeout * 9 / 10
	md, err := rd.kp.GetMetadata(&topic, false, int(wait/time.Millisecond))
	rd.release()
	if err != nil {
		c.err = fmt.Errorf("%w: %w within %v: %w", ErrNotEnqueued, errNoMetadata, wait, err)
		return
	}
	p.markUp(rd)
	tm, ok := md.Topics[topic]
	if !ok {
		return // let librdkafka find out
	}
	switch tm.Error.Code() {
	case kafka.ErrNoError:
		keep = true
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
		keep = true
		c.err = fmt.Errorf("%w: %w", ErrNotEnqueued, client.ErrUnknownTopic)
	case kafka.ErrTopicAuthorizationFailed:
		keep = true
		c.err = &RejectedError{Code: int(tm.Error.Code()), Reason: tm.Error.Error()}
	default:
		// Transient (leader election, topic being created): librdkafka
		// waits for it within message.timeout.ms; look again next time.
	}
}

func (p *Producer) forgetTopic(topic string) {
	p.topicsMu.Lock()
	defer p.topicsMu.Unlock()
	delete(p.topics, topic)
}

// pruneTopicsLocked drops stale negative answers once there are many
// (templated topic names come from requests).
func (p *Producer) pruneTopicsLocked() {
	if len(p.topics) < 4096 {
		return
	}
	for name, c := range p.topics {
		select {
		case <-c.done:
			if c.err != nil && time.Since(c.at) > p.negTopicTT {
				delete(p.topics, name)
			}
		default:
		}
	}
}

// link tracks whether any broker answers, from librdkafka's "all brokers
// down" events and from answers we get; librdkafka reports no "up" event.
type link struct {
	mu      sync.Mutex
	down    bool
	ups     uint64 // times a broker answered after all were down
	probing bool
}

type linkSnap struct {
	down bool
	ups  uint64
}

func (l *link) snapshot() linkSnap {
	l.mu.Lock()
	defer l.mu.Unlock()
	return linkSnap{down: l.down, ups: l.ups}
}

// markDown records that every broker is down: whether they were not
// before, and whether a prober must start.
func (l *link) markDown() (wasUp, probe bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wasUp = !l.down
	l.down = true
	probe = !l.probing
	l.probing = true
	return wasUp, probe
}

// markUp records that a broker answered; true if all were down before.
func (l *link) markUp() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.down {
		return false
	}
	l.down = false
	l.ups++
	return true
}

// stillDown is the prober's loop condition; it clears the probing mark when
// the prober is about to stop.
func (l *link) stillDown() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.down {
		l.probing = false
	}
	return l.down
}

// downThroughout tells whether every broker was down from s until now.
func (l *link) downThroughout(s linkSnap) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return s.down && l.down && l.ups == s.ups
}
