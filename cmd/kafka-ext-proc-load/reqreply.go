package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
)

// Request-reply: POST /orders/{id} through the
// processor's produce route with reply-to, answered by the demo responder,
// against the raw librdkafka round trip on the same broker with the same
// responder: produce a request record with a correlation id, wait for the
// reply record with that id.

// Concurrency levels of the request-reply scenario: one request in flight
// measures latency, replyConcurrency in flight measures throughput.
const replyConcurrency = 64

// The correlation headers the processor writes (the http-kafka binding's
// defaults) and the responder reads.
const (
	correlationHeader = "gateway:correlation-id"
	replyToHeader     = "gateway:reply-to"
)

// replyRequest is one worker's request: the same id and body on both
// targets, so the responder's echo (the expected answer) is the same.
type replyRequest struct {
	id     string
	path   string // POST path
	body   []byte
	status int    // the gateway's answer: 201 with the responder's reply, or 204 for a oneway write
	want   []byte // the body of the answer: the responder's reply (none for 204)
}

// check says whether rep is the gateway's answer to r.
func (r replyRequest) check(rep reply) error {
	if rep.status != r.status || !bytes.Equal(rep.body, r.want) {
		return fmt.Errorf("POST %s: %d with %q, want %d with %q", r.path, rep.status, rep.body, r.status, r.want)
	}
	return nil
}

// newReplyRequests builds n requests and their expected replies: the
// responder's own handler applied to the request as the processor writes it
// (:method and :path headers, the id as the key, the body as the value).
func newReplyRequests(n, valueSize int) ([]replyRequest, error) {
	echo := responder.HTTPEcho()
	out := make([]replyRequest, n)
	for i := range out {
		id := "o" + strconv.Itoa(i)
		body := jsonValue(id, 1, valueSize)
		reps, err := echo(context.Background(), &responder.Request{
			Key: []byte(id), Value: body,
			Headers: []responder.Header{{Key: ":method", Value: []byte("POST")}, {Key: ":path", Value: []byte("/orders/" + id)}},
		})
		if err != nil || len(reps) != 1 {
			return nil, fmt.Errorf("the responder's echo of a request: %d replies, %v", len(reps), err)
		}
		out[i] = replyRequest{id: id, path: "/orders/" + id, body: body, status: 201, want: reps[0].Value}
	}
	return out, nil
}

// rrFigures are one target's figures at one concurrency over every round.
type rrFigures struct {
	Requests       int64     `json:"requests"`
	Errors         int64     `json:"errors"`
	Seconds        float64   `json:"seconds"`
	PerSecond      float64   `json:"req_per_s"`
	Latency        latency   `json:"latency"`
	RoundPerSecond []float64 `json:"round_req_per_s"`
	// All is per request over every process of the run (the raw loop's
	// include the broker's and the responder's work too); Server is the
	// server process alone (-split only): broker, responder and, for the
	// gateway, the processor.
	All    perRequest  `json:"all"`
	Server *perRequest `json:"server,omitempty"`
	// MachineCores is how many cores the whole machine kept busy during
	// these windows (every tenant; Linux only).
	MachineCores float64 `json:"machine_cores,omitempty"`
}

// rrSide is one target of the request-reply scenario.
type rrSide struct {
	name string
	// do runs worker i's request once and checks the answer.
	do func(ctx context.Context, i int) error
}

// rrWindow is the tally of one window.
type rrWindow struct {
	exchanges
	elapsed     time.Duration
	all, server usage
	busy, ticks uint64 // the machine's, from /proc/stat
}

// runRR runs workers concurrent request loops of s for d (or budget
// requests), timing each round trip.
func (e *env) runRR(ctx context.Context, s rrSide, workers int, d time.Duration, budget int64) (rrWindow, error) {
	srvBefore, split, err := e.srv.usage(ctx, true)
	if err != nil {
		return rrWindow{}, err
	}
	before := sampleUsage(true)
	busy0, ticks0, machineOK := machineTicks()
	ex, elapsed := runLoops(ctx, workers, d, budget, func(i int) func(context.Context) error {
		return func(ctx context.Context) error { return s.do(ctx, i) }
	})
	out := rrWindow{exchanges: ex, elapsed: elapsed}
	out.all = sampleUsage(false).sub(before)
	if busy1, ticks1, ok := machineTicks(); ok && machineOK {
		out.busy, out.ticks = busy1-busy0, ticks1-ticks0
	}
	srvAfter, _, err := e.srv.usage(ctx, false)
	if err != nil {
		return out, err
	}
	if split {
		out.server = srvAfter.sub(srvBefore)
		out.all = out.all.add(out.server)
	}
	return out, nil
}

