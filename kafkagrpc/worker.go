// Package kafkagrpc is the kafka-grpc binding (kind remote_server): the
// service side of grpc-kafka request-reply. A Worker reads the request
// topics of a binding's routes in a consumer group, turns the records of
// one correlation id, up to its end record, into one call of the route's
// gRPC service, and writes each response message as a reply record and the
// status as the end record, in the format the grpc-kafka binding reads
// (docs/service-contract.md).
//
// Delivery: a record's offset is committed only once every reply record of
// its call, the end record included, is acknowledged by Kafka. A worker
// that stops before that leaves the call to the partition's next owner,
// which calls the service again: at least once towards the service. A call
// whose end record is in the reply topic (the reply index holds it, or read
// it back after evicting it) is not made again, nor one whose idempotency
// key names another request (answered FAILED_PRECONDITION). Calls are
// bounded per worker and per partition, and made in record order per
// record key (admit.go; docs/reliability.md).
package kafkagrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/produce"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/writtenids"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// DefaultMaxCalls and DefaultMaxCallsPerPartition are Options.MaxCalls and
// MaxCallsPerPartition when not set.
const (
	DefaultMaxCalls             = config.DefaultKafkaGRPCMaxCalls
	DefaultMaxCallsPerPartition = config.DefaultKafkaGRPCMaxCallsPerPartition
)

// Retry bounds the attempts at a service that is unavailable.
type Retry struct {
	Attempts   int           // default 5
	Backoff    time.Duration // before the second attempt; doubles; default 100ms
	MaxBackoff time.Duration // default 2s
}

// Options configure a Worker: one binding's routes on one kafka binding.
type Options struct {
	Binding *config.KafkaGRPCBinding
	Cluster *config.KafkaCluster // the routes' exit
	// KafkaTimeout bounds Kafka calls (limits.kafka-timeout).
	KafkaTimeout time.Duration
	// Silence ends a call with DEADLINE_EXCEEDED when neither a request
	// record nor a reply came within it: limits.reply-timeout, after which
	// the caller has been answered DEADLINE_EXCEEDED already.
	Silence        time.Duration
	MaxRecordBytes int
	Retry          Retry
	// MaxCalls bounds the calls made to the services at a time (default
	// 256); a call beyond it waits for a slot, its records read and held.
	MaxCalls int
	// MaxCallsPerPartition bounds the calls of one request partition in
	// flight (default 32, at most MaxCalls); see admit.go.
	MaxCallsPerPartition int
	Logger               *slog.Logger
	// Replies, when set, is the cluster's reply index: a call whose end
	// record it already holds, in memory or evicted and read back (a
	// request read again after a crash or a rebalance, answered by the
	// previous owner), is not made again.
	Replies *replies.Index
	// Keys, when set, gives the cluster's key index: a call whose
	// idempotency key already names another request is refused, as the
	// grpc-kafka binding refuses it, without calling the service.
	Keys func() (*writtenids.Index, error)
}

// Counts are what a worker did, for metrics and tests. Answered calls
// include those answered UNIMPLEMENTED and UNAVAILABLE; Failed are calls
// whose replies Kafka did not acknowledge (left uncommitted); Malformed
// are records skipped.
type Counts struct {
	Answered, Unimplemented, Unavailable, Malformed, Failed uint64
	// Replayed are calls read again whose end record the reply index
	// held (in memory, or evicted and read back): not made again.
	Replayed uint64
	// KeyReused are calls answered FAILED_PRECONDITION because their
	// idempotency key names another request: not made.
	KeyReused uint64
}

type counters struct {
	answered, unimplemented, unavailable, malformed, failed, replayed, keyReused atomic.Uint64
}

// Worker is a running kafka-grpc consumer for one kafka binding.
type Worker struct {
	opts     Options
	log      *slog.Logger
	routes   []*config.KafkaGRPCRoute
	cons     *kafka.Consumer
	prod     *produce.Producer
	conns    map[*config.KafkaGRPCRoute]*grpc.ClientConn
	outcomes chan outcome
	counts   counters
	slots    chan struct{} // one per call to a service in flight
	waiting  atomic.Int64  // calls waiting for a slot

	// Loop-owned.
	calls map[string]*call // by correlation id
	offs  *offsets
	parts map[part]*partCalls // admission (admit.go)

	ctx       context.Context // the calls' parent: ends when Close gives up on them
	cancel    context.CancelFunc
	stop      chan struct{} // Close asks the loop to stop reading
	done      chan struct{} // the loop ended
	logsDone  chan struct{}
	drainCtx  atomic.Pointer[context.Context]
	assigned  atomic.Int64 // partitions the group gave this worker
	closeOnce sync.Once
}

