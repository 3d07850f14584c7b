package grpckafka

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/produce"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/writtenids"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// produce answers one call of a produce route, as the package comment
// describes under "Produce calls".
func (h *Handler) produce(ctx context.Context, kr *kafkaroute.Route, call *handler.GRPCCall) handler.Status {
	w := call.Match.Route.With
	opts := grpcOptions(call.Match.Binding)
	h.calls.Add(1)
	defer h.calls.Add(-1)

	refs := kafkaroute.RefsOf(call.Match)
	given, st := idempotencyKey(refs, call.Headers, opts.IdempotencyMetadata)
	if st != nil {
		return *st
	}
	topic, err := kafkaroute.Topic(w, refs.Resolve)
	if err != nil {
		return handler.NewStatus(codes.InvalidArgument, err.Error())
	}
	overrides := make([]client.Header, 0, len(w.Overrides))
	for _, o := range w.Overrides {
		overrides = append(overrides, client.Header{Key: o.Name, Value: []byte(o.Value.Expand(refs.Resolve))})
	}
	var key []byte // nil: no key
	if w.Key != nil {
		key = []byte(w.Key.Expand(refs.Resolve))
	}
	key, st = encodeKey(ctx, kr.Kafka, topic, key)
	if st != nil {
		return *st
	}
	var cid string
	switch {
	case w.ReplyTo != "":
		cid = correlationID(refs.IdempotencyKey, opts.Correlation, call.Service, call.Method, w.ReplyTo, overrides, refs.Identities)
		if w.Key == nil {
			key = []byte(cid)
		}
	case given:
		// A oneway call's records carry a correlation id only when it has
		// an idempotency key: it is how a retry finds them in the log.
		cid = correlationID(refs.IdempotencyKey, opts.Correlation, call.Service, call.Method, "", overrides, refs.Identities)
	}
	if len(key) == 0 {
		compacted, err := h.kafka.Compaction.Compacted(ctx, kr.Cluster, kr.Exit, topic, call.Limits.KafkaTimeout)
		switch {
		case err != nil:
			return topicStatus(err, topic, w.Topic.Static())
		case compacted:
			return handler.NewStatus(codes.InvalidArgument, fmt.Sprintf(
				"topic %q is compacted, so its records need a key, and this call resolves an empty one (the route's with.key)", topic))
		}
	}
	pc := &produceCall{
		h: h, call: call, prod: kr.Producer, topic: topic, static: w.Topic.Static(), key: key,
		limits: call.Limits, corr: opts.Correlation, kafka: kr.Kafka,
		retry: kafkaroute.RetryHint{Name: opts.IdempotencyMetadata + " metadata", Given: given},
	}
	if given {
		use := &kafkaroute.KeyUse{Key: refs.IdempotencyKey, Slot: kafkaroute.KeySlot(refs.IdempotencyKey, refs.Identities), What: whatCall}
		pc.check = newKeyCheck(use, kr.FingerprintHeader, []string{call.Service, call.Method, w.ReplyTo}, overrides, key, call.Headers)
	}
	if w.ReplyTo == "" {
		pc.headers = overrides
		if given {
			pc.headers = append(pc.headers, client.Header{Key: opts.Correlation.CorrelationID, Value: []byte(cid)})
		}
		pc.headers = append(pc.headers, requestMeta(call.Headers)...)
		if given {
			return pc.onewayKeyed(ctx, kr, cid)
		}
		return pc.oneway(ctx)
	}
	c := opts.Correlation
	pc.headers = append(overrides,
		client.Header{Key: c.Service, Value: []byte(call.Service)},
		client.Header{Key: c.Method, Value: []byte(call.Method)},
		client.Header{Key: c.ReplyTo, Value: []byte(w.ReplyTo)},
		client.Header{Key: c.CorrelationID, Value: []byte(cid)},
	)
	pc.headers = append(pc.headers, requestMeta(call.Headers)...)
	return pc.requestReply(ctx, kr, w.ReplyTo, cid, given)
}