// runRequestReply measures the processor's request-reply route against the
// raw librdkafka round trip, both answered by one demo responder.
func runRequestReply(ctx context.Context, e *env, o *options) (*Result, error) {
	reqs, err := newReplyRequests(replyConcurrency, o.valueSize)
	if err != nil {
		return nil, err
	}
	if err := e.srv.moreRoutes(ctx); err != nil {
		return nil, err
	}
	if err := e.srv.startResponder(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = e.srv.stopResponder(ctx) }()

	raw, err := startRawRR(e.srv.brokerAddr(), reqs)
	if err != nil {
		return nil, err
	}
	defer raw.close()
	fig, err := e.measureWithHop(ctx, o, scenarioRequestReply, requestsTopic, reqs, raw.side(), &raw.headers)
	if err != nil {
		return nil, err
	}
	res := newRRResult(scenarioRequestReply, e, o, fig, len(reqs[0].body), rawHeaderCount(raw.headers, 5))
	res.param("reply_bytes", len(reqs[0].want))
	gw1, raw1, gwN, rawN, hopN := fig(0, rrGateway), fig(0, rrRaw), fig(1, rrGateway), fig(1, rrRaw), fig(1, rrHop)
	res.ratio("latency_ratio", ratio(gw1.Latency.P50Ms, raw1.Latency.P50Ms), "median round trip with 1 in flight, gateway ÷ raw loop", "≤ 2")
	res.ratio("latency_p99_ratio", ratio(gw1.Latency.P99Ms, raw1.Latency.P99Ms), "p99 round trip with 1 in flight, gateway ÷ raw loop", "")
	res.ratio("rate_ratio", ratio(gwN.PerSecond, rawN.PerSecond), "requests per second with 64 in flight, gateway ÷ raw loop", "≥ 0.5")
	res.ratio("rate_1_ratio", ratio(gw1.PerSecond, raw1.PerSecond), "requests per second with 1 in flight, gateway ÷ raw loop", "")
	// On a machine whose cores are all busy the rate ratio tends to the
	// inverse of this.
	res.ratio("cpu_ratio", ratio(gwN.All.CPUus, rawN.All.CPUus), "CPU per request with 64 in flight over every process, gateway ÷ raw loop", "")
	if e.split {
		res.ratio("server_cpu_ratio", ratio(gwN.Server.CPUus, rawN.Server.CPUus), "CPU per request with 64 in flight in the server process, gateway ÷ raw loop", "")
	}
	res.ratio("hop_rate_ratio", ratio(gwN.PerSecond, hopN.PerSecond), "requests per second with 64 in flight, gateway ÷ hop baseline: the processor's own share", "")
	res.ratio("hop_ceiling_ratio", ratio(hopN.PerSecond, rawN.PerSecond),
		"requests per second with 64 in flight, hop baseline ÷ raw loop: the most any gateway could reach on this machine", "")
	addMachineryRatios(res, gwN, hopN, fig(1, rrMachinery))
	return res, nil
}

// The targets of the request-reply and oneway scenarios, as measureWithHop
// orders them.
const (
	rrGateway   = iota // the route through the processor
	rrRaw              // the raw librdkafka loop
	rrHop              // the raw loop behind an ext_proc hop (see hop)
	rrMachinery        // the raw loop behind the processor's exchange machinery (see machinery)
)

// newRRResult starts the result of the request-reply and oneway scenarios:
// the figures of each target at 1 and at replyConcurrency in flight
// (gateway_1, raw_n, …). rawHeaders is how many headers the raw loop's
// records carry: its own few, or (-raw-headers gateway) as many as the
// processor's.
func newRRResult(scenario string, e *env, o *options, fig func(li, si int) rrFigures, bodyBytes, rawHeaders int) *Result {
	res := newResult(scenario, e.split)
	res.param("conns", o.conns)
	res.param("rounds", o.rounds)
	res.param("duration_per_round", o.duration.String())
	res.param("concurrency", replyConcurrency)
	res.param("body_bytes", bodyBytes)
	res.param("raw_headers", rawHeaders)
	for li, level := range []string{"1", "n"} {
		for si, target := range []string{"gateway", "raw", "hop", "machinery"} {
			res.figures(target+"_"+level, fig(li, si))
		}
	}
	return res
}

