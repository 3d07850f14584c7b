package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// The kafka-grpc scenario measures the kafka-grpc binding, the processor's
// own consumer of request records that calls an unchanged gRPC service,
// against the loop a service team would write instead: a consumer group on
// the request topic, a gRPC call per request, a producer writing the reply
// records the service contract asks for. Both legs have the same callers
// (example.Echo/Say, unary, and example.Echo/Expand, server streaming,
// through the emulator and a processor's grpc-kafka request-reply route),
// the same echo service, the same messages; they differ only in what
// answers the request records:
//
//   - worker: a processor whose configuration also has a kafka-grpc binding
//     for the route's topics, started as serve starts it (stack.StartProcessor
//     runs the binding's worker beside the ext_proc server);
//   - raw: a processor without the binding, and kgRaw, written here.
//
// Two processors rather than one with two routes, so that the raw leg's
// processor holds no kafka-grpc worker at all. Both run in this process,
// with their own broker, the echo service and the callers; the rounds
// alternate the legs, at 1, 16 and 64 calls of Say in flight, then at 1
// and 64 calls of Expand.

const (
	kgMethod = "/example.Echo/Say"
	// kgStream is the streaming shape: one request message, the service
	// answers each of its kgWords words as a message of its own.
	kgStream = "/example.Echo/Expand"
	kgWords  = 4
	// The worker leg's topics, and the raw leg's.
	kgRequests    = "bench-kg-requests"
	kgReplies     = "bench-kg-replies"
	kgRawRequests = "bench-kg-raw-requests"
	kgRawReplies  = "bench-kg-raw-replies"
	// kgRawSlots bounds the raw loop's calls in flight, as the binding's
	// 256 calls per worker bound its own (kafkagrpc.DefaultMaxCalls).
	kgRawSlots = 256
	// The grpc-kafka binding's default headers (docs/service-contract.md)
	// besides the correlation id and reply-to of request-reply.
	serviceHeader = "gateway:service"
	methodHeader  = "gateway:method"
	statusHeader  = "gateway:status"
)

// kgLevels are the calls in flight of the rounds: one call measures the
// latency the hop adds, 16 and 64 how the two legs saturate the cores.
func kgLevels() []int { return []int{1, 16, replyConcurrency} }

// kgConfig is a processor's configuration: the grpc-kafka request-reply
// route of example.Echo on topic, answered on replyTo, and with echo
// set a kafka-grpc binding calling the echo service at echo for the same
// topics. Both write with acks leader_only (the raw loop's producer has the
// processor's settings for it, see newRawProducer).
func kgConfig(topic, replyTo, echo, limits string) string {
	if limits != "" {
		limits = ", " + limits
	}
	y := `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: "127.0.0.1:9092" }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: example.Echo }]
        exit: kafka0
        with: { capability: produce, topic: ` + topic + `, reply-to: ` + replyTo + `, acks: leader_only }
`
	if echo != "" {
		y += `  echo-service:
    type: kafka-grpc
    kind: remote_server
    options: { acks: leader_only }
    routes:
      - when: [{ topic: ` + topic + `, reply-to: ` + replyTo + `, method: example.Echo/* }]
        exit: kafka0
        with: { scheme: http, authority: "` + echo + `" }
`
	}
	return y + "limits: { max-wait: 60s" + limits + " }\n"
}

// echoServer is the service both legs call: Say answers the message it
// got, as an unchanged gRPC service behind either would.
type echoServer struct {
	example.UnimplementedEchoServer
	calls atomic.Int64
}

func (s *echoServer) Say(_ context.Context, m *example.EchoMessage) (*example.EchoMessage, error) {
	s.calls.Add(1)
	return &example.EchoMessage{Message: m.GetMessage()}, nil
}