// idempotencyKey reads the idempotency metadata into refs, or generates the
// UUID that stands for it.
func idempotencyKey(refs *kafkaroute.Refs, hs route.Headers, name string) (given bool, st *handler.Status) {
	vs := hs.Values(name)
	key, given, err := kafkaroute.IdempotencyKey(vs)
	switch {
	case errors.Is(err, kafkaroute.ErrRepeatedKey):
		s := handler.NewStatus(codes.InvalidArgument, fmt.Sprintf("send one %s, not %d", name, len(vs)))
		return false, &s
	case err != nil:
		s := handler.NewStatus(codes.InvalidArgument, fmt.Sprintf(
			"%s must be 1 to %d characters of A-Z a-z 0-9 . _ ~ - (a UUID will do)", name, kafkaroute.MaxIdempotencyKey))
		return false, &s
	}
	refs.IdempotencyKey = key
	return given, nil
}

// correlationID is `<idempotency key>-<hex md5>` over the service, method
// and reply-to headers (name then value, as the reference digests them), the
// override values, then each guard's identity by guard name.
func correlationID(idem string, names config.CorrelationHeaders, service, method, replyTo string,
	overrides []client.Header, idents map[string]string) string {
	d := md5.New()
	for _, s := range []string{names.Service, service, names.Method, method, names.ReplyTo, replyTo} {
		d.Write([]byte(s))
	}
	for _, o := range overrides {
		d.Write(o.Value)
	}
	guards := make([]string, 0, len(idents))
	for g := range idents {
		guards = append(guards, g)
	}
	slices.Sort(guards)
	for _, g := range guards {
		d.Write([]byte(idents[g]))
	}
	return idem + "-" + hex.EncodeToString(d.Sum(nil))
}

// produceCall is one produce call being answered.
type produceCall struct {
	h       *Handler
	call    *handler.GRPCCall
	prod    *produce.Producer
	topic   string
	static  bool
	key     []byte
	headers []client.Header
	limits  config.Limits
	retry   kafkaroute.RetryHint
	corr    config.CorrelationHeaders // names of the reply's status and message headers
	kafka   *config.KafkaCluster      // the exit's configuration: the topic's models
	check   *keyCheck                 // nil: the call has no idempotency key
}

// record is the record of the message (nil: the end) the key check saw
// last.
func (pc *produceCall) record(value []byte) *client.Record {
	return &client.Record{Topic: pc.topic, Key: pc.key, Value: value, Headers: pc.check.headers(pc.headers)}
}

// oneway writes every request message the log does not hold (pc.check)
// and answers once all are acknowledged.
func (pc *produceCall) oneway(ctx context.Context) handler.Status {
	for {
		msg, err := pc.call.In.Recv(ctx)
		if errors.Is(err, io.EOF) {
			if err := pc.check.end(); err != nil {
				return keyReusedStatus(err)
			}
			break
		}
		if err != nil {
			return handler.NewStatus(codes.Canceled, "the request ended: "+err.Error())
		}
		write, verified, err := pc.check.next(msg)
		if err != nil {
			return keyReusedStatus(err)
		}
		if verified {
			pc.h.replays.Add(1)
		}
		if !write {
			continue
		}
		msg, st := encodeMessage(ctx, pc.kafka, pc.topic, msg)
		if st != nil {
			return *st
		}
		if _, _, err := pc.prod.Produce(ctx, pc.record(msg)); err != nil {
			return produceStatus(err, pc.topic, pc.static, pc.retry)
		}
	}
	if err := pc.call.Out.Send(ctx, nil); err != nil {
		return handler.NewStatus(codes.Canceled, "the call ended")
	}
	return handler.OK()
}

// onewayKeyed is oneway for a call with an idempotency key: one call per
// key at a time writes on this replica, and it resumes after the messages
// the log already holds (kafkaroute.Claim) once they match its own, so a
// retry writes only what the call it repeats did not, and another call
// under the key writes nothing.
func (pc *produceCall) onewayKeyed(ctx context.Context, kr *kafkaroute.Route, cid string) handler.Status {
	release, err := pc.h.flights.Lead(ctx, kafkaroute.UseFlight(kr.Exit, pc.topic, pc.check.use))
	if err != nil {
		return handler.NewStatus(codes.Canceled, "the call ended")
	}
	defer release()
	st, err := kafkaroute.Claim(ctx, kr, pc.topic, cid, pc.check.use, pc.limits.KafkaTimeout)
	if err != nil {
		return claimStatus(ctx, err, pc.topic)
	}
	pc.check.expect(pc.topic, st.Records, st.Fingerprint, st.Ended, st.First)
	return pc.oneway(ctx)
}

