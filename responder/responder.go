// Package responder is a small Kafka service for demos, examples and tests:
// the counterpart that produce routes with reply-to expect: the consumer of the
// requests topic that answers each request on its reply-to topic with the same
// correlation id. It reads request records from a topic, hands each to a
// handler, and writes the handler's reply records to the request's reply-to
// topic, keyed by correlation id (so every reply of one request lands in
// one partition, in order) and carrying the correlation header.
//
// A request seen before — same correlation id, which starts with the
// idempotency key — is ignored: replays that reach Kafka twice (two
// processor replicas, a retry after an unknown outcome) are answered once.
//
// It uses librdkafka through confluent-kafka-go, as a real service would:
// one consumer assigned every partition of the requests topic from the
// beginning (no consumer group, no commits), one producer. Partitions added
// after Start are not read.
package responder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
)

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Request is one request record.
type Request struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte // nil: a null value
	Headers   []Header
	// CorrelationID and ReplyTo are read from the headers Options names.
	CorrelationID string
	ReplyTo       string
}

// Header returns the first value of a header.
func (r *Request) Header(name string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value), true
		}
	}
	return "", false
}

// Reply is one reply record; the responder adds the key (the correlation
// id) and the correlation header.
type Reply struct {
	Headers []Header
	Value   []byte // nil: a null value
}

// Handler answers one request with the reply records to write, in order;
// none writes nothing. An error is logged and the request is not marked
// seen, so a later duplicate is handled again.
type Handler func(ctx context.Context, req *Request) ([]Reply, error)

// Options configure a Responder.
type Options struct {
	// Properties are librdkafka properties for both clients;
	// bootstrap.servers is required.
	Properties map[string]string
	Topic      string // the requests topic
	// ReplyTo is the reply topic for requests without a reply-to header.
	ReplyTo string
	// CorrelationHeader and ReplyToHeader name the headers the gateway
	// writes (defaults gateway:correlation-id and gateway:reply-to; set them
	// to the binding's options.correlation.headers).
	CorrelationHeader string
	ReplyToHeader     string
	// StatusHeader and MessageHeader name the headers that end a gRPC call
	// (defaults GRPCStatusHeader and GRPCMessageHeader; set them to the
	// binding's options.correlation.headers.status and .message): a reply
	// header named GRPCStatusHeader or GRPCMessageHeader, as GRPCEnd
	// writes, is written under these names, so one handler answers any
	// binding.
	StatusHeader  string
	MessageHeader string
	Handler       Handler
	// DedupKey names a request for duplicate detection; a request whose
	// name was seen among the last MaxSeen is ignored, and "" is never a
	// duplicate. The default is the correlation id, right for HTTP (one
	// record per request); a call made of several records (gRPC streams)
	// needs a name per record.
	DedupKey func(*Request) string
	MaxSeen  int // default 100,000
	Logger   *slog.Logger
	// StartTimeout bounds Start's wait for the topic's metadata (default 10s).
	StartTimeout time.Duration
}

// Responder is a running responder.
type Responder struct {
	opts Options
	log  *slog.Logger
	cons *kafka.Consumer
	prod *kafka.Producer

	seen     map[string]struct{}
	seenFIFO []string // ring of names in seen, oldest at seenHead
	seenHead int

	handled    atomic.Uint64
	duplicates atomic.Uint64
	failed     atomic.Uint64

	ctx      context.Context
	cancel   context.CancelFunc
	running  sync.WaitGroup // the request loop
	draining sync.WaitGroup // the delivery-report loop
	once     sync.Once
}

