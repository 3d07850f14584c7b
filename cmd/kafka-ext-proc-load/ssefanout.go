package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc/experimental"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/bufpool"
)

// SSE fan-out: N Server-Sent Events clients of one sse-kafka route
// (GET /bench/events, accept: text/event-stream, through the emulator
// client as Envoy sends them), beside N gRPC fetch streams of the Fanout
// route in the same run, with the same N, write rate, duration and record
// size. The legs run one after the other (gRPC first), each on a topic of
// its own, so neither's clients load the other's figures:
//
//   - memory per client: the live heap, goroutine stacks and resident set
//     with the N clients open minus before them, divided by N (with -split,
//     also of the server process alone);
//   - fan-out lag: record produced (the produce call) → received by each
//     client, over every record of every client;
//   - one client's resume, with the N clients open: it disconnects,
//     resumeMissed records are written (and reach the N), and it
//     reconnects with the id of the last record it had (last-event-id;
//     for gRPC last-message-id): the time from the reconnect to the first
//     missed record, and the server's CPU time and allocations from the
//     reconnect until it had every missed record.
//
// An SSE record is text, since an event's data cannot hold every byte: the
// sequence number (16 hex digits), a space, the produce-call time (Unix
// nanoseconds, 19 digits), a space, padding to -record-size. The clients
// read only the data lines, at fixed offsets.

const (
	ssePath         = "/bench/events"
	sseTopic        = "bench-sse"
	sseStreamsGauge = "kafka_ext_proc_sse_streams"
	// resumeMissed is how many records a resuming client misses.
	resumeMissed = 10
	// sseHead is the fixed head of an SSE record's text.
	sseHead = 16 + 1 + 19 + 1
	// grpcReliabilityTag is the key of the reliability field (the
	// default, 32767, length-delimited) after a fan-out message's value.
	grpcReliabilityTag = 32767<<3 | 2
)

// sseValue is SSE record seq of size bytes; stampSSE fills in the time.
func sseValue(seq uint64, size int) []byte {
	v := make([]byte, 0, max(size, sseHead))
	v = fmt.Appendf(v, "%016x %019d ", seq, 0)
	for len(v) < size {
		v = append(v, 'x')
	}
	return v
}

// stampSSE writes ns in the 19 digits after the sequence number.
func stampSSE(v []byte, ns int64) {
	for i := 35; i >= 17; i-- {
		v[i] = byte('0' + ns%10)
		ns /= 10
	}
}

func stampGRPC(v []byte, ns int64) { binary.LittleEndian.PutUint64(v[10:18], uint64(ns)) }

// readSSEValue reads the head of an SSE record into the binary head
// tally.record reads.
func readSSEValue(v []byte, head *[recordHead]byte) bool {
	if len(v) < sseHead || v[16] != ' ' || v[36] != ' ' {
		return false
	}
	// By hand: the clients read N × rate of these a second.
	var seq uint64
	for _, c := range v[:16] {
		switch {
		case c >= '0' && c <= '9':
			seq = seq<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			seq = seq<<4 | uint64(c-'a'+10)
		default:
			return false
		}
	}
	var ns int64
	for _, c := range v[17:36] {
		if c < '0' || c > '9' {
			return false
		}
		ns = ns*10 + int64(c-'0')
	}
	head[0], head[9] = 1<<3|1, 2<<3|1
	binary.LittleEndian.PutUint64(head[1:9], seq)
	binary.LittleEndian.PutUint64(head[10:18], uint64(ns))
	return true
}

// fanLeg is one side of the comparison.
type fanLeg struct {
	name   string // "grpc" or "sse", the prefix of its figures
	topic  string
	gauge  string // the processor's gauge of the leg's open streams
	value  func(seq uint64, size int) []byte
	stamp  func(v []byte, ns int64)
	client func(ctx context.Context, c *emulator.Client, s *fanStream)
	// resume opens the resuming client after id ("" : afresh); each record
	// it reads goes to got.
	resume func(ctx context.Context, c *emulator.Client, id string, got func(resumed)) error
}

// resumed is one record as the resuming client received it.
type resumed struct {
	seq uint64
	at  time.Time
	id  string
}