// keyReusedStatus is the status of a call refused for its reused
// idempotency key: FAILED_PRECONDITION, not INVALID_ARGUMENT, because the
// call is well formed and would succeed under a new key; it fails on the
// state of its key, as an expired key does.
func keyReusedStatus(err error) handler.Status {
	return handler.NewStatus(codes.FailedPrecondition, err.Error())
}

// claimStatus maps a failed kafkaroute.Claim: nothing was written.
func claimStatus(ctx context.Context, err error, topic string) handler.Status {
	var expired *kafkaroute.ExpiredError
	var reused *kafkaroute.KeyReusedError
	switch {
	case errors.As(err, &reused):
		return keyReusedStatus(err)
	case errors.As(err, &expired):
		return handler.NewStatus(codes.FailedPrecondition, "expired: "+expired.Error())
	case ctx.Err() != nil:
		return handler.NewStatus(codes.Canceled, "the client went away")
	case errors.Is(err, client.ErrUnknownTopic):
		return handler.NewStatus(codes.Unavailable, fmt.Sprintf("topic %q does not exist in Kafka: nothing was written", topic))
	}
	return handler.NewStatus(codes.Unavailable, fmt.Sprintf(
		"nothing was written: the processor could not read topic %q back from Kafka in time (%v); retrying is safe", topic, err))
}

// progress is what the request side tells the reply side.
type progress int

const (
	produced   progress = iota // a request record was acknowledged
	halfClosed                 // the terminal record was acknowledged, or the client half-closed a replay
	verified                   // the call matched the records its key holds in the log
)

func (pc *produceCall) requestReply(ctx context.Context, kr *kafkaroute.Route, replyTo, cid string, given bool) handler.Status {
	cl := kr.Cluster
	if given {
		// One call per key at a time on this replica: the next one claims
		// after this one wrote, and is compared with it.
		release, err := pc.h.flights.Lead(ctx, kafkaroute.UseFlight(kr.Exit, pc.topic, pc.check.use))
		if err != nil {
			return handler.NewStatus(codes.Canceled, "the call ended")
		}
		defer release()
	}
	// The flight's watch is registered before anything is produced: no reply
	// can be missed. A call attaching to a flight shares it.
	f, lead := pc.h.flights.Join(kafkaroute.FlightKey{Cluster: kr.Exit, ReplyTo: replyTo, CID: cid},
		func() *replies.Watch { return cl.Replies.Watch(replyTo, cid) })
	defer pc.h.flights.Leave(f)
	if lead {
		defer pc.h.flights.Leave(f) // the lead's reference: this call runs the flight itself
	}

	attach := !lead
	var st writtenids.State
	if lead && given {
		// The call repeats one whose records may be in the log, written
		// through any replica: once its messages match those, it writes
		// only the ones after them, and nothing if the request ended there.
		var err error
		st, err = kafkaroute.Claim(ctx, kr, pc.topic, cid, pc.check.use, pc.limits.KafkaTimeout)
		if err != nil {
			return claimStatus(ctx, err, pc.topic)
		}
		cctx, cancel := context.WithTimeout(ctx, pc.limits.KafkaTimeout)
		err = cl.Replies.WaitCaughtUp(cctx, replyTo)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return handler.NewStatus(codes.Canceled, "the client went away")
			}
			return handler.NewStatus(codes.Unavailable, fmt.Sprintf("the replies of topic %q are not readable yet: %v; nothing was written; retry shortly", replyTo, err))
		}
		pc.check.expect(pc.topic, st.Records, st.Fingerprint, st.Ended, st.First)
		// Records without fingerprints (written before them) cannot be
		// compared: a call that ended there, or whose replies are stored
		// (held, or evicted and read back) while the index holds none of
		// its records, attaches to its replies as it did.
		attach = st.Ended && st.Fingerprint == "" || !st.Written() && f.Watch.Stored()
	}

	events := make(chan progress, 4)
	failed := make(chan error, 1)
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // nothing the call started outlives it
	defer stop()
	rw := &replyWait{pc: pc, watch: f.Watch}
	defer rw.stop()
	switch {
	case attach:
		pc.h.replays.Add(1)
		rw.waitingEnd = true
		rw.arm()
	default:
		// A call repeating one whose request ended waits for its replies
		// from the start; none is relayed before it matched the log.
		rw.held = !pc.check.verified()
		rw.waitingEnd = st.Ended
		if rw.held {
			rw.arm() // the client may be waiting for a reply it cannot get yet
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pc.produceRequests(pctx, events, failed)
		}()
	}
	return rw.run(ctx, events, failed, replyTo)
}