// Start assigns every partition of the requests topic, from the beginning,
// and starts answering. It returns once the assignment is made.
func Start(opts Options) (*Responder, error) {
	if opts.Topic == "" || opts.Handler == nil {
		return nil, errors.New("starting a responder: a topic and a handler are required")
	}
	if opts.Properties["bootstrap.servers"] == "" {
		return nil, errors.New("starting a responder: bootstrap.servers is required")
	}
	if opts.CorrelationHeader == "" {
		opts.CorrelationHeader = "gateway:correlation-id"
	}
	if opts.ReplyToHeader == "" {
		opts.ReplyToHeader = "gateway:reply-to"
	}
	if opts.StatusHeader == "" {
		opts.StatusHeader = GRPCStatusHeader
	}
	if opts.MessageHeader == "" {
		opts.MessageHeader = GRPCMessageHeader
	}
	if opts.DedupKey == nil {
		opts.DedupKey = func(r *Request) string { return r.CorrelationID }
	}
	if opts.MaxSeen <= 0 {
		opts.MaxSeen = 100_000
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "responder", "topic", opts.Topic)

	cc := kafka.ConfigMap{}
	pc := kafka.ConfigMap{}
	for k, v := range opts.Properties {
		cc[k] = v
		pc[k] = v
	}
	cc["group.id"] = "kafka-ext-proc-responder-" + uuid.NewString() // required; assignment only
	cc["enable.auto.commit"] = false
	cc["auto.offset.reset"] = "earliest"
	cc["allow.auto.create.topics"] = false
	cc["fetch.wait.max.ms"] = 10 // a demo answers quickly rather than in batches
	cc["log_level"] = 3
	pc["allow.auto.create.topics"] = false
	pc["linger.ms"] = 0
	pc["acks"] = "all"
	pc["go.delivery.report.fields"] = "none"
	pc["log_level"] = 3
	cons, err := kafka.NewConsumer(&cc)
	if err != nil {
		return nil, fmt.Errorf("starting a responder on %s: %w", opts.Topic, err)
	}
	prod, err := kafka.NewProducer(&pc)
	if err != nil {
		_ = cons.Close()
		return nil, fmt.Errorf("starting a responder on %s: %w", opts.Topic, err)
	}
	r := &Responder{opts: opts, log: log, cons: cons, prod: prod, seen: map[string]struct{}{}}
	if err := r.assign(); err != nil {
		prod.Close()
		_ = cons.Close()
		return nil, err
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.running.Add(1)
	r.draining.Add(1)
	go r.deliveries()
	go r.run()
	return r, nil
}

func (r *Responder) assign() error {
	topic := r.opts.Topic
	deadline := time.Now().Add(r.opts.StartTimeout)
	for {
		md, err := r.cons.GetMetadata(&topic, false, int(time.Until(deadline)/time.Millisecond)+1)
		if err == nil {
			if tm, ok := md.Topics[topic]; ok && tm.Error.Code() == kafka.ErrNoError && len(tm.Partitions) > 0 {
				parts := make([]kafka.TopicPartition, len(tm.Partitions))
				for i, p := range tm.Partitions {
					parts[i] = kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetBeginning}
				}
				if err := r.cons.Assign(parts); err != nil {
					return fmt.Errorf("starting a responder: assigning %s: %w", topic, err)
				}
				return nil
			} else if ok {
				err = fmt.Errorf("topic %s: %v", topic, tm.Error)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("starting a responder: no usable metadata for topic %s within %v: %v", topic, r.opts.StartTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Close stops reading, flushes the replies written so far (bounded) and
// closes the clients.
func (r *Responder) Close() {
	r.once.Do(func() {
		r.cancel()
		r.running.Wait() // no Produce after this
		r.prod.Flush(5000)
		r.prod.Close() // closes Events: deliveries ends
		r.draining.Wait()
		_ = r.cons.Close()
	})
}

// Topic is the requests topic.
func (r *Responder) Topic() string { return r.opts.Topic }

// Handled counts requests answered; Duplicates those ignored as seen
// before; Failed those whose handler failed.
func (r *Responder) Handled() uint64    { return r.handled.Load() }
func (r *Responder) Duplicates() uint64 { return r.duplicates.Load() }
func (r *Responder) Failed() uint64     { return r.failed.Load() }

// run is the one goroutine reading requests; requests are handled in
// order, so the replies of one correlation id keep the order of its
// requests.
func (r *Responder) run() {
	defer r.running.Done()
	for r.ctx.Err() == nil {
		switch ev := r.cons.Poll(100).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error == nil {
				r.handle(ev)
			}
		case kafka.Error:
			r.log.Debug("responder consumer", "err", ev)
		}
	}
}

func (r *Responder) handle(m *kafka.Message) {
	req := &Request{
		Topic: *m.TopicPartition.Topic, Partition: m.TopicPartition.Partition, Offset: int64(m.TopicPartition.Offset),
		Key: m.Key, Value: m.Value,
	}
	for _, h := range m.Headers {
		req.Headers = append(req.Headers, Header{Key: h.Key, Value: h.Value})
	}
	req.CorrelationID, _ = req.Header(r.opts.CorrelationHeader)
	req.ReplyTo, _ = req.Header(r.opts.ReplyToHeader)
	if req.ReplyTo == "" {
		req.ReplyTo = r.opts.ReplyTo
	}
	if req.CorrelationID == "" || req.ReplyTo == "" {
		r.log.Warn("a request without correlation id or reply-to; ignored", "partition", req.Partition, "offset", req.Offset)
		return
	}
	name := r.opts.DedupKey(req)
	if name != "" {
		if _, dup := r.seen[name]; dup {
			r.duplicates.Add(1)
			r.log.Debug("duplicate request ignored", "correlation_id", req.CorrelationID)
			return
		}
	}
	replies, err := r.opts.Handler(r.ctx, req)
	if err != nil {
		r.failed.Add(1)
		if r.ctx.Err() == nil {
			r.log.Warn("the handler failed; no reply", "correlation_id", req.CorrelationID, "err", err)
		}
		return
	}
	if name != "" {
		r.remember(name)
	}
	for _, rep := range replies {
		if err := r.produce(r.replyMessage(req, rep)); err != nil {
			r.log.Warn("writing a reply failed", "correlation_id", req.CorrelationID, "err", err)
		}
	}
	r.handled.Add(1)
}

// replyMessage is the record of one reply: keyed by the correlation id,
// carrying the correlation header, and the call-ending headers under the
// names the binding reads.
func (r *Responder) replyMessage(req *Request, rep Reply) *kafka.Message {
	topic := req.ReplyTo
	msg := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            []byte(req.CorrelationID),
		Value:          rep.Value,
	}
	for _, h := range rep.Headers {
		key := h.Key
		switch key {
		case r.opts.CorrelationHeader:
			continue
		case GRPCStatusHeader:
			key = r.opts.StatusHeader
		case GRPCMessageHeader:
			key = r.opts.MessageHeader
		}
		msg.Headers = append(msg.Headers, kafka.Header{Key: key, Value: h.Value})
	}
	msg.Headers = append(msg.Headers, kafka.Header{Key: r.opts.CorrelationHeader, Value: []byte(req.CorrelationID)})
	return msg
}

// produce hands a reply to librdkafka, waiting while its queue is full.
func (r *Responder) produce(msg *kafka.Message) error {
	for {
		err := r.prod.Produce(msg, nil)
		var ke kafka.Error
		if err == nil || !errors.As(err, &ke) || ke.Code() != kafka.ErrQueueFull {
			return err
		}
		select {
		case <-r.ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// deliveries logs replies that could not be written.
func (r *Responder) deliveries() {
	defer r.draining.Done()
	for ev := range r.prod.Events() {
		if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error != nil {
			r.log.Warn("a reply was not written", "err", m.TopicPartition.Error)
		}
	}
}

// remember adds a name to the bounded set of names seen.
func (r *Responder) remember(name string) {
	if len(r.seenFIFO) < r.opts.MaxSeen {
		r.seenFIFO = append(r.seenFIFO, name)
	} else {
		delete(r.seen, r.seenFIFO[r.seenHead])
		r.seenFIFO[r.seenHead] = name
		r.seenHead = (r.seenHead + 1) % r.opts.MaxSeen
	}
	r.seen[name] = struct{}{}
}