func grpcLeg(o *options) fanLeg {
	return fanLeg{
		name: "grpc", topic: fanoutTopic, gauge: streamsGauge, value: fanoutValue, stamp: stampGRPC,
		client: func(ctx context.Context, c *emulator.Client, s *fanStream) {
			s.run(ctx, c, newRequestWith(c, "POST", fanoutPath, false, "content-type", "application/grpc", "te", "trailers"))
		},
		resume: func(ctx context.Context, c *emulator.Client, id string, got func(resumed)) error {
			hdr := []string{"content-type", "application/grpc", "te", "trailers"}
			if id != "" {
				hdr = append(hdr, "last-message-id", id)
			}
			return readGRPCStream(ctx, c, newRequestWith(c, "POST", fanoutPath, false, hdr...), o.recordSize, got)
		},
	}
}

func sseLeg() fanLeg {
	return fanLeg{
		name: "sse", topic: sseTopic, gauge: sseStreamsGauge, value: sseValue, stamp: stampSSE,
		client: func(ctx context.Context, c *emulator.Client, s *fanStream) {
			s.runSSE(ctx, c, newRequest(c, ssePath, "accept", eventStreamType))
		},
		resume: func(ctx context.Context, c *emulator.Client, id string, got func(resumed)) error {
			hdr := []string{"accept", eventStreamType}
			if id != "" {
				hdr = append(hdr, "last-event-id", id)
			}
			return readSSEStream(ctx, c, newRequest(c, ssePath, hdr...), func(value []byte, id string, at time.Time) {
				var head [recordHead]byte
				if readSSEValue(value, &head) {
					seq, _, _ := readRecord(head[:])
					got(resumed{seq: seq, at: at, id: id})
				}
			})
		},
	}
}

const eventStreamType = "text/event-stream"

// runSSE is fanStream.run for an event stream: it reads the data lines
// until ctx ends and tallies each record.
func (s *fanStream) runSSE(ctx context.Context, c *emulator.Client, req emulator.Request) {
	readyOnce := sync.OnceFunc(func() { close(s.ready) })
	defer readyOnce()
	var head [recordHead]byte
	err := readEvents(ctx, c, req, readyOnce, func(line []byte, now int64) {
		if v, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			if !readSSEValue(v, &head) {
				s.t.bad++
				return
			}
			s.t.record(head[:], now)
		}
	})
	if err != nil && ctx.Err() == nil {
		s.fail(err)
	}
}

// readEvents reads an event stream's lines (without their line feed) until
// ctx ends or the stream does; ready is called on its 200 headers.
func readEvents(ctx context.Context, c *emulator.Client, req emulator.Request, ready func(), line func(l []byte, now int64)) error {
	x := c.Start(ctx, req)
	defer x.Close()
	var carry []byte
	for {
		a, err := x.Next(ctx)
		if err != nil {
			return err
		}
		switch a.Kind {
		case emulator.ActionHeaders:
			if ct, _ := a.Headers.Get("content-type"); a.Status != 200 || a.EndOfStream || ct != eventStreamType {
				return fmt.Errorf("response headers %d %s (end of stream %v)", a.Status, ct, a.EndOfStream)
			}
			ready()
			continue
		case emulator.ActionBody:
		default:
			return fmt.Errorf("the stream ended: %s %d %s %s", a.Kind, a.Reply.Status, a.Reply.Body, a.Details)
		}
		now := time.Now().UnixNano()
		data := a.Body
		if len(carry) > 0 {
			data = append(carry, data...)
			carry = nil
		}
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			line(data[:i], now)
			data = data[i+1:]
		}
		if len(data) > 0 {
			carry = append([]byte(nil), data...) // a line split across chunks
		}
		if a.EndOfStream {
			return errors.New("the event stream ended")
		}
	}
}

// readSSEStream reads an event stream, handing on each event's data with
// its id (the id line comes before the data lines).
func readSSEStream(ctx context.Context, c *emulator.Client, req emulator.Request, got func(value []byte, id string, at time.Time)) error {
	var id string
	return readEvents(ctx, c, req, func() {}, func(l []byte, now int64) {
		switch {
		case bytes.HasPrefix(l, []byte("id: ")):
			id = string(l[4:])
		case bytes.HasPrefix(l, []byte("data: ")):
			got(l[6:], id, time.Unix(0, now))
		}
	})
}