// replyWait relays a call's replies and bounds the silence between them by
// limits.reply-timeout.
type replyWait struct {
	pc      *produceCall
	watch   *replies.Watch
	sent    int  // reply records relayed
	headers bool // the response headers went out
	// held: the call repeats one in the log and has not matched it yet, so
	// its replies may be another call's.
	held bool
	// waitingEnd: the request stream ended, so every silence counts.
	waitingEnd bool
	timer      *time.Timer
	timeout    <-chan time.Time
}

// arm starts (or restarts) the reply timeout.
func (rw *replyWait) arm() {
	if rw.timer == nil {
		rw.timer = time.NewTimer(rw.pc.limits.ReplyTimeout)
		rw.timeout = rw.timer.C
		return
	}
	rw.timer.Reset(rw.pc.limits.ReplyTimeout)
}

func (rw *replyWait) stop() {
	if rw.timer != nil {
		rw.timer.Stop()
	}
}

// run relays replies until the terminal one, a failure, the timeout or the
// call's end.
func (rw *replyWait) run(ctx context.Context, events <-chan progress, failed <-chan error, replyTo string) handler.Status {
	pc := rw.pc
	for {
		recs, _, changed := rw.watch.State()
		if rw.held {
			recs = nil
		}
		if st, done := rw.relay(ctx, recs); done {
			return st
		}
		if err := rw.watch.Err(); err != nil { // its evicted replies could not be read back
			return readBackStatus(err, replyTo)
		}
		select {
		case <-changed:
		case ev := <-events:
			switch ev {
			case verified:
				rw.held = false
				pc.h.replays.Add(1)
				continue
			case halfClosed:
				rw.waitingEnd = true
			}
			rw.arm()
		case err := <-failed:
			return produceStatus(err, pc.topic, pc.static, pc.retry)
		case <-rw.timeout:
			if rw.held {
				return handler.NewStatus(codes.DeadlineExceeded, fmt.Sprintf(
					"this call repeats one whose %d records are in topic %q under its %s; its replies are sent once it has sent the same messages (and half-closed, if that call had), and it did not within limits.reply-timeout (%v)",
					pc.check.logged, pc.topic, pc.retry.Name, pc.limits.ReplyTimeout))
			}
			// What a retry does is said here as in the HTTP binding's 504:
			// a caller that timed out needs it most.
			return handler.NewStatus(codes.DeadlineExceeded, fmt.Sprintf(
				"no reply within limits.reply-timeout (%v) on topic %q; is a responder consuming %q? %s",
				pc.limits.ReplyTimeout, replyTo, pc.topic, pc.retry.UnknownOutcome()))
		case <-ctx.Done():
			return handler.NewStatus(codes.Canceled, "the call ended")
		}
	}
}

// relay sends the reply records not sent yet; done once the terminal one
// came or a send failed.
func (rw *replyWait) relay(ctx context.Context, recs []*client.Record) (handler.Status, bool) {
	out := rw.pc.call.Out
	for ; rw.sent < len(recs); rw.sent++ {
		r := recs[rw.sent]
		if r.Value == nil {
			return terminalStatus(r, rw.pc.corr.Status, rw.pc.corr.Message), true
		}
		value, st := decodeReply(ctx, rw.pc.kafka, r)
		if st != nil {
			return *st, true
		}
		if !rw.headers {
			rw.headers = true
			if err := out.SendHeader(ctx, metadataOf(r.Headers)); err != nil {
				return handler.NewStatus(codes.Canceled, "the call ended"), true
			}
		}
		if err := out.Send(ctx, value); err != nil {
			return handler.NewStatus(codes.Canceled, "the call ended"), true
		}
		if rw.waitingEnd {
			rw.arm()
		} else if rw.timer != nil {
			rw.timer.Stop() // the client may think: the clock restarts when it sends
		}
	}
	return handler.Status{}, false
}