// Start joins the binding's consumer group on the topics of its routes that
// exit to opts.Cluster and starts answering.
func Start(opts Options) (*Worker, error) {
	if opts.Retry.Attempts <= 0 {
		opts.Retry.Attempts = 5
	}
	if opts.Retry.Backoff <= 0 {
		opts.Retry.Backoff = 100 * time.Millisecond
	}
	if opts.Retry.MaxBackoff <= 0 {
		opts.Retry.MaxBackoff = 2 * time.Second
	}
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = DefaultMaxCalls
	}
	if opts.MaxCallsPerPartition <= 0 {
		opts.MaxCallsPerPartition = DefaultMaxCallsPerPartition
	}
	opts.MaxCallsPerPartition = min(opts.MaxCallsPerPartition, opts.MaxCalls)
	if opts.Silence <= 0 {
		opts.Silence = 30 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	w := &Worker{opts: opts, log: log.With("binding", opts.Binding.Name, "kafka", opts.Cluster.Name),
		conns: map[*config.KafkaGRPCRoute]*grpc.ClientConn{}, outcomes: make(chan outcome, 64), slots: make(chan struct{}, opts.MaxCalls), calls: map[string]*call{}, offs: newOffsets(), parts: map[part]*partCalls{},
		stop: make(chan struct{}), done: make(chan struct{}), logsDone: make(chan struct{})}
	var topics []string
	for _, r := range opts.Binding.Routes {
		if r.Exit != opts.Cluster.Name {
			continue
		}
		w.routes = append(w.routes, r)
		for _, c := range r.When {
			if !slices.Contains(topics, c.Topic) {
				topics = append(topics, c.Topic)
			}
		}
	}
	if opts.Replies != nil {
		for _, r := range w.routes {
			for _, c := range r.When {
				opts.Replies.Add(c.ReplyTo, opts.Binding.Correlation.CorrelationID)
			}
		}
	}
	if err := w.dial(); err != nil {
		return nil, err
	}
	if err := w.clients(topics); err != nil {
		w.closeConns()
		return nil, err
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go w.loop()
	return w, nil
}

// dial makes a client connection per route (each has its own TLS);
// grpc-go connects on the first call and reconnects on its own.
func (w *Worker) dial() error {
	for _, r := range w.routes {
		creds := insecure.NewCredentials()
		if r.TLS != nil {
			creds = credentials.NewTLS(r.TLS)
		}
		// Reconnect attempts as often as the worker retries, so that a
		// service back within the retries is found by them.
		bc := backoff.DefaultConfig
		bc.BaseDelay, bc.MaxDelay = w.opts.Retry.Backoff, w.opts.Retry.MaxBackoff
		conn, err := grpc.NewClient(r.Authority, grpc.WithTransportCredentials(creds),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: w.opts.KafkaTimeout}))
		if err != nil {
			w.closeConns()
			return fmt.Errorf("kafka-grpc binding %q: connecting to %s: %w", w.opts.Binding.Name, r.Authority, err)
		}
		w.conns[r] = conn
	}
	return nil
}

func (w *Worker) closeConns() {
	for _, c := range w.conns {
		_ = c.Close()
	}
}

// clients creates the group consumer, subscribed to topics, and the reply
// producer.
func (w *Worker) clients(topics []string) error {
	kc := w.opts.Cluster
	cm := client.WithoutStatistics(client.Config(kc.Properties, w.opts.KafkaTimeout))
	(*cm)["group.id"] = w.opts.Binding.GroupID()
	// Offsets are committed by the worker, once the replies are acknowledged.
	(*cm)["enable.auto.commit"] = false
	(*cm)["enable.auto.offset.store"] = false
	(*cm)["auto.offset.reset"] = "earliest"
	cons, err := kafka.NewConsumer(cm)
	if err != nil {
		return fmt.Errorf("kafka-grpc binding %q: creating the request consumer on kafka binding %q: %w", w.opts.Binding.Name, kc.Name, err)
	}
	go func() {
		client.ForwardLogs(client.Logger(w.log, kc.Name), cons.Logs(), "kafka-grpc-consumer", w.logsDone)
	}()
	prod, err := produce.New(produce.Options{Name: kc.Name, Properties: kc.Properties, KafkaTimeout: w.opts.KafkaTimeout,
		Acks: client.AcksFromName(string(w.opts.Binding.Acks)), Logger: w.log, MaxRecordBytes: w.opts.MaxRecordBytes})
	if err != nil {
		close(w.logsDone)
		_ = cons.Close()
		return fmt.Errorf("kafka-grpc binding %q: creating the reply producer: %w", w.opts.Binding.Name, err)
	}
	if err := cons.SubscribeTopics(topics, w.rebalance); err != nil {
		prod.Close()
		close(w.logsDone)
		_ = cons.Close()
		return fmt.Errorf("kafka-grpc binding %q: subscribing to %v: %w", w.opts.Binding.Name, topics, err)
	}
	w.cons, w.prod = cons, prod
	return nil
}