// readGRPCStream reads a fan-out stream, handing on each message's
// sequence number and the reliability field's bytes (base64, as
// last-message-id takes them).
func readGRPCStream(ctx context.Context, c *emulator.Client, req emulator.Request, valueLen int, got func(resumed)) error {
	x := c.Start(ctx, req)
	defer x.Close()
	if err := x.Body([]byte{0, 0, 0, 0, 0}, true); err != nil {
		return err
	}
	var carry []byte
	for {
		a, err := x.Next(ctx)
		if err != nil {
			return err
		}
		switch a.Kind {
		case emulator.ActionHeaders:
			if a.Status != 200 || a.EndOfStream {
				return fmt.Errorf("response headers %d (end of stream %v)", a.Status, a.EndOfStream)
			}
			continue
		case emulator.ActionBody:
		default:
			st, _ := a.Headers.Get("grpc-status")
			return fmt.Errorf("the stream ended: %s %s %d %s", a.Kind, st, a.Reply.Status, a.Details)
		}
		at := time.Now()
		data := append(carry, a.Body...)
		carry = nil
		for len(data) >= 5 {
			n := int(binary.BigEndian.Uint32(data[1:5]))
			if len(data) < 5+n {
				break
			}
			msg := data[5 : 5+n]
			data = data[5+n:]
			seq, _, ok := readRecord(msg)
			id, idOK := reliabilityField(msg, valueLen)
			if !ok || !idOK {
				return fmt.Errorf("an unreadable message of %d bytes", len(msg))
			}
			got(resumed{seq: seq, at: at, id: base64.StdEncoding.EncodeToString(id)})
		}
		carry = append([]byte(nil), data...)
	}
}

