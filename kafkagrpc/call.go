package kafkagrpc

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/produce"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// inbox holds a call's request messages as the loop reads them. It keeps
// every message, not only the unsent ones: an attempt that fails before
// the service answered anything is retried from the first message.
type inbox struct {
	mu     sync.Mutex
	msgs   [][]byte
	closed bool          // the end record (the client's half-close) was read
	notify chan struct{} // capacity 1: something was added
}

func newInbox() *inbox { return &inbox{notify: make(chan struct{}, 1)} }

func (b *inbox) push(msg []byte, end bool) {
	b.mu.Lock()
	if end {
		b.closed = true
	} else {
		b.msgs = append(b.msgs, msg)
	}
	b.mu.Unlock()
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// next waits for message i, or reports the half-close (ok false) once
// every message before it was taken.
func (b *inbox) next(ctx context.Context, i int) (msg []byte, ok bool, err error) {
	for {
		b.mu.Lock()
		if i < len(b.msgs) {
			msg = b.msgs[i]
			b.mu.Unlock()
			return msg, true, nil
		}
		closed := b.closed
		b.mu.Unlock()
		if closed {
			return nil, false, nil
		}
		select {
		case <-b.notify:
		case <-ctx.Done():
			return nil, false, context.Cause(ctx)
		}
	}
}

// call is one gRPC call: the records of one correlation id up to its end
// record. The loop owns its fields but in and the goroutine's state.
type call struct {
	cid     string
	part    part
	service string
	method  string
	replyTo string
	route   *config.KafkaGRPCRoute // nil: no route, answered UNIMPLEMENTED
	meta    metadata.MD
	in      *inbox
	ctx     context.Context
	cancel  context.CancelCauseFunc
	silence *time.Timer   // the call's watchdog: no request and no reply for Silence
	key     string        // the record key of its first record
	keyUse  string        // its idempotency key's use (fingerprint header), "" without one
	keyName string        // its idempotency key as the caller sent it, for the refusal
	admit   chan struct{} // closed by the loop when the call may go ahead (admit.go)

	// Loop-owned.
	recs         []int64         // offsets of its records on part
	fingerprints map[string]bool // of records seen: a record written twice is sent once
	ended        bool            // answered: later records are done at once
	sawEnd       bool
	endedAt      time.Time
	admitted     bool  // holds a place of its partition (admit.go)
	after        *call // the call of the same key before it, until admitted
}

// errSilent ends a call no request record or reply kept alive.
var errSilent = errors.New("no request record and no reply within limits.reply-timeout")

// errAbandoned ends a call whose partition moved to another replica.
var errAbandoned = errors.New("the request partition was revoked: its next owner answers the call")

// outcome is what a call's goroutine reports to the loop.
type outcome struct {
	c *call
	// acked: every reply record, the end record included, was
	// acknowledged, so the call's records may be committed.
	acked bool
}

// run answers the call: it calls the service (or refuses the method), writes
// each response message as a reply record and the status as the end
// record, then reports to the loop.
func (w *Worker) run(c *call) {
	defer c.cancel(nil)
	defer c.silence.Stop()
	w.await(c)
	if w.answered(c) {
		w.counts.replayed.Add(1)
		w.settleLater(c, true)
		return
	}
	st, trailer, sent, err := w.answer(c)
	if err == nil && !errors.Is(context.Cause(c.ctx), errAbandoned) {
		err = w.end(c, st, trailer, sent)
	}
	switch {
	case errors.Is(context.Cause(c.ctx), errAbandoned):
		w.log.Info("call abandoned: its partition was revoked", "correlation_id", c.cid, "topic", c.part.topic)
	case err != nil:
		// The records stay uncommitted: the call is made again after a
		// restart or a rebalance (at least once towards the service).
		w.counts.failed.Add(1)
		w.log.Error("reply not acknowledged; the request stays uncommitted", "correlation_id", c.cid, "err", err)
	default:
		w.counts.answered.Add(1)
	}
	w.settleLater(c, err == nil && !errors.Is(context.Cause(c.ctx), errAbandoned))
}

// answer answers a call not answered before: refused when its idempotency
// key names another request, UNIMPLEMENTED without a route, else by the
// service.
func (w *Worker) answer(c *call) (*status.Status, metadata.MD, []produce.Sending, error) {
	if st := w.keyReused(c); st != nil {
		w.counts.keyReused.Add(1)
		return st, nil, nil, nil
	}
	if c.route == nil {
		w.counts.unimplemented.Add(1)
		return status.Newf(codes.Unimplemented, "kafka-grpc binding %q has no route for %s/%s on topic %s",
			w.opts.Binding.Name, c.service, c.method, c.part.topic), nil, nil, nil
	}
	release := w.slot(c)
	defer release()
	return w.invoke(c)
}

// await waits until the loop admits the call (admit.go); a call whose
// context ends meanwhile goes on, to end at once with its cause.
func (w *Worker) await(c *call) {
	select {
	case <-c.admit:
		return
	default:
	}
	w.waiting.Add(1)
	defer w.waiting.Add(-1)
	select {
	case <-c.admit:
	case <-c.ctx.Done():
	}
}

// slot waits for one of the Options.MaxCalls slots; a call whose context
// ends meanwhile goes on without one, to fail at once with its cause.
func (w *Worker) slot(c *call) (release func()) {
	w.waiting.Add(1)
	defer w.waiting.Add(-1)
	select {
	case w.slots <- struct{}{}:
		return func() { <-w.slots }
	case <-c.ctx.Done():
		return func() {}
	}
}

// settleLater hands the call's outcome to the loop.
func (w *Worker) settleLater(c *call, acked bool) {
	select {
	case w.outcomes <- outcome{c: c, acked: acked}:
	case <-w.done: // the loop ended: nobody settles it
	}
}

// answered reports whether the reply index holds the call's end record: the
// call was answered before (by this binding, on any replica) and its
// request records are read again. The index is caught up with the reply
// topic as it was when indexing began; an end record written just before
// the records were read again may not be in it yet, and then the call is
// made again (at least once). A reply the index evicted for its memory
// bound is read back from the reply topic first (the index keeps where it
// lies), within the Kafka timeout; a read that fails, or finds the reply
// removed by the topic's retention, leaves the call to be made again.
func (w *Worker) answered(c *call) bool {
	x := w.opts.Replies
	if x == nil || c.ctx.Err() != nil { // ended while waiting: it fails at once with its cause
		return false
	}
	ctx, cancel := context.WithTimeout(c.ctx, w.opts.KafkaTimeout)
	defer cancel()
	if err := x.WaitCaughtUp(ctx, c.replyTo); err != nil {
		w.log.Warn("reply index not caught up: the call is made without knowing whether it was answered",
			"correlation_id", c.cid, "err", err)
		return false
	}
	watch := x.Watch(c.replyTo, c.cid) // starts reading back an evicted reply
	defer watch.Close()
	for watch.Evicted() && watch.Err() == nil {
		changed := watch.Changed()
		if !watch.Evicted() || watch.Err() != nil {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			w.log.Warn("evicted reply not read back in time: the call is made again", "correlation_id", c.cid, "err", context.Cause(ctx))
			return false
		}
	}
	if err := watch.Err(); err != nil {
		w.log.Warn("evicted reply not read back: the call is made again", "correlation_id", c.cid, "err", err)
		return false
	}
	return watch.Terminal()
}

// end writes the end record once every reply is acknowledged.
func (w *Worker) end(c *call, st *status.Status, trailer metadata.MD, sent []produce.Sending) error {
	ctx := context.WithoutCancel(c.ctx) // a silent call is still answered
	for i := range sent {
		if _, _, err := sent[i].Wait(ctx); err != nil {
			return fmt.Errorf("waiting for reply %d of call %s: %w", i+1, c.cid, err)
		}
	}
	h := w.opts.Binding.Correlation
	headers := []client.Header{{Key: h.CorrelationID, Value: []byte(c.cid)},
		{Key: h.Status, Value: []byte(strconv.Itoa(int(st.Code())))}}
	if st.Message() != "" {
		headers = append(headers, client.Header{Key: h.Message, Value: []byte(st.Message())})
	}
	headers = appendMeta(headers, trailer)
	rec := &client.Record{Topic: c.replyTo, Key: []byte(c.cid), Headers: headers}
	if _, _, err := w.prod.Produce(ctx, rec); err != nil {
		return fmt.Errorf("writing the end record of call %s: %w", c.cid, err)
	}
	return nil
}

// invoke calls the service, retrying an unavailable service with backoff
// while nothing was answered, and returns the call's status and trailers
// and the reply records handed to the producer. err is a reply the
// producer refused.
func (w *Worker) invoke(c *call) (*status.Status, metadata.MD, []produce.Sending, error) {
	r := w.opts.Retry
	delay := r.Backoff
	for attempt := 1; ; attempt++ {
		st, trailer, sent, err := w.attempt(c)
		if err != nil || st.Code() != codes.Unavailable || len(sent) > 0 || c.ctx.Err() != nil {
			return st, trailer, sent, err
		}
		if attempt >= r.Attempts {
			w.counts.unavailable.Add(1)
			return status.Newf(codes.Unavailable, "service %s unavailable after %d attempts: %s",
				c.route.Authority, attempt, st.Message()), trailer, nil, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
		}
		delay = min(2*delay, r.MaxBackoff)
	}
}

// attempt makes one call of the service: the request messages go out as
// they arrive, each response message becomes a reply record.
func (w *Worker) attempt(c *call) (*status.Status, metadata.MD, []produce.Sending, error) {
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(c.ctx, c.meta))
	if d := c.route.Deadline; d > 0 {
		cancel()
		ctx, cancel = context.WithTimeout(metadata.NewOutgoingContext(c.ctx, c.meta), d)
	}
	defer cancel()
	// Every call is opened as bidirectional: without descriptors the worker
	// cannot tell the shapes apart, and on the wire they are the same (a
	// unary call is one message each way).
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	stream, err := w.conns[c.route].NewStream(ctx, desc, "/"+c.service+"/"+c.method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return w.callStatus(c, err), nil, nil, nil
	}
	go w.send(ctx, c, stream)
	var sent []produce.Sending
	for {
		var msg []byte
		err := stream.RecvMsg(&msg)
		if errors.Is(err, io.EOF) {
			return status.New(codes.OK, ""), stream.Trailer(), sent, nil
		}
		if err != nil {
			return w.callStatus(c, err), stream.Trailer(), sent, nil
		}
		c.silence.Reset(w.opts.Silence)
		h := []client.Header{{Key: w.opts.Binding.Correlation.CorrelationID, Value: []byte(c.cid)}}
		if len(sent) == 0 {
			md, _ := stream.Header() // received with the first message
			h = appendMeta(h, md)
		}
		if msg == nil {
			msg = []byte{} // an empty message, not the end of the call
		}
		s, err := w.prod.Send(c.ctx, &client.Record{Topic: c.replyTo, Key: []byte(c.cid), Value: msg, Headers: h})
		if err != nil {
			return nil, nil, sent, fmt.Errorf("writing reply %d of call %s: %w", len(sent)+1, c.cid, err)
		}
		sent = append(sent, s)
	}
}