// Counts returns what the worker did so far.
func (w *Worker) Counts() Counts {
	return Counts{Answered: w.counts.answered.Load(), Unimplemented: w.counts.unimplemented.Load(),
		Unavailable: w.counts.unavailable.Load(), Malformed: w.counts.malformed.Load(), Failed: w.counts.failed.Load(),
		Replayed: w.counts.replayed.Load(), KeyReused: w.counts.keyReused.Load()}
}

// Names are the worker's kafka-grpc binding and kafka binding.
func (w *Worker) Names() (binding, kafka string) { return w.opts.Binding.Name, w.opts.Cluster.Name }

// Waiting is how many calls wait to be admitted (their partition's bound,
// the call before them of their key) or for a slot (Options.MaxCalls).
func (w *Worker) Waiting() int { return int(w.waiting.Load()) }

// Partitions is how many request partitions the group gave this worker.
func (w *Worker) Partitions() int { return int(w.assigned.Load()) }

// Close drains: it stops reading, lets the calls in flight finish and
// commits them until ctx ends (the rest are abandoned, uncommitted, to the
// partitions' next owner), then leaves the group.
func (w *Worker) Close(ctx context.Context) {
	w.closeOnce.Do(func() {
		w.drainCtx.Store(&ctx)
		close(w.stop)
		<-w.done
		w.cancel()
		w.prod.Close()
		w.closeConns()
	})
}

// loop is the only reader of the consumer: records, rebalances, outcomes.
func (w *Worker) loop() {
	defer close(w.done)
	sweep := time.NewTicker(w.opts.Silence)
	defer sweep.Stop()
	for {
		select {
		case <-w.stop:
			w.drain(*w.drainCtx.Load(), nil)
			_ = w.cons.Close() // leaves the group: the revoke drains nothing more
			close(w.logsDone)
			return
		case o := <-w.outcomes:
			w.settle(o)
			w.commit(nil)
			continue
		case now := <-sweep.C:
			w.forget(now)
		default:
		}
		switch e := w.cons.Poll(100).(type) {
		case *kafka.Message:
			w.record(e)
			w.commit(nil)
		case kafka.Error:
			w.log.Warn("request consumer", "err", e)
		}
	}
}

// record takes one request record.
func (w *Worker) record(m *kafka.Message) {
	p := part{topic: *m.TopicPartition.Topic, partition: m.TopicPartition.Partition}
	off := int64(m.TopicPartition.Offset)
	w.offs.read(p, off)
	h := w.opts.Binding.Correlation
	headers := make([]client.Header, len(m.Headers))
	for i, kh := range m.Headers {
		headers[i] = client.Header{Key: kh.Key, Value: kh.Value}
	}
	get := func(name string) string {
		for _, x := range headers {
			if x.Key == name {
				return string(x.Value)
			}
		}
		return ""
	}
	cid := get(h.CorrelationID)
	if cid == "" {
		w.counts.malformed.Add(1)
		w.log.Warn("request record without a correlation id skipped", "topic", p.topic, "partition", p.partition, "offset", off)
		w.offs.finish(p, off)
		return
	}
	end := m.Value == nil
	c := w.calls[cid]
	if c == nil {
		if end {
			// The end of a call answered and forgotten: nothing to do.
			w.offs.finish(p, off)
			return
		}
		if c = w.newCall(p, cid, string(m.Key), headers, get); c == nil {
			w.offs.finish(p, off)
			return
		}
	}
	if c.ended {
		w.offs.finish(p, off)
		if end {
			delete(w.calls, cid)
		}
		return
	}
	c.recs = append(c.recs, off)
	if fp := get(h.Fingerprint()); fp != "" {
		if c.fingerprints[fp] {
			return // the same record written twice: sent once
		}
		c.fingerprints[fp] = true
	}
	c.sawEnd = c.sawEnd || end
	c.silence.Reset(w.opts.Silence)
	c.in.push(m.Value, end)
}