// Expand answers each word of the message as a message of its own.
func (s *echoServer) Expand(m *example.EchoMessage, st grpc.ServerStreamingServer[example.EchoMessage]) error {
	s.calls.Add(1)
	for _, w := range strings.Fields(m.GetMessage()) {
		if err := st.Send(&example.EchoMessage{Message: w}); err != nil {
			return err
		}
	}
	return nil
}

// startEcho serves the echo service on a free loopback port, with grpc-go's
// defaults.
func startEcho() (*grpc.Server, *echoServer, string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, "", fmt.Errorf("the echo service: %w", err)
	}
	srv := grpc.NewServer()
	svc := &echoServer{}
	example.RegisterEchoServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	return srv, svc, lis.Addr().String(), nil
}

// echoText is the length of the text that makes an EchoMessage of size
// bytes (its tag and length take the rest; one byte short where the
// length's own size changes).
func echoText(size int) int {
	n := size - 2
	for n > 0 && 1+uvarintLen(uint64(n))+n > size {
		n--
	}
	return max(n, 1)
}

// kgLeg is one leg's processor and the callers' connections to it.
type kgLeg struct {
	proc *stack.Processor
	side *side
}

func (l *kgLeg) close(ctx context.Context) {
	if l.side != nil {
		l.side.close()
	}
	if l.proc != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		l.proc.Shutdown(ctx)
		cancel()
	}
}

func (e *env) startKGLeg(name, broker, yaml string, conns int) (*kgLeg, error) {
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err := config.Parse("kafka-grpc-bench.yaml", []byte(yaml), noEnv)
	if err != nil {
		return nil, fmt.Errorf("the %s leg's configuration: %w", name, err)
	}
	l := &kgLeg{}
	l.proc, err = stack.StartProcessor(stack.ProcessorOptions{Config: stack.PointAt(cfg, broker), Listen: "127.0.0.1:0",
		Logger: e.log.With("component", "processor", "leg", name)})
	if err != nil {
		return nil, fmt.Errorf("the %s leg's processor: %w", name, err)
	}
	if l.side, err = e.dial("processor ("+name+" leg)", l.proc.Addr(), conns); err != nil {
		l.close(context.Background())
		return nil, err
	}
	return l, nil
}

// runKafkaGRPC measures the kafka-grpc binding's round trip against the
// raw loop's, both legs in alternating rounds of one run.
func runKafkaGRPC(ctx context.Context, e *env, o *options) (*Result, error) {
	if e.split {
		return nil, errors.New("runs in one process: leave -split out")
	}
	load := loadAverage()
	broker, err := startBroker(e.log.With("component", "kafka"), brokerTopic{Name: kgRequests}, brokerTopic{Name: kgReplies},
		brokerTopic{Name: kgRawRequests}, brokerTopic{Name: kgRawReplies})
	if err != nil {
		return nil, err
	}
	defer broker.Close()
	echoSrv, echo, echoAddr, err := startEcho()
	if err != nil {
		return nil, err
	}
	defer echoSrv.Stop()

	worker, err := e.startKGLeg("worker", broker.Addr(), kgConfig(kgRequests, kgReplies, echoAddr, o.limits), o.conns)
	if err != nil {
		return nil, err
	}
	defer worker.close(ctx)
	rawLeg, err := e.startKGLeg("raw", broker.Addr(), kgConfig(kgRawRequests, kgRawReplies, "", o.limits), o.conns)
	if err != nil {
		return nil, err
	}
	defer rawLeg.close(ctx)
	raw, err := startKGRaw(broker.Addr(), echoAddr)
	if err != nil {
		return nil, err
	}
	defer raw.close()

	msg, err := proto.Marshal(&example.EchoMessage{Message: strings.Repeat("x", echoText(o.valueSize))})
	if err != nil {
		return nil, err
	}
	sides := []rrSide{kgCaller("kafka-grpc worker", worker.side, kgMethod, msg, grpcFrames(msg)),
		kgCaller("raw consumer → gRPC → producer loop", rawLeg.side, kgMethod, msg, grpcFrames(msg))}
	for _, s := range sides {
		// The first answer needs the consumer group's assignment.
		if err := awaitRR(ctx, s); err != nil {
			return nil, err
		}
	}
	figs, rdk, err := e.measureLevels(ctx, o, scenarioKafkaGRPC, sides, kgLevels())
	if err != nil {
		return nil, err
	}
	streamMsg, streamWant, err := expandMessage(o.valueSize)
	if err != nil {
		return nil, err
	}
	streams := []rrSide{kgCaller("kafka-grpc worker, Expand", worker.side, kgStream, streamMsg, streamWant),
		kgCaller("raw loop, Expand", rawLeg.side, kgStream, streamMsg, streamWant)}
	streamFigs, _, err := e.measureLevels(ctx, o, scenarioKafkaGRPC, streams, kgStreamLevels())
	if err != nil {
		return nil, err
	}
	if err := raw.failure(); err != nil {
		return nil, err
	}
	res := kgResult(e, o, figs, rdk, len(msg), load)
	kgStreamResult(res, streamFigs)
	res.figure("echo_calls", echo.calls.Load())
	return res, nil
}