// measureRR runs the warm-up, then o.rounds rounds of each side at one
// and at replyConcurrency requests in flight (the first side rotating
// every round, so a neighbour's burst lands on all alike), and returns
// the figures as fig(level, side), level 0 one in flight.
func (e *env) measureRR(ctx context.Context, o *options, scenario string, sides []rrSide) (func(li, si int) rrFigures, error) {
	if o.warmup > 0 {
		for _, s := range sides {
			w, err := e.runRR(ctx, s, replyConcurrency, o.warmup, o.maxReqs)
			if err != nil {
				return nil, err
			}
			if w.errors > 0 {
				return nil, fmt.Errorf("%s (warm-up): %d failed; first: %w", s.name, w.errors, w.firstErr)
			}
		}
	}
	levels := []int{1, replyConcurrency}
	totals := make([][]rrWindow, len(levels))
	perRound := make([][][]float64, len(levels))
	for li := range levels {
		totals[li] = make([]rrWindow, len(sides))
		perRound[li] = make([][]float64, len(sides))
	}
	for r := range o.rounds {
		for li, workers := range levels {
			for k := range sides {
				si := (r + k) % len(sides)
				w, err := e.runRR(ctx, sides[si], workers, o.duration, o.maxReqs)
				if err != nil {
					return nil, err
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if w.errors > 0 || w.requests == 0 {
					return nil, fmt.Errorf("%s, %d in flight: %d answered, %d failed; first failure: %v", sides[si].name, workers, w.requests, w.errors, w.firstErr)
				}
				e.log.Info("window", "scenario", scenario, "side", sides[si].name, "in_flight", workers, "round", r, "requests", w.requests, "elapsed", w.elapsed)
				t := &totals[li][si]
				t.requests += w.requests
				t.elapsed += w.elapsed
				t.lat.merge(&w.lat)
				t.all, t.server = t.all.add(w.all), t.server.add(w.server)
				t.busy, t.ticks = t.busy+w.busy, t.ticks+w.ticks
				perRound[li][si] = append(perRound[li][si], float64(w.requests)/w.elapsed.Seconds())
			}
		}
	}
	return func(li, si int) rrFigures {
		t := &totals[li][si]
		f := rrFigures{Requests: t.requests, Seconds: t.elapsed.Seconds(), PerSecond: float64(t.requests) / t.elapsed.Seconds(),
			Latency: t.lat.summary(), RoundPerSecond: perRound[li][si], All: perReq(t.all, t.requests)}
		if e.split {
			s := perReq(t.server, t.requests)
			f.Server = &s
		}
		if t.ticks > 0 {
			f.MachineCores = float64(t.busy) / float64(t.ticks) * float64(runtime.NumCPU())
		}
		return f
	}, nil
}

// captureWithHeaders returns nil unless -raw-headers is gateway; then it
// runs the first request once through the processor and returns the
// headers of the record it wrote to topic, for the raw loop to carry.
func (e *env) captureWithHeaders(ctx context.Context, o *options, topic string, reqs []replyRequest) ([]kafka.Header, error) {
	if o.rawHeaders != rawHeadersGateway {
		return nil, nil
	}
	hr, err := newHeaderReader(e.srv.brokerAddr(), topic)
	if err != nil {
		return nil, err
	}
	if err := awaitRR(ctx, e.gatewayRR(e.procSide, reqs[:1])); err != nil {
		_ = hr.cons.Close()
		return nil, err
	}
	return hr.read(ctx)
}

// rawHeaderCount is len(headers), or own when the raw loop keeps its own.
func rawHeaderCount(headers []kafka.Header, own int) int {
	if headers == nil {
		return own
	}
	return len(headers)
}

// awaitRR runs worker 0's request until it succeeds (bounded).
func awaitRR(ctx context.Context, s rrSide) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.do(actx, 0)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%s: no answer as expected in time (last: %v): %w", s.name, err, ctx.Err())
		}
	}
}

// gatewayRR is the gateway's side, served by s (the processor, or the hop
// baseline): worker i POSTs its request, on connection i mod conns, and
// wants 201 with the responder's reply.
func (e *env) gatewayRR(s *side, reqs []replyRequest) rrSide {
	// Built once, as the fetch scenarios' requests are (see newRequest).
	built := make([]emulator.Request, len(reqs))
	for i, r := range reqs {
		built[i] = newRequestWith(s.client(0), "POST", r.path, false,
			"content-type", "application/json", "content-length", strconv.Itoa(len(r.body)))
	}
	return rrSide{name: "gateway", do: func(ctx context.Context, i int) error {
		r := reqs[i%len(reqs)]
		rep, err := exchangeBody(ctx, s.client(i), built[i%len(built)], r.body)
		if err != nil {
			return err
		}
		return r.check(rep)
	}}
}