// reliabilityField is the reliability field after a message's value.
func reliabilityField(msg []byte, valueLen int) ([]byte, bool) {
	if len(msg) < valueLen {
		return nil, false
	}
	rest := msg[valueLen:]
	tag, k := binary.Uvarint(rest)
	if k <= 0 || tag != grpcReliabilityTag {
		return nil, false
	}
	rest = rest[k:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || uint64(len(rest)-k) < n {
		return nil, false
	}
	return rest[k : k+int(n)], true
}

// perClient is memory per open client: held minus before, divided by N.
type perClient struct {
	Heap       float64 `json:"heap_bytes_per_client"`
	Stacks     float64 `json:"stack_bytes_per_client"`
	RSS        float64 `json:"rss_bytes_per_client"`
	Goroutines float64 `json:"goroutines_per_client"`
}

func perClientOf(before, after memory, n int) perClient {
	d := func(a, b uint64) float64 { return float64(int64(a)-int64(b)) / float64(n) }
	return perClient{Heap: d(after.Heap, before.Heap), Stacks: d(after.Stacks, before.Stacks),
		RSS: d(after.RSS, before.RSS), Goroutines: d(after.Goroutines, before.Goroutines)}
}

// resumeFigures are one leg's resumes.
type resumeFigures struct {
	Resumes int `json:"resumes"`
	// From the reconnect to the first missed record, and to the last.
	FirstP50Ms float64 `json:"first_p50_ms"`
	FirstMaxMs float64 `json:"first_max_ms"`
	AllP50Ms   float64 `json:"all_p50_ms"`
	// The server process (-split; else this whole process) per resume,
	// from the reconnect until every missed record arrived.
	Cost perRequest `json:"cost"`
	// Whose cost that is: "server" (-split) or "all".
	of string
}

// legFigures are one leg's measurements.
type legFigures struct {
	Clients         int        `json:"clients"`
	RegisterSeconds float64    `json:"register_seconds"`
	Deliveries      deliveries `json:"fanout"`
	Lag             latency    `json:"lag"`
	WrittenPerS     float64    `json:"written_per_s"`
	// Memory per client: this process (in-process: servers and clients),
	// and the server process alone (-split).
	Mem       perClient  `json:"mem"`
	ServerMem *perClient `json:"server_mem,omitempty"`
	// CPU and allocations per delivered record, from the first write to
	// the last delivery: every process, and the server alone (-split).
	AllPerRecord    perRequest    `json:"all_per_record"`
	ServerPerRecord *perRequest   `json:"server_per_record,omitempty"`
	Resume          resumeFigures `json:"resume"`
}

// runSSEFanout runs the gRPC leg, then the SSE leg, and compares them.
func runSSEFanout(ctx context.Context, e *env, o *options) (*Result, error) {
	n := uint64(o.fanRate) * uint64(o.fanDuration/time.Millisecond) / 1000
	if n == 0 {
		return nil, fmt.Errorf("-rate %d for -fanout-duration %v writes no record", o.fanRate, o.fanDuration)
	}
	if o.recordSize < sseHead {
		return nil, fmt.Errorf("-record-size %d: an SSE record's head takes %d bytes", o.recordSize, sseHead)
	}
	res := newResult(scenarioSSEFanout, e.split)
	res.param("clients", o.sseClients)
	res.param("conns", o.conns)
	res.param("target_records_per_s", o.fanRate)
	res.param("write_seconds_planned", o.fanDuration.Seconds())
	res.param("record_bytes", o.recordSize)
	res.param("resumes", o.resumes)
	if la := loadAverage(); la != "" {
		res.param("load_average_at_start", la)
	}
	if err := e.srv.moreRoutes(ctx); err != nil {
		return nil, err
	}
	// The first leg's resident set grows; the second reuses the pages the
	// first left (Go returns them to the system slowly), so only the first
	// leg's RSS figure is the whole cost: -sse-first swaps them.
	order := []fanLeg{grpcLeg(o), sseLeg()}
	if o.sseFirst {
		order[0], order[1] = order[1], order[0]
	}
	res.param("first_leg", order[0].name)
	legs := map[string]legFigures{}
	for _, lg := range order {
		f, err := runLeg(ctx, e, o, lg, n)
		if err != nil {
			return nil, fmt.Errorf("the %s leg: %w", lg.name, err)
		}
		legs[lg.name] = f
		res.figures(lg.name, f)
	}
	g, s := legs["grpc"], legs["sse"]
	res.ratio("lag_p99_ratio", ratio(s.Lag.P99Ms, g.Lag.P99Ms), "p99 fan-out lag, SSE ÷ gRPC", "")
	res.ratio("lag_p50_ratio", ratio(s.Lag.P50Ms, g.Lag.P50Ms), "median fan-out lag, SSE ÷ gRPC", "")
	mem, gmem, smem := "this process", g.Mem, s.Mem
	if g.ServerMem != nil && s.ServerMem != nil {
		mem, gmem, smem = "the server process", *g.ServerMem, *s.ServerMem
	}
	res.ratio("heap_per_client_ratio", ratio(smem.Heap+smem.Stacks, gmem.Heap+gmem.Stacks), "heap + stacks per client of "+mem+", SSE ÷ gRPC", "")
	res.ratio("cpu_per_record_ratio", ratio(s.AllPerRecord.CPUus, g.AllPerRecord.CPUus), "CPU per delivered record, every process, SSE ÷ gRPC", "")
	res.ratio("resume_first_ratio", ratio(s.Resume.FirstP50Ms, g.Resume.FirstP50Ms), "median reconnect → first missed record, SSE ÷ gRPC", "")
	res.ratio("resume_cpu_ratio", ratio(s.Resume.Cost.CPUus, g.Resume.Cost.CPUus), "CPU per resume ("+s.Resume.of+"), SSE ÷ gRPC", "")
	return res, nil
}

// legRun is a leg's clients and writer while it runs.
type legRun struct {
	e       *env
	o       *options
	lg      fanLeg
	w       *fanoutWriter
	next    uint64 // the next record's sequence number
	streams []*fanStream
}

// runLeg opens the leg's N clients, measures their memory, writes n
// records at the rate and tallies them, measures the resumes, and closes
// the clients.
func runLeg(ctx context.Context, e *env, o *options, lg fanLeg, n uint64) (legFigures, error) {
	f := legFigures{Clients: o.sseClients}
	total := n + 1 + uint64(o.resumes)*resumeMissed
	w, err := newFanoutWriter(e.srv.brokerAddr())
	if err != nil {
		return f, err
	}
	defer w.close()
	side, err := e.dial("processor ("+lg.name+" fan-out)", e.srv.processorAddr(), o.conns, experimental.WithBufferPool(&bufpool.Pool{}))
	if err != nil {
		return f, err
	}
	defer side.close()
	r := &legRun{e: e, o: o, lg: lg, w: w, streams: make([]*fanStream, o.sseClients)}
	for i := range r.streams {
		r.streams[i] = &fanStream{t: newTally(total), ready: make(chan struct{})}
	}
	srvBefore, split, err := e.srv.memory(ctx, "")
	if err != nil {
		return f, err
	}
	before := sampleMemory()

	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	start := time.Now()
	for i, s := range r.streams {
		c := side.client(i)
		wg.Go(func() { lg.client(sctx, c, s) })
	}
	if err := awaitOpen(ctx, e, o, r.streams, lg.gauge, o.sseClients); err != nil {
		return f, err
	}
	f.RegisterSeconds = time.Since(start).Seconds()
	f.Mem = perClientOf(before, sampleMemory(), o.sseClients)
	if split {
		srvHeld, _, err := e.srv.memory(ctx, "")
		if err != nil {
			return f, err
		}
		m := perClientOf(srvBefore, srvHeld, o.sseClients)
		f.ServerMem = &m
	}
	if err := r.fanout(ctx, n, &f); err != nil {
		return f, err
	}
	if f.Resume, err = r.resumes(ctx, side.client(o.sseClients), split); err != nil {
		return f, err
	}
	stop()
	wg.Wait()
	// The next leg's baseline without this one's streams.
	return f, awaitStreamGauge(ctx, e, lg.gauge, 0, o.register)
}

// fanout writes n records at the rate and waits until every client had
// them all.
func (r *legRun) fanout(ctx context.Context, n uint64, f *legFigures) error {
	srvBefore, split, err := r.e.srv.usage(ctx, true)
	if err != nil {
		return err
	}
	before := sampleUsage(true)
	t0 := time.Now()
	if err := r.write(ctx, n, r.o.fanRate); err != nil {
		return err
	}
	f.WrittenPerS = float64(n) / time.Since(t0).Seconds()
	if err := awaitCount(ctx, r.streams, int64(n)); err != nil {
		return err
	}
	all := sampleUsage(false).sub(before)
	d := tallyDeliveries(r.streams, int64(n))
	f.Deliveries, f.Lag = d, d.lag.summary()
	if split {
		srvAfter, _, err := r.e.srv.usage(ctx, false)
		if err != nil {
			return err
		}
		srv := srvAfter.sub(srvBefore)
		p := perReq(srv, d.Delivered)
		f.ServerPerRecord = &p
		all = all.add(srv)
	}
	f.AllPerRecord = perReq(all, d.Delivered)
	return nil
}

// write produces n more records at rate records/s (0: as fast as the
// producer takes them) and returns once the broker acknowledged them.
func (r *legRun) write(ctx context.Context, n uint64, rate int) error {
	topic := r.lg.topic
	start := time.Now()
	for i := range n {
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		v := r.lg.value(r.next, r.o.recordSize)
		r.lg.stamp(v, time.Now().UnixNano())
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: v}
		if err := r.w.prod.Produce(m, nil); err != nil {
			return fmt.Errorf("writing record %d: %w", r.next, err)
		}
		r.next++
	}
	for r.w.acked.Load() < int64(r.next) {
		if p := r.w.fail.Load(); p != nil {
			return *p
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("waiting for the acknowledgements: %w", ctx.Err())
		}
	}
	return nil
}