// kgStreamLevels are the calls in flight of the streaming shape's rounds.
func kgStreamLevels() []int { return []int{1, replyConcurrency} }

// expandMessage is the streaming shape's request, kgWords words in about
// size bytes, and the answer it wants: each word as a framed message.
func expandMessage(size int) (msg, want []byte, err error) {
	n := max((size-3)/kgWords-1, 1)
	words := make([]string, kgWords)
	for i := range words {
		words[i] = strings.Repeat(string(rune('a'+i)), n)
	}
	if msg, err = proto.Marshal(&example.EchoMessage{Message: strings.Join(words, " ")}); err != nil {
		return nil, nil, err
	}
	for _, w := range words {
		b, err := proto.Marshal(&example.EchoMessage{Message: w})
		if err != nil {
			return nil, nil, err
		}
		want = append(want, grpcFrames(b)...)
	}
	return msg, want, nil
}

// kgStreamResult adds the streaming shape's figures (expand_worker_1, …)
// and ratios.
func kgStreamResult(res *Result, figs [][]rrFigures) {
	res.param("expand_messages", kgWords)
	for li, n := range kgStreamLevels() {
		w, r := figs[li][0], figs[li][1]
		res.figures(fmt.Sprintf("expand_worker_%d", n), w)
		res.figures(fmt.Sprintf("expand_raw_%d", n), r)
		res.figure(fmt.Sprintf("expand_added_p50_ms_%d", n), w.Latency.P50Ms-r.Latency.P50Ms)
	}
	for li, n := range kgStreamLevels() {
		w, r := figs[li][0], figs[li][1]
		res.ratio(fmt.Sprintf("expand_rate_ratio_%d", n), ratio(w.PerSecond, r.PerSecond),
			fmt.Sprintf("Expand calls per second with %d in flight, kafka-grpc worker ÷ raw loop", n), "")
	}
}