// newCall starts the call a record opens; nil when it cannot be answered.
func (w *Worker) newCall(p part, cid, key string, headers []client.Header, get func(string) string) *call {
	h := w.opts.Binding.Correlation
	replyTo, service, method := get(h.ReplyTo), get(h.Service), get(h.Method)
	var route *config.KafkaGRPCRoute
	answers := false // some route answers on replyTo: an UNIMPLEMENTED can go there
	for _, r := range w.routes {
		for _, cond := range r.When {
			answers = answers || (cond.Topic == p.topic && cond.ReplyTo == replyTo)
			if route == nil && cond.Matches(p.topic, replyTo, service, method) {
				route = r
			}
		}
	}
	if !answers {
		w.counts.malformed.Add(1)
		w.log.Warn("request record skipped: no route of the binding answers on its reply-to topic",
			"topic", p.topic, "reply_to", replyTo, "correlation_id", cid)
		return nil
	}
	ctx, cancel := context.WithCancelCause(w.ctx)
	c := &call{cid: cid, part: p, service: service, method: method, replyTo: replyTo, route: route,
		meta: requestMeta(headers), in: newInbox(), ctx: ctx, cancel: cancel,
		fingerprints: map[string]bool{}, key: key, admit: make(chan struct{})}
	// The key's use is the fingerprint header's part before the '.': the
	// idempotency key and the caller, hashed by the grpc-kafka binding.
	c.keyUse, _, _ = strings.Cut(get(h.Fingerprint()), ".")
	c.keyName = get("meta:" + w.opts.Binding.IdempotencyMetadata)
	if c.meta == nil {
		c.meta = metadata.MD{}
	}
	c.silence = time.AfterFunc(w.opts.Silence, func() { cancel(errSilent) })
	w.calls[cid] = c
	go w.run(c)
	w.enqueue(c)
	return c
}

// settle takes a call's outcome: its records are done once its replies
// were acknowledged.
func (w *Worker) settle(o outcome) {
	c := o.c
	if w.calls[c.cid] != c {
		return // its partition was revoked
	}
	if errors.Is(context.Cause(c.ctx), errAbandoned) {
		delete(w.calls, c.cid) // its partition went to the next owner
		return
	}
	if o.acked {
		for _, off := range c.recs {
			w.offs.finish(c.part, off)
		}
	}
	// A call whose replies were not acknowledged leaves its records
	// uncommitted, for the partition's next owner after a restart or a
	// rebalance; it stays known here, so that its later records do not
	// start a second call.
	c.ended, c.endedAt = true, time.Now()
	w.release(c)
	if c.sawEnd {
		delete(w.calls, c.cid)
	}
}

// forget drops answered calls whose end record never came (the caller
// went away before half-closing) once they were silent for Silence.
func (w *Worker) forget(now time.Time) {
	for cid, c := range w.calls {
		if c.ended && now.Sub(c.endedAt) > w.opts.Silence {
			delete(w.calls, cid)
		}
	}
}

// commit commits what may be committed of the partitions only (nil: all).
func (w *Worker) commit(only []part) {
	var tps []kafka.TopicPartition
	for _, p := range w.offs.partitions() {
		if only != nil && !slices.Contains(only, p) {
			continue
		}
		if next, ok := w.offs.advance(p); ok {
			topic := p.topic
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.partition, Offset: kafka.Offset(next)})
		}
	}
	if len(tps) == 0 {
		return
	}
	if _, err := w.cons.CommitOffsets(tps); err != nil {
		// The next commit carries these offsets too; until then a restart
		// calls the service again for them.
		w.log.Warn("committing request offsets", "err", err)
	}
}

// rebalance runs inside Poll. A revoked partition's calls in flight get
// the drain's bound (limits.kafka-timeout) to finish and be committed
// before the partition goes to its next owner.
func (w *Worker) rebalance(_ *kafka.Consumer, ev kafka.Event) error {
	if a, ok := ev.(kafka.AssignedPartitions); ok {
		// The eager protocol (librdkafka's default assignors): an
		// assignment is the whole of it, a revoke all of it.
		w.assigned.Store(int64(len(a.Partitions)))
		return nil
	}
	revoked, ok := ev.(kafka.RevokedPartitions)
	if !ok {
		return nil
	}
	defer w.assigned.Store(0)
	var parts []part
	for _, tp := range revoked.Partitions {
		parts = append(parts, part{topic: *tp.Topic, partition: tp.Partition})
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.KafkaTimeout)
	defer cancel()
	w.drain(ctx, parts)
	return nil
}

// drain waits until the calls on parts (nil: all) are settled or ctx ends,
// commits, abandons the rest and forgets the partitions.
func (w *Worker) drain(ctx context.Context, parts []part) {
	on := func(c *call) bool { return parts == nil || slices.Contains(parts, c.part) }
	inFlight := func() int {
		n := 0
		for _, c := range w.calls {
			if on(c) && !c.ended {
				n++
			}
		}
		return n
	}
	for inFlight() > 0 {
		select {
		case o := <-w.outcomes:
			w.settle(o)
			continue
		case <-ctx.Done():
		}
		break
	}
	w.commit(parts)
	for cid, c := range w.calls {
		if on(c) {
			if !c.ended {
				c.cancel(errAbandoned)
			}
			delete(w.calls, cid)
		}
	}
	if parts == nil {
		parts = w.offs.partitions()
		clear(w.parts)
	}
	for _, p := range parts {
		w.offs.drop(p)
		delete(w.parts, p)
	}
}