// resumes measures o.resumes resumes of one more client while the N are
// open.
func (r *legRun) resumes(ctx context.Context, c *emulator.Client, split bool) (resumeFigures, error) {
	f := resumeFigures{Resumes: r.o.resumes, of: "all"}
	if split {
		f.of = "server"
	}
	// The client's first stream, afresh: it reads one record, for an id.
	last, err := r.follow(ctx, c, "", 1, nil)
	if err != nil {
		return f, fmt.Errorf("the resuming client's first stream: %w", err)
	}
	var first, all hist
	var cost usage
	for range r.o.resumes {
		// Away: the N clients get records the resuming one misses.
		if err := r.write(ctx, resumeMissed, 0); err != nil {
			return f, err
		}
		if err := awaitCount(ctx, r.streams, int64(r.next)); err != nil {
			return f, err
		}
		u0, _, err := r.e.srv.usage(ctx, false)
		if err != nil {
			return f, err
		}
		own0 := sampleUsage(false)
		t0 := time.Now()
		var firstAt, lastAt time.Time
		last, err = r.follow(ctx, c, last, resumeMissed, func(i int, at time.Time) {
			if i == 0 {
				firstAt = at
			}
			lastAt = at
		})
		if err != nil {
			return f, fmt.Errorf("resuming: %w", err)
		}
		u := sampleUsage(false).sub(own0)
		if split {
			u1, _, err := r.e.srv.usage(ctx, false)
			if err != nil {
				return f, err
			}
			u = u1.sub(u0)
		}
		cost = cost.add(u)
		first.add(firstAt.Sub(t0))
		all.add(lastAt.Sub(t0))
	}
	f.FirstP50Ms, f.FirstMaxMs, f.AllP50Ms = first.quantileMs(50), first.maxMs(), all.quantileMs(50)
	f.Cost = perReq(cost, int64(r.o.resumes))
	return f, nil
}