// kgResult reports each leg at each level (worker_1, raw_1, worker_16, …)
// and the ratios of the two; rdk is nil where librdkafka's threads could
// not be sampled.
func kgResult(e *env, o *options, figs [][]rrFigures, rdk [][]time.Duration, msgBytes int, load string) *Result {
	res := newResult(scenarioKafkaGRPC, e.split)
	res.param("conns", o.conns)
	res.param("rounds", o.rounds)
	res.param("duration_per_round", o.duration.String())
	res.param("message_bytes", msgBytes)
	if load != "" {
		res.param("load_average", load)
	}
	for li, n := range kgLevels() {
		res.figures(fmt.Sprintf("worker_%d", n), figs[li][0])
		res.figures(fmt.Sprintf("raw_%d", n), figs[li][1])
	}
	for li, n := range kgLevels() {
		for si, leg := range []string{"worker", "raw"} {
			if rdk != nil {
				res.figure(fmt.Sprintf("%s_%d_librdkafka_cpu_us_per_req", leg, n), float64(rdk[li][si].Microseconds())/float64(figs[li][si].Requests))
			}
		}
	}
	for li, n := range kgLevels() {
		w, r := figs[li][0], figs[li][1]
		res.figure(fmt.Sprintf("added_p50_ms_%d", n), w.Latency.P50Ms-r.Latency.P50Ms)
		res.figure(fmt.Sprintf("added_p99_ms_%d", n), w.Latency.P99Ms-r.Latency.P99Ms)
	}
	for li, n := range kgLevels() {
		w, r := figs[li][0], figs[li][1]
		res.ratio(fmt.Sprintf("rate_ratio_%d", n), ratio(w.PerSecond, r.PerSecond),
			fmt.Sprintf("round trips per second with %d in flight, kafka-grpc worker ÷ raw loop", n), "")
		res.ratio(fmt.Sprintf("latency_ratio_%d", n), ratio(w.Latency.P50Ms, r.Latency.P50Ms),
			fmt.Sprintf("median round trip with %d in flight, kafka-grpc worker ÷ raw loop", n), "")
	}
	last := len(kgLevels()) - 1
	res.ratio("cpu_ratio", ratio(figs[last][0].All.CPUus, figs[last][1].All.CPUus),
		fmt.Sprintf("CPU per round trip with %d in flight over the whole process, kafka-grpc worker ÷ raw loop", kgLevels()[last]), "")
	if rdk != nil {
		w := float64(rdk[last][0].Microseconds()) / float64(figs[last][0].Requests)
		r := float64(rdk[last][1].Microseconds()) / float64(figs[last][1].Requests)
		res.ratio("librdkafka_cpu_ratio", ratio(w, r),
			fmt.Sprintf("CPU per round trip of the process's librdkafka threads with %d in flight, kafka-grpc worker ÷ raw loop", kgLevels()[last]), "")
	}
	return res
}

// measureLevels is measureRR for any levels of calls in flight: a warm-up
// of each side, then o.rounds rounds of each side at each level, the first
// side rotating every round. It returns figs[level][side], and rdk[level][side]
// the CPU time of the process's librdkafka threads in those windows (nil
// where they cannot be sampled): the C side of every Kafka client, which
// the Go profiler does not see.
func (e *env) measureLevels(ctx context.Context, o *options, scenario string, sides []rrSide, levels []int) (figs [][]rrFigures, rdk [][]time.Duration, err error) {
	for _, s := range sides {
		if o.warmup <= 0 {
			break
		}
		w, err := e.runRR(ctx, s, levels[len(levels)-1], o.warmup, o.maxReqs)
		if err != nil {
			return nil, nil, err
		}
		if w.errors > 0 {
			return nil, nil, fmt.Errorf("%s (warm-up): %d failed; first: %w", s.name, w.errors, w.firstErr)
		}
	}
	_, rdkOK := rdkCPU()
	rdk = make([][]time.Duration, len(levels))
	totals := make([][]rrWindow, len(levels))
	perRound := make([][][]float64, len(levels))
	for li := range levels {
		totals[li] = make([]rrWindow, len(sides))
		rdk[li] = make([]time.Duration, len(sides))
		perRound[li] = make([][]float64, len(sides))
	}
	for r := range o.rounds {
		for li, workers := range levels {
			for k := range sides {
				si := (r + k) % len(sides)
				rdk0, _ := rdkCPU()
				w, err := e.runRR(ctx, sides[si], workers, o.duration, o.maxReqs)
				rdk1, _ := rdkCPU()
				rdk[li][si] += rdk1 - rdk0
				if err != nil {
					return nil, nil, err
				}
				if ctx.Err() != nil {
					return nil, nil, ctx.Err()
				}
				if w.errors > 0 || w.requests == 0 {
					return nil, nil, fmt.Errorf("%s, %d in flight: %d answered, %d failed; first failure: %v", sides[si].name, workers, w.requests, w.errors, w.firstErr)
				}
				e.log.Info("window", "scenario", scenario, "side", sides[si].name, "in_flight", workers, "round", r, "requests", w.requests, "elapsed", w.elapsed)
				t := &totals[li][si]
				t.requests += w.requests
				t.elapsed += w.elapsed
				t.lat.merge(&w.lat)
				t.all = t.all.add(w.all)
				t.busy, t.ticks = t.busy+w.busy, t.ticks+w.ticks
				perRound[li][si] = append(perRound[li][si], float64(w.requests)/w.elapsed.Seconds())
			}
		}
	}
	figs = make([][]rrFigures, len(levels))
	for li := range levels {
		figs[li] = make([]rrFigures, len(sides))
		for si := range sides {
			t := &totals[li][si]
			figs[li][si] = rrFigures{Requests: t.requests, Seconds: t.elapsed.Seconds(), PerSecond: float64(t.requests) / t.elapsed.Seconds(),
				Latency: t.lat.summary(), RoundPerSecond: perRound[li][si], All: perReq(t.all, t.requests)}
			if t.ticks > 0 {
				figs[li][si].MachineCores = float64(t.busy) / float64(t.ticks) * float64(runtime.NumCPU())
			}
		}
	}
	if !rdkOK {
		rdk = nil
	}
	return figs, rdk, nil
}

