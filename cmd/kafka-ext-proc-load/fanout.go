package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc/experimental"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/bufpool"
)

// gRPC fan-out: N streams of the Fanout fetch route on one topic, records
// written at R records/s for D, each record carrying its sequence number and
// the time of its produce call. Every stream must
// receive every record; lag is the receive time minus the produce-call
// time. A raw librdkafka consumer reads the same records in the same run.
//
// The client side is kept cheap, since it decodes N × R records/s on the
// same cores as the server: each stream's response body chunks (as the
// emulator hands them on) are split into gRPC frames by their 5-byte
// prefixes, and each message is read only as far as its first two fields,
// at fixed offsets; nothing is unmarshalled or copied per record.

const (
	fanoutPath = "/bench.Fanout/Subscribe"
	// fanoutDrain bounds the wait, after the last write, for every record
	// to reach every stream.
	fanoutDrain = 60 * time.Second
	// recordHead is the fixed head of a record value: field 1 (fixed64,
	// the sequence number) and field 2 (fixed64, the produce-call time in
	// Unix nanoseconds), a protobuf message any client could read.
	recordHead = 18
	minRecord  = recordHead + 2 // room for the padding field's tag and length
)

// fanoutValue is record seq of size bytes: the head, then field 3 (bytes)
// padding to size. The time is filled in just before the produce call.
func fanoutValue(seq uint64, size int) []byte {
	v := make([]byte, recordHead, size)
	v[0] = 1<<3 | 1 // field 1, fixed64
	binary.LittleEndian.PutUint64(v[1:9], seq)
	v[9] = 2<<3 | 1 // field 2, fixed64
	// Field 3: tag, length, bytes; the length's own size depends on it.
	pad := max(size-recordHead-2, 0)
	for pad > 0 && recordHead+1+uvarintLen(uint64(pad))+pad > size {
		pad--
	}
	v = append(v, 3<<3|2)
	if recordHead+1+uvarintLen(uint64(pad))+pad < size {
		// One byte short (a length of 127 takes one byte, 128 two): the
		// length in two bytes, a varint with a redundant zero group, which
		// protobuf parsers accept.
		v = append(v, byte(pad)|0x80, 0)
	} else {
		v = binary.AppendUvarint(v, uint64(pad))
	}
	for range pad {
		v = append(v, 'x')
	}
	return v
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// readRecord reads the head of a record value (or of a fan-out message,
// which is the value followed by the reliability field).
func readRecord(msg []byte) (seq uint64, producedNs int64, ok bool) {
	if len(msg) < recordHead || msg[0] != 1<<3|1 || msg[9] != 2<<3|1 {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(msg[1:9]), int64(binary.LittleEndian.Uint64(msg[10:18])), true
}

// tally is what one reader (a stream or the raw consumer) received.
type tally struct {
	expect    uint64
	seen      []uint64 // bitset of sequence numbers
	got       atomic.Int64
	dups, bad int64
	lat       hist
}

func newTally(n uint64) *tally {
	return &tally{expect: n, seen: make([]uint64, (n+63)/64)}
}

// record notes one message received at nowNs.
func (t *tally) record(msg []byte, nowNs int64) {
	seq, at, ok := readRecord(msg)
	if !ok || seq >= t.expect {
		t.bad++
		return
	}
	w, b := seq/64, uint64(1)<<(seq%64)
	if t.seen[w]&b != 0 {
		t.dups++
		return
	}
	t.seen[w] |= b
	t.lat.add(time.Duration(nowNs - at))
	t.got.Add(1)
}

// fanStream is one subscriber.
type fanStream struct {
	t     *tally
	ready chan struct{} // closed when the response headers arrived
	ended atomic.Bool   // set after err
	err   error         // why the stream ended before it was closed
}

func (s *fanStream) fail(err error) {
	s.err = err
	s.ended.Store(true)
}

// run opens the stream, reads it until ctx ends, and tallies each record.
func (s *fanStream) run(ctx context.Context, c *emulator.Client, req emulator.Request) {
	x := c.Start(ctx, req)
	defer x.Close()
	readyOnce := sync.OnceFunc(func() { close(s.ready) })
	defer readyOnce()
	// The request: one empty message (google.protobuf.Empty), then the end.
	if err := x.Body([]byte{0, 0, 0, 0, 0}, true); err != nil {
		s.fail(err)
		return
	}
	var carry []byte
	for {
		a, err := x.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.fail(err)
			}
			return
		}
		switch a.Kind {
		case emulator.ActionHeaders:
			if a.Status != 200 || a.EndOfStream {
				s.fail(fmt.Errorf("response headers %d (end of stream %v)", a.Status, a.EndOfStream))
				return
			}
			readyOnce()
			continue
		case emulator.ActionBody:
		case emulator.ActionTrailers:
			st, _ := a.Headers.Get("grpc-status")
			msg, _ := a.Headers.Get("grpc-message")
			s.fail(fmt.Errorf("the stream ended: grpc-status %s %s", st, msg))
			return
		default:
			s.fail(fmt.Errorf("the stream ended: %s %d %s %s", a.Kind, a.Reply.Status, a.Reply.Body, a.Details))
			return
		}
		now := time.Now().UnixNano()
		data := a.Body
		if len(carry) > 0 {
			data = append(carry, data...)
			carry = nil
		}
		for len(data) >= 5 {
			n := int(binary.BigEndian.Uint32(data[1:5]))
			if len(data) < 5+n {
				break
			}
			s.t.record(data[5:5+n], now)
			data = data[5+n:]
		}
		if len(data) > 0 {
			carry = append([]byte(nil), data...) // a frame split across chunks
		}
		if a.EndOfStream {
			s.fail(errors.New("the response body ended without trailers"))
			return
		}
	}
}