// follow opens the resuming client's stream after id, reads the next want
// records (which must be the ones after id: the sequence numbers from
// r.next - want), closes it and returns the last one's id.
func (r *legRun) follow(ctx context.Context, c *emulator.Client, id string, want int, each func(i int, at time.Time)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, fanoutDrain)
	defer cancel()
	got := make(chan resumed, want)
	var seen atomic.Int64
	ended := make(chan error, 1)
	// Afresh, the stream starts at the log's start: the records before
	// the ones it waits for are skipped.
	skipBelow := r.next
	go func() {
		ended <- r.lg.resume(ctx, c, id, func(m resumed) {
			if id == "" && m.seq < skipBelow {
				return
			}
			if seen.Add(1) <= int64(want) {
				got <- m
			}
		})
	}()
	defer func() {
		cancel()
		<-ended
	}()
	if id == "" {
		// Write its record once it is open, as the gauge counts it.
		if err := awaitStreamGauge(ctx, r.e, r.lg.gauge, int64(r.o.sseClients)+1, r.o.register); err != nil {
			return "", err
		}
		if err := r.write(ctx, uint64(want), 0); err != nil {
			return "", err
		}
	}
	from := r.next - uint64(want)
	var last string
	for i := range want {
		select {
		case m := <-got:
			if m.seq != from+uint64(i) {
				return "", fmt.Errorf("record %d of the stream after %q is %d, want %d", i, id, m.seq, from+uint64(i))
			}
			if each != nil {
				each(i, m.at)
			}
			last = m.id
		case err := <-ended:
			return "", fmt.Errorf("the stream ended after %d of %d records: %w", i, want, err)
		case <-ctx.Done():
			return "", fmt.Errorf("%d of %d records within %v: %w", i, want, fanoutDrain, ctx.Err())
		}
	}
	return last, nil
}

// awaitOpen waits (bounded by -register-timeout) until every client has
// its response headers and the processor's gauge counts them all open.
func awaitOpen(ctx context.Context, e *env, o *options, streams []*fanStream, gauge string, want int) error {
	deadline := time.NewTimer(o.register)
	defer deadline.Stop()
	for i, s := range streams {
		select {
		case <-s.ready:
			if s.ended.Load() {
				return fmt.Errorf("client %d: %w", i, s.err)
			}
		case <-deadline.C:
			return fmt.Errorf("%d of %d clients had their response headers within %v", i, len(streams), o.register)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return awaitStreamGauge(ctx, e, gauge, int64(want), o.register)
}

// awaitStreamGauge waits, at most bound, until the processor's gauge is want.
func awaitStreamGauge(ctx context.Context, e *env, gauge string, want int64, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := e.srv.gauge(ctx, gauge)
		if err != nil {
			return err
		}
		if got == want {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("the processor counts %d (%s), want %d, after %v", got, gauge, want, bound)
		}
	}
}

// awaitCount waits, at most fanoutDrain, until every client received n
// records; it fails if one ended or missed some.
func awaitCount(ctx context.Context, streams []*fanStream, n int64) error {
	ctx, cancel := context.WithTimeout(ctx, fanoutDrain)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		short := 0
		for i, s := range streams {
			if s.ended.Load() {
				return fmt.Errorf("client %d ended: %w", i, s.err)
			}
			if s.t.got.Load() < n {
				short++
			}
		}
		if short == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d clients had fewer than %d records after %v", short, len(streams), n, fanoutDrain)
		}
	}
}