// kgCaller is a leg's callers: worker i calls path with msg through the
// emulator on connection i mod conns, and wants the framed response
// messages want with grpc-status 0.
func kgCaller(name string, s *side, path string, msg, want []byte) rrSide {
	frame := grpcFrames(msg)
	// Built once per connection, as the other scenarios' requests are.
	reqs := make([]emulator.Request, len(s.clients))
	for i, c := range s.clients {
		reqs[i] = newRequestWith(c, "POST", path, false, "content-type", "application/grpc", "te", "trailers")
	}
	return rrSide{name: name, do: func(ctx context.Context, i int) error {
		body, err := grpcCall(ctx, s.client(i), reqs[i%len(reqs)], path, frame)
		if err != nil {
			return err
		}
		if !bytes.Equal(body, want) {
			return fmt.Errorf("%s: answered %q, want %q", path, body, want)
		}
		return nil
	}}
}

// grpcFrames is msg with gRPC's 5-byte prefix (uncompressed).
func grpcFrames(msg []byte) []byte {
	frame := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(msg)))
	copy(frame[5:], msg)
	return frame
}

// grpcCall runs one call of path with one request message through the
// ext_proc filter: the framed message, then the answer's headers, body
// and trailers. It returns the response body (the framed messages) once
// grpc-status is 0.
func grpcCall(ctx context.Context, c *emulator.Client, req emulator.Request, path string, frame []byte) ([]byte, error) {
	x := c.Start(ctx, req)
	defer x.Close()
	if err := x.Body(frame, true); err != nil {
		return nil, err
	}
	var body []byte
	for {
		a, err := x.Next(ctx)
		if err != nil {
			return nil, err
		}
		switch a.Kind {
		case emulator.ActionHeaders:
			if a.Status != 200 {
				return nil, fmt.Errorf("%s: response headers %d", path, a.Status)
			}
			if a.EndOfStream { // trailers-only: an error status
				return nil, grpcStatusError(path, a.Headers)
			}
		case emulator.ActionBody:
			body = append(body, a.Body...)
			if a.EndOfStream {
				return nil, fmt.Errorf("%s: the response ended without trailers", path)
			}
		case emulator.ActionTrailers:
			if err := grpcStatusError(path, a.Headers); err != nil {
				return nil, err
			}
			return body, nil
		default:
			return nil, fmt.Errorf("%s: %s %d %s %s", path, a.Kind, a.Reply.Status, a.Reply.Body, a.Details)
		}
	}
}

