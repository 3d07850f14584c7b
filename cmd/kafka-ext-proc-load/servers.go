package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/cputime"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// benchConfig has the route shapes of the bundled demo
// (cmd/kafka-ext-proc/demo.yaml) on topics of their own: the two fetch
// shapes (GET /items merged, GET /items/{id} by key), so the merged route
// holds exactly -keys records and the single-key and long-poll records do
// not change it; with more, also the orders request-reply route (POST
// /orders/{id}, acks leader_only, answered by the demo responder), the
// oneway produce route (POST /events/{id}, the same but no reply-to) and the
// Fanout gRPC fetch route (a plain topic, streamed to every subscriber).
//
// The processor starts with the fetch routes alone and is reloaded with the
// others (local.moreRoutes) when a scenario needs them: a produce route
// with reply-to starts a reply index, whose consumer would otherwise add to
// the fetch scenarios' background (their figures predate it).
//
// limits are more fields of the limits object in YAML flow form (-limits),
// for instance "stream-send-rate: 10000".
func benchConfig(more bool, limits string) string {
	var extra string
	if more {
		extra = moreRoutesYAML
	}
	if limits != "" {
		limits = ", " + limits
	}
	return fetchRoutesYAML + extra + "limits: { max-wait: 60s" + limits + " }\n"
}

// bindingsYAML starts the load generator's configurations: one Kafka
// cluster (stack.PointAt points it at the embedded broker) and an http-kafka
// binding whose routes follow.
const bindingsYAML = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: "127.0.0.1:9092" }
  http0:
    type: http-kafka
    kind: proxy
    routes:
`

const fetchRoutesYAML = bindingsYAML + `      - when: [{ method: GET, path: /merged }]
        exit: kafka0
        with: { capability: fetch, topic: bench-merged, merge: { content-type: application/json } }
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: bench-items, filters: [{ key: "${params.id}" }] }
`

const moreRoutesYAML = `      - when: [{ method: POST, path: "/orders/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: bench-requests, acks: leader_only, key: "${params.id}", reply-to: bench-replies }
      - when: [{ method: POST, path: "/events/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: bench-events, acks: leader_only, key: "${params.id}" }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: bench.Fanout }]
        exit: kafka0
        with: { capability: fetch, topic: bench-fanout }
  sse0:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{ path: /bench/events }]
        exit: kafka0
        with: { topic: bench-sse }
`

const (
	itemsTopic    = "bench-items"
	mergedTopic   = "bench-merged"
	requestsTopic = "bench-requests"
	repliesTopic  = "bench-replies"
	eventsTopic   = "bench-events" // the oneway produce route's
	// rawRepliesTopic is where the responder answers the raw librdkafka
	// loop (its requests name it in their reply-to header), so neither the
	// processor's reply index nor the raw loop's consumer reads the other's
	// replies.
	rawRepliesTopic = "bench-raw-replies"
	fanoutTopic     = "bench-fanout"
)

// waitersGauge is the processor's count of fetch requests holding a long
// poll (httpkafka.Fetch.Waiting summed over routes), read from the registry
// stack.Processor exposes: a waiter is counted once it is in its wait.
const waitersGauge = "kafka_ext_proc_fetch_waiters"

// streamsGauge is the processor's count of open gRPC fetch streams.
const streamsGauge = "kafka_ext_proc_grpc_fetch_streams"

// servers is the server side of a run: the embedded broker, the processor
// and at most one no-op server at a time. It runs in this process, or in a
// child process (-split) so that the server side's allocations, CPU and
// memory are measured apart from the clients'.
type servers interface {
	processorAddr() string
	// brokerAddr is the embedded broker's address, for the raw librdkafka
	// baselines and the fan-out's writer, which run on the client side.
	brokerAddr() string
	// put writes records (content-type application/json) and returns once
	// the broker acknowledged them all.
	put(ctx context.Context, topic string, records map[string][]byte) error
	// startNoop starts the no-op server answering answer (held until
	// releaseNoop when hold is set) and returns its address.
	startNoop(ctx context.Context, answer []*extprocv3.ProcessingResponse, hold bool) (string, error)
	stopNoop(ctx context.Context) error
	releaseNoop(ctx context.Context) error
	// heldNoop is the number of streams the no-op server holds.
	heldNoop(ctx context.Context) (int64, error)
	// gauge reads one of the processor's gauges (waitersGauge,
	// streamsGauge).
	gauge(ctx context.Context, name string) (int64, error)
	// replyIndex reads the processor's reply index metrics.
	replyIndex(ctx context.Context) (replyIndexSample, error)
	// moreRoutes reloads the processor with the request-reply and fan-out
	// routes (see benchConfig); it does nothing the second time.
	moreRoutes(ctx context.Context) error
	// startResponder starts the demo responder (responder.HTTPEcho) on the
	// requests topic; stopResponder stops it. It runs only while the
	// request-reply scenario does, so it adds nothing to the others'
	// background.
	startResponder(ctx context.Context) error
	stopResponder(ctx context.Context) error
	// usage and memory sample the server side alone; ok is false when it
	// shares this process (the process's own samples then cover it).
	usage(ctx context.Context, gc bool) (u usage, ok bool, err error)
	// cpuProfile starts a CPU profile of the server side written to file,
	// or with "" stops the one running.
	cpuProfile(ctx context.Context, file string) error
	// memory, when profile is not "", also writes a heap profile of the
	// server side there, right after the sample.
	memory(ctx context.Context, profile string) (m memory, ok bool, err error)
	close()
}

// local is the server side in this process.
type local struct {
	log    *slog.Logger
	broker *broker // nil when the broker runs elsewhere (brokerAt)
	// brokerAt is the broker's address.
	brokerAt string
	proc     *stack.Processor
	prod     *kafka.Producer
	noop     *noop
	resp     *responder.Responder
	full     *config.Config // every route; reloaded by moreRoutes
	more     bool           // the processor runs full
	// cpuProf is the file of the CPU profile cpuProfile started.
	cpuProf *os.File
}

var _ servers = (*local)(nil)

// startLocal starts the server side in this process: the embedded broker
// (unless brokerAt is the address of one running elsewhere), the processor
// and a producer for put.
func startLocal(logger *slog.Logger, limits, brokerAt string) (_ *local, err error) {
	cfg, full, err := benchConfigs(limits)
	if err != nil {
		return nil, err
	}
	l := &local{log: logger, brokerAt: brokerAt}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if brokerAt == "" {
		l.broker, err = startBenchBroker(logger, full)
		if err != nil {
			return nil, err
		}
		l.brokerAt = l.broker.Addr()
	}
	cfg = stack.PointAt(cfg, l.brokerAt)
	l.full = stack.PointAt(full, l.brokerAt)
	l.proc, err = stack.StartProcessor(stack.ProcessorOptions{Config: cfg, Listen: "127.0.0.1:0", Logger: logger.With("component", "processor")})
	if err != nil {
		return nil, err
	}
	l.prod, err = kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": l.brokerAt, "linger.ms": 0, "log_level": 3, "allow.auto.create.topics": false,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the producer: %w", err)
	}
	return l, nil
}

// benchConfigs parses the processor's configurations: the fetch routes
// alone, and every route (see benchConfig).
func benchConfigs(limits string) (cfg, full *config.Config, err error) {
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err = config.Parse("bench.yaml", []byte(benchConfig(false, limits)), noEnv)
	if err != nil {
		return nil, nil, fmt.Errorf("the built-in configuration (with -limits %q): %w", limits, err)
	}
	full, err = config.Parse("bench.yaml", []byte(benchConfig(true, limits)), noEnv)
	if err != nil {
		return nil, nil, fmt.Errorf("the built-in configuration: %w", err)
	}
	return cfg, full, nil
}

// startBenchBroker starts the embedded broker on a free loopback port (the
// load generator talks to nothing else) with every topic of full from the
// start, those of the later routes too.
func startBenchBroker(logger *slog.Logger, full *config.Config) (*broker, error) {
	topics := append(stack.TopicsOf(full), brokerTopic{Name: rawRepliesTopic})
	return startBroker(logger.With("component", "kafka"), topics...)
}

func (l *local) processorAddr() string { return l.proc.Addr() }

func (l *local) brokerAddr() string { return l.brokerAt }

func (l *local) moreRoutes(context.Context) error {
	if l.more {
		return nil
	}
	if err := l.proc.Reload(l.full); err != nil {
		return err
	}
	l.more = true
	return nil
}

// startResponder starts the demo responder of `kafka-ext-proc dev`'s orders
// route: responder.HTTPEcho, with its default settings.
func (l *local) startResponder(context.Context) error {
	if l.resp != nil {
		return errors.New("a responder is already running")
	}
	r, err := responder.Start(responder.Options{
		Properties: map[string]string{"bootstrap.servers": l.brokerAt},
		Topic:      requestsTopic, ReplyTo: repliesTopic, Handler: responder.HTTPEcho(),
		Logger: l.log.With("component", "responder"),
	})
	if err != nil {
		return err
	}
	l.resp = r
	return nil
}

func (l *local) stopResponder(context.Context) error {
	if l.resp != nil {
		l.resp.Close()
		l.resp = nil
	}
	return nil
}

func (l *local) put(ctx context.Context, topic string, records map[string][]byte) error {
	done := make(chan kafka.Event, len(records))
	for key, value := range records {
		m := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key:            []byte(key), Value: value,
			Headers: []kafka.Header{{Key: "content-type", Value: []byte("application/json")}},
		}
		if err := l.prod.Produce(m, done); err != nil {
			return fmt.Errorf("producing to %s: %w", topic, err)
		}
	}
	for range records {
		select {
		case ev := <-done:
			m, ok := ev.(*kafka.Message)
			if !ok {
				return fmt.Errorf("producing to %s: unexpected event %v", topic, ev)
			}
			if m.TopicPartition.Error != nil {
				return fmt.Errorf("producing to %s: %w", topic, m.TopicPartition.Error)
			}
		case <-ctx.Done():
			return fmt.Errorf("producing to %s: %w", topic, ctx.Err())
		}
	}
	return nil
}

func (l *local) startNoop(_ context.Context, answer []*extprocv3.ProcessingResponse, hold bool) (string, error) {
	if l.noop != nil {
		return "", errors.New("a no-op server is already running")
	}
	n, err := startNoop(answer, hold)
	if err != nil {
		return "", err
	}
	l.noop = n
	return n.addr(), nil
}

func (l *local) stopNoop(context.Context) error {
	if l.noop != nil {
		l.noop.stop()
		l.noop = nil
	}
	return nil
}

func (l *local) releaseNoop(context.Context) error {
	if l.noop == nil {
		return errors.New("no no-op server is running")
	}
	l.noop.releaseAll()
	return nil
}

func (l *local) heldNoop(context.Context) (int64, error) {
	if l.noop == nil {
		return 0, errors.New("no no-op server is running")
	}
	return l.noop.heldNow(), nil
}

func (l *local) gauge(_ context.Context, name string) (int64, error) {
	return gauge(l.proc.Registry, name)
}

func (l *local) replyIndex(context.Context) (replyIndexSample, error) {
	return replyIndexOf(l.proc.Registry)
}

func (l *local) usage(context.Context, bool) (usage, bool, error) { return usage{}, false, nil }

func (l *local) memory(context.Context, string) (memory, bool, error) { return memory{}, false, nil }

func (l *local) cpuProfile(_ context.Context, file string) error {
	if file == "" {
		if l.cpuProf == nil {
			return errors.New("no CPU profile is running")
		}
		pprof.StopCPUProfile()
		err := l.cpuProf.Close()
		l.cpuProf = nil
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("starting a CPU profile (not with -cpuprofile): %w", err)
	}
	l.cpuProf = f
	return nil
}

func (l *local) close() {
	_ = l.stopNoop(context.Background())
	_ = l.stopResponder(context.Background())
	if l.prod != nil {
		l.prod.Close()
	}
	if l.proc != nil {
		// Every exchange of the run has ended and the load's connections
		// are closed, so the drain is quick; the bound is for a bug.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l.proc.Shutdown(ctx)
		cancel()
	}
	if l.broker != nil {
		l.broker.Close()
	}
}

// gauge reads a gauge without labels from a registry.
func gauge(g prometheus.Gatherer, name string) (int64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("reading the processor's metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge() != nil {
			return int64(mf.GetMetric()[0].GetGauge().GetValue()), nil
		}
	}
	return 0, fmt.Errorf("the processor's metrics have no gauge %s", name)
}

// usage is what a process consumed so far.
type usage struct {
	Mallocs uint64        // runtime.MemStats.Mallocs: heap objects allocated
	Bytes   uint64        // runtime.MemStats.TotalAlloc
	CPU     time.Duration // user + system CPU time (0 where unknown)
}

func (u usage) sub(v usage) usage {
	return usage{Mallocs: u.Mallocs - v.Mallocs, Bytes: u.Bytes - v.Bytes, CPU: u.CPU - v.CPU}
}

func (u usage) add(v usage) usage {
	return usage{Mallocs: u.Mallocs + v.Mallocs, Bytes: u.Bytes + v.Bytes, CPU: u.CPU + v.CPU}
}

// sampleUsage reads this process's usage, after a collection when gc is
// set (so garbage of what came before is not collected on the account of
// what follows more than it must).
func sampleUsage(gc bool) usage {
	if gc {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{Mallocs: ms.Mallocs, Bytes: ms.TotalAlloc, CPU: cputime.Process()}
}

// memory is a sample of a process after a full collection.
type memory struct {
	Heap, Stacks, Goroutines uint64
	RSS                      uint64 // resident set; 0 where unknown
	// PeakRSS is the process's resident set at its highest so far (Linux
	// VmHWM); 0 where unknown.
	PeakRSS uint64
	// GoHeld is what the Go runtime holds from the operating system, heap
	// (live or free) and its own structures, less what it released: the
	// Go share of RSS, an upper bound (not all of it need be resident).
	GoHeld uint64
}

// sampleMemory collects garbage and reads the live heap (what the
// collection marked), the goroutine stacks and the goroutine count.
func sampleMemory() memory {
	// Twice: objects in sync.Pools (gRPC's buffers among them) survive one
	// collection in the pools' victim caches, and a previous scenario's
	// buffers would otherwise count against this sample.
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(s)
	var m memory
	var total, released uint64
	for i, p := range []*uint64{&m.Heap, &m.Stacks, &m.Goroutines, &total, &released} {
		if s[i].Value.Kind() == metrics.KindUint64 {
			*p = s[i].Value.Uint64()
		}
	}
	m.RSS = residentBytes()
	// The kernel moves its high-water mark lazily (VmHWM is the larger of
	// the mark and the resident set at the moment it is read), so a mark
	// read after VmRSS can be below it: the peak is at least what was seen.
	m.PeakRSS = max(statusBytes("VmHWM:"), m.RSS)
	m.GoHeld = total - min(released, total)
	return m
}