// rawRR is the raw librdkafka round trip, written as a service calling
// another over Kafka would: one shared producer with the processor's
// settings for the route's acks (those of its producer for leader_only:
// acks=1, max.in.flight 1, linger.ms 1, murmur2_random, delivery reports
// without fields), one consumer assigned every partition of its reply
// topic from the end, and a map of correlation id → channel the consumer
// delivers replies through. A round trip is the produce, its delivery
// report and the reply, as the processor's is.
type rawRR struct {
	reqs   []replyRequest
	prod   *kafka.Producer
	cons   *kafka.Consumer
	prefix string
	seq    atomic.Uint64
	// headers, when set before the rounds, replaces the five headers of a
	// raw request record with those of the processor's (-raw-headers
	// gateway; see withHeaders).
	headers []kafka.Header

	mu      sync.Mutex
	waiting map[string]chan []byte

	workers []rawWorker
	stop    chan struct{}
	done    chan struct{}
}

type rawWorker struct {
	delivery chan kafka.Event
	reply    chan []byte
}

func startRawRR(broker string, reqs []replyRequest) (_ *rawRR, err error) {
	r := &rawRR{reqs: reqs, waiting: map[string]chan []byte{}, stop: make(chan struct{}), done: make(chan struct{})}
	var b [6]byte
	_, _ = rand.Read(b[:])
	r.prefix = "raw-" + hex.EncodeToString(b[:]) + "-"
	if r.prod, err = newRawProducer(broker); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.prod.Close()
		}
	}()
	// The processor's consumer settings: an
	// assignment-only group, no commits, fetch.wait.max.ms 100.
	r.cons, err = kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": broker, "allow.auto.create.topics": false, "log_level": 3,
		"group.id": r.prefix + "replies", "enable.auto.commit": false, "enable.auto.offset.store": false,
		"auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
	})
	if err != nil {
		return nil, fmt.Errorf("the raw loop's consumer: %w", err)
	}
	if err := assignFromEnd(r.cons, rawRepliesTopic); err != nil {
		_ = r.cons.Close()
		return nil, err
	}
	r.workers = make([]rawWorker, replyConcurrency)
	for i := range r.workers {
		r.workers[i] = rawWorker{delivery: make(chan kafka.Event, 1), reply: make(chan []byte, 1)}
	}
	go r.consume()
	return r, nil
}

// newRawProducer is the raw loops' producer, with the processor's settings
// for a route with acks leader_only (see rawRR).
func newRawProducer(broker string) (*kafka.Producer, error) {
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": broker, "allow.auto.create.topics": false, "log_level": 3,
		"acks": "1", "max.in.flight.requests.per.connection": 1, "linger.ms": 1,
		"partitioner": "murmur2_random", "go.delivery.report.fields": "none",
	})
	if err != nil {
		return nil, fmt.Errorf("the raw loop's producer: %w", err)
	}
	return p, nil
}

// assignFromEnd assigns every partition of topic at its current end
// offset (read from the broker, so no reply written after this is missed,
// as a logical "end" resolved later could).
func assignFromEnd(c *kafka.Consumer, topic string) error {
	parts, err := endOffsets(c, topic)
	if err != nil {
		return err
	}
	return c.Assign(parts)
}

// endOffsets reads the end offset of every partition of topic from the
// broker.
func endOffsets(c *kafka.Consumer, topic string) ([]kafka.TopicPartition, error) {
	md, err := c.GetMetadata(&topic, false, 10_000)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	tm, ok := md.Topics[topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError || len(tm.Partitions) == 0 {
		return nil, fmt.Errorf("metadata of %s: %v", topic, tm.Error)
	}
	parts := make([]kafka.TopicPartition, len(tm.Partitions))
	for i, p := range tm.Partitions {
		_, hi, err := c.QueryWatermarkOffsets(topic, p.ID, 10_000)
		if err != nil {
			return nil, fmt.Errorf("end offset of %s/%d: %w", topic, p.ID, err)
		}
		parts[i] = kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.Offset(hi)}
	}
	return parts, nil
}

// headerReader reads back the headers of a record the processor writes, so
// the raw loops can carry the same (-raw-headers gateway): it notes the
// topic's end offsets (mark) before the processor writes, then reads the
// first record written after them (read).
type headerReader struct {
	cons  *kafka.Consumer
	topic string
	from  []kafka.TopicPartition
}