// grpcStatusError is nil for grpc-status 0, else the status as an error.
func grpcStatusError(path string, h emulator.Headers) error {
	st, _ := h.Get("grpc-status")
	if st == "0" {
		return nil
	}
	msg, _ := h.Get("grpc-message")
	return fmt.Errorf("%s: grpc-status %q %s", path, st, msg)
}

// kgRaw is the raw leg's service side, written as a team would write it
// without the binding, following the service contract: a consumer group on
// the request topic (librdkafka's defaults: offsets committed automatically
// every 5 s, fetch.wait.max.ms the processor's 100), and for each request
// message, on a goroutine of its own (at most kgRawSlots at a time), the
// call of the service the record names (Say, or Expand, server streaming),
// a reply record per response message as it arrives (keyed and headed by
// the correlation id) and the end record (null value, status 0), written
// with the processor's producer settings for acks leader_only. The
// request's own end record is skipped: a call that takes one request
// message is made at that message.
//
// Its delivery is weaker than the binding's, which commits a record only
// once the replies of its call are acknowledged: this loop may lose the
// calls in flight when it stops. It is the loop the binding replaces, not
// an equivalent of it.
type kgRaw struct {
	cons   *kafka.Consumer
	prod   *kafka.Producer
	conn   *grpc.ClientConn
	echo   example.EchoClient
	slots  chan struct{}
	stop   chan struct{}
	done   chan struct{}
	calls  sync.WaitGroup
	failed atomic.Int64
	first  atomic.Pointer[error]
}

func startKGRaw(broker, echoAddr string) (_ *kgRaw, err error) {
	r := &kgRaw{slots: make(chan struct{}, kgRawSlots), stop: make(chan struct{}), done: make(chan struct{})}
	var b [6]byte
	_, _ = rand.Read(b[:])
	r.conn, err = grpc.NewClient("passthrough:///"+echoAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("the raw loop's connection to the echo service: %w", err)
	}
	r.echo = example.NewEchoClient(r.conn)
	if r.prod, err = newRawProducer(broker); err != nil {
		_ = r.conn.Close()
		return nil, err
	}
	r.cons, err = kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": broker, "allow.auto.create.topics": false, "log_level": 3,
		"group.id":          "kafka-ext-proc-load.kafka-grpc-raw." + hex.EncodeToString(b[:]),
		"auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
	})
	if err == nil {
		if err = r.cons.SubscribeTopics([]string{kgRawRequests}, nil); err != nil {
			_ = r.cons.Close()
		}
	}
	if err != nil {
		r.prod.Close()
		_ = r.conn.Close()
		return nil, fmt.Errorf("the raw loop's consumer: %w", err)
	}
	go r.consume()
	return r, nil
}

// consume reads the request records and answers each message.
func (r *kgRaw) consume() {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		m, ok := r.cons.Poll(100).(*kafka.Message)
		if !ok || m.TopicPartition.Error != nil || m.Value == nil {
			continue
		}
		select {
		case r.slots <- struct{}{}:
		case <-r.stop:
			return
		}
		r.calls.Add(1)
		go func() {
			defer r.calls.Done()
			defer func() { <-r.slots }()
			if err := r.answer(m); err != nil {
				r.failed.Add(1)
				r.first.CompareAndSwap(nil, &err)
			}
		}()
	}
}