// send writes the call's request messages to the stream as the loop reads
// them, from the first (a retry sends them all again), and half-closes at
// the end record.
func (w *Worker) send(ctx context.Context, c *call, stream grpc.ClientStream) {
	for i := 0; ; i++ {
		msg, ok, err := c.in.next(ctx, i)
		if err != nil {
			return // the attempt ended
		}
		if !ok {
			_ = stream.CloseSend()
			return
		}
		if err := stream.SendMsg(&msg); err != nil {
			return // the service ended the call: RecvMsg reports why
		}
	}
}

// callStatus is the status a failed attempt ends the call with: the
// service's, or why the worker ended it.
func (w *Worker) callStatus(c *call, err error) *status.Status {
	switch cause := context.Cause(c.ctx); {
	case errors.Is(cause, errSilent):
		return status.New(codes.DeadlineExceeded, cause.Error())
	case errors.Is(cause, errAbandoned):
		return status.New(codes.Canceled, cause.Error())
	case c.ctx.Err() != nil:
		return status.New(codes.Unavailable, "the kafka-grpc worker is shutting down")
	}
	return status.Convert(err)
}

// requestMeta is the call metadata of a request record's meta: headers:
// -bin entries arrive in their base64 form and go out as bytes (grpc-go
// encodes them again). The idempotency key is passed on too: a call made
// again after a crash or a rebalance carries it, so the service can
// recognise the repeat.
func requestMeta(headers []client.Header) metadata.MD {
	md := metadata.MD{}
	for _, h := range headers {
		name, ok := strings.CutPrefix(h.Key, "meta:")
		if !ok || name == "" {
			continue
		}
		v := string(h.Value)
		if strings.HasSuffix(name, "-bin") {
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				v = string(b)
			} else if b, err := base64.RawStdEncoding.DecodeString(v); err == nil {
				v = string(b)
			}
		}
		md.Append(name, v)
	}
	return md
}

// appendMeta adds metadata as meta: headers, -bin values in base64 as the
// grpc-kafka binding writes them.
func appendMeta(h []client.Header, md metadata.MD) []client.Header {
	for name, vs := range md {
		for _, v := range vs {
			if strings.HasSuffix(name, "-bin") {
				v = base64.StdEncoding.EncodeToString([]byte(v))
			}
			h = append(h, client.Header{Key: "meta:" + name, Value: []byte(v)})
		}
	}
	return h
}