// produceRequests writes a record per request message and the terminal
// record at the half-close. However else the request stream ends once
// records were written — the client went away, the call ended, a later
// message failed — the terminal record still follows them (within the Kafka
// timeout), so the responder knows the request ended. Nothing here waits
// for the call's context first: the client can be gone, and the context
// done, at any point after a record was acknowledged.
//
// A call with an idempotency key whose records are in the log already (a
// retry) reads its first messages against them (pc.check) and writes only
// the ones after them; one that differs from them is refused and writes
// nothing.
func (pc *produceCall) produceRequests(ctx context.Context, events chan<- progress, failed chan<- error) {
	wrote, ended := pc.check.resuming(), false
	defer func() {
		if wrote && !ended && pc.check.verified() {
			_, _, _ = pc.check.next(nil)
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pc.limits.KafkaTimeout)
			_, _, _ = pc.prod.Produce(tctx, pc.record(nil))
			cancel()
		}
	}()
	send := func(ev progress) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		msg, err := pc.call.In.Recv(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				ended = true
				pc.halfClose(ctx, send, failed)
			}
			return
		}
		write, ok, err := pc.check.next(msg)
		if err != nil {
			wrote = false // the records in the log are another call's
			failed <- err
			return
		}
		if ok && !send(verified) {
			return
		}
		if !write {
			continue
		}
		msg, st := encodeMessage(ctx, pc.kafka, pc.topic, msg)
		if st != nil {
			failed <- &refusedError{*st}
			return
		}
		if _, _, err := pc.prod.Produce(ctx, pc.record(msg)); err != nil {
			// A record handed over whose acknowledgement was not waited
			// for (the client left meanwhile) may well be in the log: the
			// responder may have answered it already.
			wrote = wrote || errors.Is(err, produce.ErrUnacknowledged)
			failed <- err
			return
		}
		wrote = true
		if !send(produced) {
			return
		}
	}
}

// halfClose writes the end of the request, even if the call ends meanwhile
// (its reply came first, or the client left), unless the log holds it
// already (a retry, which only says it matched).
func (pc *produceCall) halfClose(ctx context.Context, send func(progress) bool, failed chan<- error) {
	write, ok, err := pc.check.next(nil)
	switch {
	case err != nil:
		failed <- err
		return
	case ok && !send(verified):
		return
	case write:
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pc.limits.KafkaTimeout)
		_, _, err := pc.prod.Produce(tctx, pc.record(nil))
		cancel()
		if err != nil {
			failed <- err
			return
		}
	}
	send(halfClosed)
}

// terminalStatus is the status a null-value reply ends the call with: the
// code in the statusName header (OK without one), the text in messageName.
func terminalStatus(r *client.Record, statusName, messageName string) handler.Status {
	st := handler.Status{Code: codes.OK}
	for _, h := range r.Headers {
		switch h.Key {
		case statusName:
			n, err := strconv.Atoi(string(h.Value))
			if err != nil || n < 0 || n > 16 {
				return handler.NewStatus(codes.Unknown, fmt.Sprintf("the responder ended the call with an invalid %s %q", statusName, h.Value))
			}
			st.Code = codes.Code(n)
		case messageName:
			st.Message = string(h.Value)
		}
	}
	st.Trailers = metadataOf(r.Headers)
	return st
}

// produceStatus maps a failed produce to the status that says whether the
// record was written, not written or may have been (docs/reliability.md).
func produceStatus(err error, topic string, static bool, retry kafkaroute.RetryHint) handler.Status {
	var refused *refusedError
	if errors.As(err, &refused) {
		return refused.st
	}
	if _, ok := errors.AsType[*kafkaroute.KeyReusedError](err); ok {
		return keyReusedStatus(err)
	}
	var rej *produce.RejectedError
	switch {
	case errors.Is(err, client.ErrUnknownTopic):
		return topicStatus(err, topic, static)
	case errors.As(err, &rej) && rej.TooLarge():
		return handler.NewStatus(codes.ResourceExhausted, fmt.Sprintf("topic %q: %s; send a smaller message", topic, rej.Reason))
	case errors.As(err, &rej) && rej.NotAuthorized():
		return handler.NewStatus(codes.PermissionDenied, fmt.Sprintf("topic %q: %s", topic, rej.Reason))
	case errors.As(err, &rej):
		return handler.NewStatus(codes.Internal, fmt.Sprintf("topic %q: %s", topic, rej.Reason))
	case errors.Is(err, produce.ErrUnacknowledged):
		return handler.NewStatus(codes.Unavailable, fmt.Sprintf(
			"the record for topic %q was not acknowledged in time and may or may not have been written; %s", topic, retry.UnknownOutcome()))
	}
	return handler.NewStatus(codes.Unavailable, fmt.Sprintf("the record for topic %q was not written (%v), though those of earlier messages of the call may have been; %s", topic, err, retry.UnknownOutcome()))
}