// answer makes the call one request record asks for and writes a reply
// record per response message as it arrives, then the end record.
func (r *kgRaw) answer(m *kafka.Message) error {
	var cid, replyTo, service, method string
	md := metadata.MD{}
	for _, h := range m.Headers {
		switch h.Key {
		case correlationHeader:
			cid = string(h.Value)
		case replyToHeader:
			replyTo = string(h.Value)
		case serviceHeader:
			service = string(h.Value)
		case methodHeader:
			method = string(h.Value)
		default:
			if name, ok := strings.CutPrefix(h.Key, "meta:"); ok && name != "" {
				md.Append(name, string(h.Value))
			}
		}
	}
	path := "/" + service + "/" + method
	if cid == "" || replyTo == "" || path != kgMethod && path != kgStream {
		return fmt.Errorf("request record %v: correlation id %q, reply-to %q, method %s", m.TopicPartition, cid, replyTo, path)
	}
	in := &example.EchoMessage{}
	if err := proto.Unmarshal(m.Value, in); err != nil {
		return fmt.Errorf("request %s: %w", cid, err)
	}
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 30*time.Second)
	defer cancel()
	w := r.replyWriter(cid, replyTo)
	if path == kgMethod {
		out, err := r.echo.Say(ctx, in)
		if err != nil {
			return fmt.Errorf("calling the echo service for %s: %w", cid, err)
		}
		if err := w.reply(out); err != nil {
			return err
		}
		return w.end()
	}
	st, err := r.echo.Expand(ctx, in)
	if err != nil {
		return fmt.Errorf("calling the echo service for %s: %w", cid, err)
	}
	for {
		out, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return w.end()
		}
		if err != nil {
			return fmt.Errorf("the echo service's answer to %s: %w", cid, err)
		}
		if err := w.reply(out); err != nil {
			return err
		}
	}
}

// kgReplyWriter writes one call's reply records: the response messages, then
// the end record (status 0), all handed over as they come; end waits for
// every acknowledgement.
type kgReplyWriter struct {
	prod      *kafka.Producer
	topic     string
	key       []byte
	delivered chan kafka.Event
	sent      int
}

// kgMaxReplies bounds the records of one call: the delivery channel must
// hold every report, or the client's event loop would block on it.
const kgMaxReplies = 64

func (r *kgRaw) replyWriter(cid, replyTo string) *kgReplyWriter {
	return &kgReplyWriter{prod: r.prod, topic: replyTo, key: []byte(cid), delivered: make(chan kafka.Event, kgMaxReplies)}
}

func (w *kgReplyWriter) send(value []byte, headers []kafka.Header) error {
	if w.sent == kgMaxReplies {
		return fmt.Errorf("call %s: more than %d reply records", w.key, kgMaxReplies)
	}
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &w.topic, Partition: kafka.PartitionAny},
		Key: w.key, Value: value, Headers: headers}
	if err := w.prod.Produce(m, w.delivered); err != nil {
		return fmt.Errorf("writing a reply to %s: %w", w.key, err)
	}
	w.sent++
	return nil
}

func (w *kgReplyWriter) reply(out *example.EchoMessage) error {
	value, err := proto.Marshal(out)
	if err != nil {
		return err
	}
	return w.send(value, []kafka.Header{{Key: correlationHeader, Value: w.key}})
}

func (w *kgReplyWriter) end() error {
	if err := w.send(nil, []kafka.Header{{Key: correlationHeader, Value: w.key}, {Key: statusHeader, Value: []byte("0")}}); err != nil {
		return err
	}
	for range w.sent {
		if dm, ok := (<-w.delivered).(*kafka.Message); !ok || dm.TopicPartition.Error != nil {
			return fmt.Errorf("writing the replies to %s: %v", w.key, dm)
		}
	}
	return nil
}

// failure is the first call the raw loop could not answer, if any.
func (r *kgRaw) failure() error {
	if p := r.first.Load(); p != nil {
		return fmt.Errorf("the raw loop failed %d calls; first: %w", r.failed.Load(), *p)
	}
	return nil
}

func (r *kgRaw) close() {
	close(r.stop)
	<-r.done
	r.calls.Wait()
	_ = r.cons.Close()
	r.prod.Close()
	_ = r.conn.Close()
}

// rdkCPU is the CPU time so far of this process's librdkafka threads (those
// named rdk:…, every client's); ok is false where /proc cannot tell.
func rdkCPU() (d time.Duration, ok bool) {
	ts, err := threadsCPUByName("rdk:", nil)
	if err != nil {
		return 0, false
	}
	for _, t := range ts.cpu {
		d += t
	}
	return d, true
}