// runFanout opens the streams, writes the records and checks that every
// stream received every one of them.
func runFanout(ctx context.Context, e *env, o *options) (*Result, error) {
	n := uint64(o.fanRate) * uint64(o.fanDuration/time.Millisecond) / 1000
	if n == 0 {
		return nil, fmt.Errorf("-rate %d for -fanout-duration %v writes no record", o.fanRate, o.fanDuration)
	}
	res := newResult(scenarioFanout, e.split)
	res.param("conns", o.conns)
	res.param("streams", o.streams)
	res.param("target_records_per_s", o.fanRate)
	res.param("write_seconds_planned", o.fanDuration.Seconds())
	res.param("record_bytes", o.recordSize)

	if err := e.srv.moreRoutes(ctx); err != nil {
		return nil, err
	}
	w, err := newFanoutWriter(e.srv.brokerAddr())
	if err != nil {
		return nil, err
	}
	defer w.close()
	raw, err := startRawTail(e.srv.brokerAddr(), n)
	if err != nil {
		return nil, err
	}
	defer raw.close()

	// The streams, on connections of their own whose buffer pool does not
	// zero (see internal/bufpool): Envoy, which the client stands in for, does
	// not pay gRPC's clearing.
	side, err := e.dial("processor (fan-out)", e.srv.processorAddr(), o.conns, experimental.WithBufferPool(&bufpool.Pool{}))
	if err != nil {
		return nil, err
	}
	defer side.close()
	sctx, stop := context.WithCancel(ctx)
	streams := make([]*fanStream, o.streams)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	start := time.Now()
	for i := range streams {
		c := side.client(i)
		req := newRequestWith(c, "POST", fanoutPath, false, "content-type", "application/grpc", "te", "trailers")
		s := &fanStream{t: newTally(n), ready: make(chan struct{})}
		streams[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(sctx, c, req)
		}()
	}
	if err := awaitStreams(ctx, e, o, streams); err != nil {
		return nil, err
	}
	// Until every stream had its response headers and the processor's
	// stream gauge counted them all.
	res.figure("register_seconds", time.Since(start).Seconds())

	srvBefore, split, err := e.srv.usage(ctx, true)
	if err != nil {
		return nil, err
	}
	before := sampleUsage(true)
	busy0, total0, machineOK := machineTicks()
	t0 := time.Now()
	written, err := w.write(ctx, n, o.fanRate, o.recordSize)
	if err != nil {
		return nil, err
	}
	// The writer's own pace: short of the rate when it cannot keep up.
	writeSeconds := time.Since(t0).Seconds()
	res.figure("written", int64(written))
	res.figure("write_seconds", writeSeconds)
	res.figure("written_per_s", float64(written)/writeSeconds)

	awaitDeliveries(ctx, raw, streams, int64(n))
	elapsed := time.Since(t0)
	all := sampleUsage(false).sub(before)
	machineCores := 0.0
	if busy1, total1, ok := machineTicks(); ok && machineOK && total1 > total0 {
		machineCores = float64(busy1-busy0) / float64(total1-total0) * float64(runtime.NumCPU())
	}
	srvAfter, _, err := e.srv.usage(ctx, false)
	if err != nil {
		return nil, err
	}
	stop()
	wg.Wait()
	raw.close()

	d := tallyDeliveries(streams, int64(n))
	switch {
	case d.broken > 0:
		return nil, fmt.Errorf("%d of %d streams ended before they were closed; first: %w", d.broken, len(streams), d.firstErr)
	case d.dups > 0 || d.bad > 0:
		return nil, fmt.Errorf("the streams received %d duplicate and %d unreadable records", d.dups, d.bad)
	case d.Complete < len(streams):
		return nil, fmt.Errorf("%d of %d streams missed records within %v of the last write: delivered %d to %d of %d per stream (lag so far p50 %.1f ms, p99 %.1f ms)",
			len(streams)-d.Complete, len(streams), fanoutDrain, d.Min, d.Max, n, d.lag.quantileMs(50), d.lag.quantileMs(99))
	case raw.t.got.Load() != int64(n) || raw.t.dups > 0 || raw.t.bad > 0:
		return nil, fmt.Errorf("the raw consumer received %d of %d records (%d duplicates, %d unreadable)", raw.t.got.Load(), n, raw.t.dups, raw.t.bad)
	}
	// Per stream every written record, once; lag is receive time −
	// produce-call time over every record of every stream, and raw_lag the
	// same for one librdkafka consumer of the topic in the client process.
	res.figures("", d)
	res.figure("delivered_per_s", float64(d.Delivered)/elapsed.Seconds())
	lag, rawLag := d.lag.summary(), raw.t.lat.summary()
	res.figures("lag", lag)
	res.target("lag_p99_ms", "≤ 500")
	res.figures("raw_lag", rawLag)
	// Cores (CPU seconds per second) from the first write to the last
	// delivery: the client process (clients, writer, raw consumer;
	// in-process also the servers), the server process (-split) and the
	// whole machine (every tenant; Linux only), of machine_cpus.
	res.figure("client_cores", all.CPU.Seconds()/elapsed.Seconds())
	if split {
		srv := srvAfter.sub(srvBefore)
		res.figure("server_cores", srv.CPU.Seconds()/elapsed.Seconds())
		res.figures("server_per_record", perReq(srv, d.Delivered))
		all = all.add(srv)
	}
	if machineCores > 0 {
		res.figure("machine_cores", machineCores)
	}
	res.figure("machine_cpus", runtime.NumCPU())
	// Per delivered record (stream × record), every process.
	res.figures("all_per_record", perReq(all, d.Delivered))
	res.ratio("lag_p50_ratio", ratio(lag.P50Ms, rawLag.P50Ms), "median lag, the streams ÷ a raw librdkafka consumer", "")
	res.ratio("lag_p99_ratio", ratio(lag.P99Ms, rawLag.P99Ms), "p99 lag, the streams ÷ a raw librdkafka consumer", "")
	return res, nil
}