func newHeaderReader(broker, topic string) (*headerReader, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": broker, "allow.auto.create.topics": false, "log_level": 3,
		"group.id": "kafka-ext-proc-load-headers", "enable.auto.commit": false, "enable.auto.offset.store": false,
		"auto.offset.reset": "earliest",
	})
	if err != nil {
		return nil, fmt.Errorf("the header reader: %w", err)
	}
	h := &headerReader{cons: c, topic: topic}
	if h.from, err = endOffsets(c, topic); err != nil {
		_ = c.Close()
		return nil, err
	}
	return h, nil
}

// read returns the headers of the first record written after the mark
// (bounded by ctx and 10 s) and closes the reader.
func (h *headerReader) read(ctx context.Context) ([]kafka.Header, error) {
	defer func() { _ = h.cons.Close() }()
	if err := h.cons.Assign(h.from); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if m, ok := h.cons.Poll(100).(*kafka.Message); ok && m.TopicPartition.Error == nil {
			return m.Headers, nil
		}
	}
	return nil, fmt.Errorf("reading back a record the processor wrote to %s: %w", h.topic, ctx.Err())
}

// withHeaders is the record headers of tmpl (read back from the processor's
// records) for another request: its :path, and the raw loop's reply-to and
// correlation id where tmpl has them.
func withHeaders(tmpl []kafka.Header, path, replyTo, cid string) []kafka.Header {
	out := make([]kafka.Header, len(tmpl))
	for i, h := range tmpl {
		switch h.Key {
		case ":path":
			h.Value = []byte(path)
		case replyToHeader:
			h.Value = []byte(replyTo)
		case correlationHeader:
			h.Value = []byte(cid)
		}
		out[i] = h
	}
	return out
}

// consume hands each reply to the round trip waiting for its id.
func (r *rawRR) consume() {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		m, ok := r.cons.Poll(100).(*kafka.Message)
		if !ok || m.TopicPartition.Error != nil {
			continue
		}
		var cid string
		for _, h := range m.Headers {
			if h.Key == correlationHeader {
				cid = string(h.Value)
				break
			}
		}
		r.mu.Lock()
		ch := r.waiting[cid]
		delete(r.waiting, cid)
		r.mu.Unlock()
		if ch != nil {
			ch <- m.Value // buffered; one reply per id
		}
	}
}

func (r *rawRR) close() {
	close(r.stop)
	<-r.done
	_ = r.cons.Close()
	r.prod.Close()
}

func (r *rawRR) side() rrSide { return rrSide{name: "raw librdkafka", do: r.roundTrip} }

// roundTrip produces worker i's request with a fresh correlation id and
// waits for its delivery report and its reply.
func (r *rawRR) roundTrip(ctx context.Context, i int) error {
	req := r.reqs[i%len(r.reqs)]
	w := &r.workers[i%len(r.workers)]
	// Left over from a round trip abandoned on its context: not ours.
	select {
	case <-w.delivery:
	default:
	}
	cid := r.prefix + strconv.FormatUint(r.seq.Add(1), 10)
	topic, path := requestsTopic, req.path
	m := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            []byte(req.id), Value: req.body,
		Headers: []kafka.Header{
			{Key: ":method", Value: []byte("POST")}, {Key: ":path", Value: []byte(path)},
			{Key: "content-type", Value: []byte("application/json")},
			{Key: replyToHeader, Value: []byte(rawRepliesTopic)}, {Key: correlationHeader, Value: []byte(cid)},
		},
	}
	if r.headers != nil {
		m.Headers = withHeaders(r.headers, path, rawRepliesTopic, cid)
	}
	r.mu.Lock()
	r.waiting[cid] = w.reply
	r.mu.Unlock()
	forget := func() {
		r.mu.Lock()
		delete(r.waiting, cid)
		r.mu.Unlock()
	}
	if err := r.prod.Produce(m, w.delivery); err != nil {
		forget()
		return fmt.Errorf("producing a request: %w", err)
	}
	select {
	case ev := <-w.delivery:
		if dm, ok := ev.(*kafka.Message); !ok || dm.TopicPartition.Error != nil {
			forget()
			return fmt.Errorf("producing a request: %v", ev)
		}
	case <-ctx.Done():
		forget()
		return fmt.Errorf("waiting for the delivery report: %w", ctx.Err())
	}
	select {
	case v := <-w.reply:
		if !bytes.Equal(v, req.want) {
			return fmt.Errorf("reply %q, want the responder's %q", v, req.want)
		}
		return nil
	case <-ctx.Done():
		forget()
		return fmt.Errorf("waiting for the reply: %w", ctx.Err())
	}
}