// awaitDeliveries waits, at most fanoutDrain, until the raw consumer and
// every stream still open received all n records.
func awaitDeliveries(ctx context.Context, raw *rawTail, streams []*fanStream, n int64) {
	ctx, cancel := context.WithTimeout(ctx, fanoutDrain)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		done := raw.t.got.Load() == n
		for _, s := range streams {
			if s.t.got.Load() < n && !s.ended.Load() {
				done = false
				break
			}
		}
		if done {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// deliveries is what the streams received, of n records each.
type deliveries struct {
	Delivered        int64   `json:"delivered"` // over every stream
	Min              int64   `json:"delivered_min_per_stream"`
	Max              int64   `json:"delivered_max_per_stream"`
	Complete         int     `json:"streams_complete"`
	WorstStreamP99Ms float64 `json:"worst_stream_p99_ms"`

	lag       hist // every record of every stream
	broken    int  // streams that ended before they were closed
	firstErr  error
	dups, bad int64
}

func tallyDeliveries(streams []*fanStream, n int64) deliveries {
	d := deliveries{Min: n}
	for _, s := range streams {
		got := s.t.got.Load()
		d.Delivered += got
		d.Min = min(d.Min, got)
		d.Max = max(d.Max, got)
		if got == n {
			d.Complete++
		}
		if s.err != nil {
			d.broken++
			if d.firstErr == nil {
				d.firstErr = s.err
			}
		}
		d.dups += s.t.dups
		d.bad += s.t.bad
		d.lag.merge(&s.t.lat)
		d.WorstStreamP99Ms = max(d.WorstStreamP99Ms, s.t.lat.quantileMs(99))
	}
	return d
}

// awaitStreams waits (bounded by -register-timeout) until every stream has
// its response headers and the processor counts them all open.
func awaitStreams(ctx context.Context, e *env, o *options, streams []*fanStream) error {
	deadline := time.NewTimer(o.register)
	defer deadline.Stop()
	for i, s := range streams {
		select {
		case <-s.ready:
			if s.ended.Load() {
				return fmt.Errorf("stream %d: %w", i, s.err)
			}
		case <-deadline.C:
			return fmt.Errorf("%d of %d streams had their response headers within %v", i, len(streams), o.register)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := e.srv.gauge(ctx, streamsGauge)
		if err != nil {
			return err
		}
		if got >= int64(len(streams)) {
			return nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return fmt.Errorf("the processor counts %d of %d streams open (%s) after %v", got, len(streams), streamsGauge, o.register)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fanoutWriter writes the records: a librdkafka producer with the
// processor's producer settings for acks leader_only.
type fanoutWriter struct {
	prod  *kafka.Producer
	acked atomic.Int64
	fail  atomic.Pointer[error]
	done  chan struct{}
}

func newFanoutWriter(broker string) (*fanoutWriter, error) {
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": broker, "allow.auto.create.topics": false, "log_level": 3,
		"acks": "1", "max.in.flight.requests.per.connection": 1, "linger.ms": 1,
		"go.delivery.report.fields": "none",
	})
	if err != nil {
		return nil, fmt.Errorf("the fan-out writer: %w", err)
	}
	w := &fanoutWriter{prod: p, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range p.Events() {
			if m, ok := ev.(*kafka.Message); ok {
				if m.TopicPartition.Error != nil {
					err := fmt.Errorf("writing a record: %w", m.TopicPartition.Error)
					w.fail.CompareAndSwap(nil, &err)
				} else {
					w.acked.Add(1)
				}
			}
		}
	}()
	return w, nil
}

// write produces n records at rate records/s, each stamped with the time
// of its produce call, and returns once the broker acknowledged them all.
func (w *fanoutWriter) write(ctx context.Context, n uint64, rate, size int) (uint64, error) {
	topic := fanoutTopic
	period := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * period)); d > 0 {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			return i, ctx.Err()
		}
		v := fanoutValue(i, size)
		binary.LittleEndian.PutUint64(v[10:18], uint64(time.Now().UnixNano()))
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: v}
		if err := w.prod.Produce(m, nil); err != nil {
			return i, fmt.Errorf("writing record %d: %w", i, err)
		}
	}
	for w.acked.Load() < int64(n) {
		if p := w.fail.Load(); p != nil {
			return n, *p
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return n, fmt.Errorf("waiting for the acknowledgements: %w", ctx.Err())
		}
	}
	return n, nil
}

func (w *fanoutWriter) close() {
	w.prod.Close() // closes Events
	<-w.done
}

// rawTail is the baseline: one librdkafka consumer, with the processor's
// consumer settings, assigned the fan-out topic from its end.
type rawTail struct {
	cons *kafka.Consumer
	t    *tally
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func startRawTail(broker string, n uint64) (*rawTail, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": broker, "allow.auto.create.topics": false, "log_level": 3,
		"group.id": "kafka-ext-proc-load-raw-tail", "enable.auto.commit": false, "enable.auto.offset.store": false,
		"auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
	})
	if err != nil {
		return nil, fmt.Errorf("the raw consumer: %w", err)
	}
	if err := assignFromEnd(c, fanoutTopic); err != nil {
		_ = c.Close()
		return nil, err
	}
	r := &rawTail{cons: c, t: newTally(n), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			select {
			case <-r.stop:
				return
			default:
			}
			if m, ok := c.Poll(100).(*kafka.Message); ok && m.TopicPartition.Error == nil {
				r.t.record(m.Value, time.Now().UnixNano())
			}
		}
	}()
	return r, nil
}

func (r *rawTail) close() {
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		_ = r.cons.Close()
	})
}
