package httpkafka

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/produce"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httphdr"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// produce answers one request matched to a produce route.
func (h *Handler) produce(ctx context.Context, kr *kafkaroute.Route, req *handler.HTTPRequest) *handler.HTTPResponse {
	w := req.Match.Route.With
	opts := httpOptions(req.Match.Binding)
	if isFollowUp(req) {
		return h.followUp(ctx, kr, req, opts)
	}
	p := &produceCall{req: req, with: w, opts: opts, refs: *kafkaroute.RefsOf(req.Match), kafka: kr.Kafka}
	p.retry.Name, p.retry.Kind = opts.IdempotencyHeader, "header"
	if bad := p.idempotencyKey(&h.uuids); bad != nil {
		return bad
	}
	if bad := p.contentType(); bad != nil {
		return bad
	}
	topic, err := kafkaroute.Topic(w, p.refs.Resolve)
	if err != nil {
		return handler.ProblemResponse(http.StatusBadRequest, err.Error())
	}
	var key []byte // nil: no key; a template resolving to "" gives an empty key
	if w.Key != nil {
		key = []byte(w.Key.Expand(p.refs.Resolve))
	}
	if len(key) == 0 {
		compacted, err := h.kafka.Compaction.Compacted(ctx, kr.Cluster, kr.Exit, topic, req.Limits.KafkaTimeout)
		switch {
		case err != nil:
			// The record cannot be written before the probe answers.
			return produceFailure(ctx, fmt.Errorf("%w: %w", produce.ErrNotEnqueued, err), topic, w.Topic.Static(), p.retry)
		case compacted:
			return handler.ProblemResponse(http.StatusBadRequest, fmt.Sprintf(
				"topic %q is compacted, so its records need a key, and this request resolves an empty one (the route's with.key)", topic))
		}
	}
	overrides := make([]client.Header, 0, len(w.Overrides))
	for _, o := range w.Overrides {
		overrides = append(overrides, client.Header{Key: o.Name, Value: []byte(o.Value.Expand(p.refs.Resolve))})
	}
	rec := &client.Record{Topic: topic, Key: key}
	if w.ReplyTo == "" {
		return h.oneway(ctx, kr, p, rec, overrides)
	}

	body := req.Body
	if body == nil {
		body = []byte{} // an empty value, not a tombstone
	}
	c := h.pools.correlation()
	c.field(key)
	rec.Headers = requestHeaders(c, req.Headers, req.Match.Identities,
		opts.Correlation.ReplyTo, w.ReplyTo, opts.Correlation.CorrelationID, kr.FingerprintHeader, overrides)
	c.field(body)
	cid := c.idBytes(p.refs.IdempotencyKey, req.Match.Identities)
	h.pools.putCorrelation(c)
	// The id's bytes are written once, here, and never again (the record
	// header carries them to the producer, which copies them): the string
	// shares them rather than being a second copy per request.
	p.refs.CorrelationID = unsafe.String(unsafe.SliceData(cid), len(cid))
	rec.Headers = append(rec.Headers, client.Header{Key: opts.Correlation.CorrelationID, Value: cid})
	if p.retry.Given {
		p.keyUse(p.refs.CorrelationID, whatRequestReply)
		rec.Headers = append(rec.Headers, client.Header{Key: kr.FingerprintHeader, Value: p.use.Header(p.use.Fingerprint)})
	}
	rec.Headers = produce.WithTraceContext(ctx, rec.Headers)
	rec.Value = body
	if bad := encodeRecord(ctx, kr.Kafka, req.Method, req.Headers, rec); bad != nil {
		return bad
	}
	return h.requestReply(ctx, kr, p, rec)
}

// produceCall is one produce request being answered.
type produceCall struct {
	req  *handler.HTTPRequest
	with *config.With
	opts *config.HTTPOptions
	// refs resolve the route's templates; its idempotency key is given or
	// generated, its correlation id set once computed.
	refs  kafkaroute.Refs // in the call, not an allocation of its own
	retry kafkaroute.RetryHint
	// use is the request's use of its idempotency key; nil without one.
	use *kafkaroute.KeyUse
	// kafka is the exit's configuration: the topics' models.
	kafka *config.KafkaCluster
}

// What a request under a reused idempotency key may differ in, as its
// fingerprint covers it (docs/reliability.md#one-key-one-request).
const (
	whatRequestReply = "its method, path, body or another header that reaches the record"
	whatOneway       = "the record it writes (its key, body or tombstone, content-type)"
)

// keyUse sets the request's key use: its fingerprint is the request half of
// its correlation id, which hashes the same parts of the request (a oneway
// one's, what its record is made of).
func (p *produceCall) keyUse(cid, what string) {
	fp := cid[len(cid)-cidHashLen : len(cid)-cidHashLen/2]
	p.use = &kafkaroute.KeyUse{Key: p.refs.IdempotencyKey, Slot: kafkaroute.KeySlot(p.refs.IdempotencyKey, p.refs.Identities), Fingerprint: fp, What: what}
}

// idempotencyKey reads the idempotency header, or takes the UUID that
// stands for it from uuids; a malformed or repeated header is a 400.
func (p *produceCall) idempotencyKey(uuids *kafkaroute.UUIDs) *handler.HTTPResponse {
	name := p.opts.IdempotencyHeader
	vs := p.req.Headers.Values(name)
	key, given, err := uuids.IdempotencyKey(vs)
	switch {
	case errors.Is(err, kafkaroute.ErrRepeatedKey):
		return handler.ProblemResponse(http.StatusBadRequest, fmt.Sprintf("send one %s header, not %d", name, len(vs)))
	case err != nil:
		return handler.ProblemResponse(http.StatusBadRequest, fmt.Sprintf(
			"the %s header must be 1 to %d characters of A-Z a-z 0-9 . _ ~ - (a UUID will do)", name, kafkaroute.MaxIdempotencyKey))
	}
	p.refs.IdempotencyKey = key
	p.retry.Given = given
	return nil
}

// contentType refuses a request with several content-types: a record
// carries one, and Envoy joins repeated content-type headers into one value
// with ",", which no consumer could read as a media type.
func (p *produceCall) contentType() *handler.HTTPResponse {
	n := 0
	for _, h := range p.req.Headers { // not Values: no slice per request
		if h.Name == "content-type" {
			n += httphdr.ListLen(h.Value)
		}
	}
	if n > 1 {
		return handler.ProblemResponse(http.StatusBadRequest, fmt.Sprintf("send one content-type, not %d", n))
	}
	return nil
}

// resolveURL expands references in async values, which are URLs (the
// location): path parameters, percent-decoded when matched, are escaped
// again so each stays one segment.
func (p *produceCall) resolveURL(part config.TemplatePart) string {
	if part.Ref == config.RefParam {
		return url.PathEscape(p.req.Match.Params[part.Name])
	}
	return p.refs.Resolve(part)
}

// accepted is the 202 of an async request: every async entry as a header.
func (p *produceCall) accepted(applied string) *handler.HTTPResponse {
	r := &handler.HTTPResponse{Status: http.StatusAccepted}
	for _, a := range p.with.Async {
		r.Headers = append(r.Headers, route.Header{Name: a.Name, Value: a.Value.Expand(p.resolveURL)})
	}
	return withApplied(r, applied)
}

// reply answers with a reply record, converted for the client when the
// reply topic's model has a view.
func (p *produceCall) reply(ctx context.Context, rec *client.Record, applied string) *handler.HTTPResponse {
	rec, bad := decodeReply(ctx, p.kafka, rec)
	if bad != nil {
		return bad
	}
	return withApplied(replyResponse(rec, p.opts.Correlation.CorrelationID, p.opts.Correlation.ReplyTo), applied)
}

func httpOptions(b *config.Binding) *config.HTTPOptions {
	if b != nil && b.HTTP != nil {
		return b.HTTP
	}
	return &config.HTTPOptions{
		IdempotencyHeader: config.DefaultIdempotencyKey,
		Correlation:       config.CorrelationHeaders{ReplyTo: config.DefaultReplyToHeader, CorrelationID: config.DefaultCorrelationIDHeader},
	}
}

// isFollowUp: a GET through a condition with {correlationId} of a route
// with reply-to and async (the loader allows {correlationId} nowhere else).
func isFollowUp(req *handler.HTTPRequest) bool {
	w, m := req.Match.Route.With, req.Match
	if w.ReplyTo == "" || len(w.Async) == 0 || req.Method != http.MethodGet ||
		m.Condition < 0 || m.Condition >= len(m.Route.When) {
		return false
	}
	c := m.Route.When[m.Condition]
	return c.Path != nil && c.Path.HasParam("correlationId")
}

// oneway writes the record and answers 204 once it is acknowledged. A
// request with an idempotency key writes its correlation id as a header
// and writes only if no record with it is in the log (kafkaroute.Claim):
// its retry answers 204 again without writing.
func (h *Handler) oneway(ctx context.Context, kr *kafkaroute.Route, p *produceCall,
	rec *client.Record, overrides []client.Header) *handler.HTTPResponse {
	req, w := p.req, p.with
	ct, hasCT := req.Headers.Lookup("content-type")
	if hasCT {
		rec.Headers = append(rec.Headers, client.Header{Key: "content-type", Value: []byte(ct)})
	}
	rec.Headers = append(rec.Headers, overrides...)
	switch {
	case req.Method == http.MethodDelete:
		rec.Value = nil // a tombstone
	case req.Body == nil:
		rec.Value = []byte{}
	default:
		rec.Value = req.Body
	}
	if bad := encodeRecord(ctx, kr.Kafka, req.Method, req.Headers, rec); bad != nil {
		return bad
	}
	if p.retry.Given {
		p.refs.CorrelationID = onewayCorrelation(p.refs.IdempotencyKey, req, rec, ct, overrides)
		p.keyUse(p.refs.CorrelationID, whatOneway)
		rec.Headers = append(rec.Headers,
			client.Header{Key: p.opts.Correlation.CorrelationID, Value: []byte(p.refs.CorrelationID)},
			client.Header{Key: kr.FingerprintHeader, Value: p.use.Header(p.use.Fingerprint)})
	}
	rec.Headers = produce.WithTraceContext(ctx, rec.Headers)
	if !p.retry.Given {
		if _, _, err := kr.Producer.Produce(ctx, rec); err != nil {
			return produceFailure(ctx, err, rec.Topic, w.Topic.Static(), p.retry)
		}
		return &handler.HTTPResponse{Status: http.StatusNoContent}
	}
	release, err := h.flights.Lead(ctx, kafkaroute.UseFlight(kr.Exit, rec.Topic, p.use))
	if err != nil {
		return gone()
	}
	defer release()
	st, err := kafkaroute.Claim(ctx, kr, rec.Topic, p.refs.CorrelationID, p.use, req.Limits.KafkaTimeout)
	if err != nil {
		return produceFailure(ctx, err, rec.Topic, w.Topic.Static(), p.retry)
	}
	if st.Written() {
		h.replays.Add(1)
		return &handler.HTTPResponse{Status: http.StatusNoContent}
	}
	if _, _, err := kr.Producer.Produce(ctx, rec); err != nil {
		return produceFailure(ctx, err, rec.Topic, w.Topic.Static(), p.retry)
	}
	return &handler.HTTPResponse{Status: http.StatusNoContent}
}

// requestReply joins (or leads) the flight of the correlation id and
// answers from its reply.
func (h *Handler) requestReply(ctx context.Context, kr *kafkaroute.Route, p *produceCall, rec *client.Record) *handler.HTTPResponse {
	w, req, cid := p.with, p.req, p.refs.CorrelationID
	// The reply topic is indexed when the routes are prepared (start and
	// reload), before any request can match the route.
	f, lead := h.flights.Join(kafkaroute.FlightKey{Cluster: kr.Exit, ReplyTo: w.ReplyTo, CID: cid},
		func() *replies.Watch { return kr.Cluster.Replies.Watch(w.ReplyTo, cid) })
	defer h.flights.Leave(f)
	if lead {
		if p.retry.Given || !kr.Cluster.Replies.CaughtUp(w.ReplyTo) {
			// The claim and the catch-up may wait on Kafka. The goroutine
			// gets a copy of the call, so that the call of the usual round
			// trip, which leads here, stays on this goroutine's stack.
			held := *p
			go h.lead(context.WithoutCancel(ctx), f, kr, &held, rec)
		} else {
			h.leadHere(ctx, f, kr, rec)
		}
	}
	if f.Wait(ctx) != nil {
		return gone()
	}
	if f.Err != nil {
		return produceFailure(ctx, f.Err, rec.Topic, w.Topic.Static(), p.retry)
	}

	prefs := httphdr.ParsePrefer(req.Headers.Values("prefer"))
	async := len(w.Async) > 0
	if async && prefs.RespondAsync {
		if !prefs.WaitSet {
			return p.accepted("respond-async")
		}
		wait := min(prefs.Wait, req.Limits.MaxWait)
		applied := "wait=" + strconv.Itoa(int(wait/time.Second))
		r, end := h.awaitReply(ctx, req.Drain, f.Watch, readBackWait(f.Watch, wait, req.Limits.KafkaTimeout))
		switch end {
		case replied:
			return p.reply(ctx, r, applied)
		case clientGone:
			return gone()
		case unreadable:
			return readBackFailure(f.Watch.Err(), w.ReplyTo)
		}
		return p.accepted("respond-async, " + applied)
	}

	var drain context.Context
	if async {
		drain = req.Drain // a synchronous wait elsewhere is bounded by reply-timeout anyway
	}
	r, end := h.awaitReply(ctx, drain, f.Watch, req.Limits.ReplyTimeout)
	switch end {
	case replied:
		return p.reply(ctx, r, "")
	case clientGone:
		return gone()
	case unreadable:
		return readBackFailure(f.Watch.Err(), w.ReplyTo)
	}
	if async {
		return p.accepted("")
	}
	retry := "retry with the same " + p.opts.IdempotencyHeader + " header to get its reply without writing it again"
	if !p.retry.Given {
		retry = "this request has no " + p.opts.IdempotencyHeader + " header, so a retry writes it again (send one to make a retry safe)"
	}
	return handler.ProblemResponse(http.StatusGatewayTimeout, fmt.Sprintf(
		"no reply within limits.reply-timeout (%v); the request was written to topic %q: %s", req.Limits.ReplyTimeout, rec.Topic, retry))
}

// lead runs a flight: catch the reply index up, look the id up, and produce
// only if no reply is stored. It runs apart from the request that started
// it, so that request's client leaving does not fail the requests attached
// to the flight; Produce bounds it by the Kafka timeout.
//
// A request with an idempotency key claims its correlation id first: if a
// record with it is in the log (written through any replica), nothing is
// produced and the request waits for its reply as a replay.
func (h *Handler) lead(ctx context.Context, f *kafkaroute.Flight, kr *kafkaroute.Route, p *produceCall, rec *client.Record) {
	w, kafkaTimeout := p.with, p.req.Limits.KafkaTimeout
	// The leader leaves before it says it is done: once every request that
	// waited on the flight has left too, the next request with the same id
	// starts a flight of its own (a replay from the index) instead of
	// joining this one because this goroutine had not been scheduled yet.
	defer f.Finish()
	defer h.flights.Leave(f)
	if !kr.Cluster.Replies.CaughtUp(w.ReplyTo) {
		cctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
		err := kr.Cluster.Replies.WaitCaughtUp(cctx, w.ReplyTo)
		cancel()
		if err != nil {
			h.fail(f, fmt.Errorf("reply topic %q: %w", w.ReplyTo, err))
			return
		}
	}
	if p.retry.Given {
		// Another request under the same key on this replica claims and
		// writes before or after this one, never at once (rule 5 of
		// kafkaroute's write rule). ctx does not end: Lead cannot fail.
		release, err := h.flights.Lead(ctx, kafkaroute.UseFlight(kr.Exit, rec.Topic, p.use))
		if err != nil {
			h.fail(f, err)
			return
		}
		defer release()
		st, err := kafkaroute.Claim(ctx, kr, rec.Topic, p.refs.CorrelationID, p.use, kafkaTimeout)
		if err != nil {
			h.fail(f, err)
			return
		}
		if st.Written() {
			h.replayed(f)
			return
		}
	}
	if f.Watch.Stored() { // held, or evicted and read back
		h.replayed(f)
		return
	}
	if _, _, err := kr.Producer.Produce(ctx, rec); err != nil {
		h.produceFailed(f, err, rec)
	}
}

// replayed marks a flight answered from what is already in Kafka: nothing
// is produced.
func (h *Handler) replayed(f *kafkaroute.Flight) {
	f.Replayed = true
	h.replays.Add(1)
}

// fail records why a flight failed and takes it out of the table, so the
// next request with its id starts afresh.
func (h *Handler) fail(f *kafkaroute.Flight, err error) {
	f.Err = err
	h.flights.Forget(f)
}

// produceFailed fails a flight on its produce.
func (h *Handler) produceFailed(f *kafkaroute.Flight, err error, rec *client.Record) {
	h.fail(f, err)
	h.log.Debug("produce failed", "topic", rec.Topic, "err", err)
}

// leadHere runs a flight whose reply index has caught up and that claims
// nothing, on the request's own goroutine: it produces and waits for the
// acknowledgement there, and only if the client leaves first does another
// goroutine take the wait over, so the requests attached to the flight
// still get its outcome. Most request-replies take this path, without a
// goroutine of their own.
func (h *Handler) leadHere(ctx context.Context, f *kafkaroute.Flight, kr *kafkaroute.Route, rec *client.Record) {
	if f.Watch.Stored() { // held, or evicted and read back
		h.replayed(f)
		h.endLead(f, nil, rec)
		return
	}
	// Handing the record over waits on Kafka only for the topic's first
	// lookup, bounded by the Kafka timeout; it must not end with this
	// client, which the flight's other requests do not depend on.
	sending, err := kr.Producer.Send(context.Background(), rec)
	if err != nil {
		h.endLead(f, err, rec)
		return
	}
	_, _, err = sending.Wait(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The goroutine gets a copy of its own, so that sending stays on
		// this goroutine's stack when the client waits, as it mostly does.
		held := sending
		go func() {
			_, _, err := held.Wait(context.Background())
			h.endLead(f, err, rec)
		}()
		return
	}
	h.endLead(f, err, rec)
}

// endLead ends a flight run by leadHere with the outcome of its produce, as
// lead does: the lead leaves before it says it is done.
func (h *Handler) endLead(f *kafkaroute.Flight, err error, rec *client.Record) {
	if err != nil {
		h.produceFailed(f, err, rec)
	}
	h.flights.Leave(f)
	f.Finish()
}

// followUp answers a GET on an async location from the reply index.
func (h *Handler) followUp(ctx context.Context, kr *kafkaroute.Route, req *handler.HTTPRequest, opts *config.HTTPOptions) *handler.HTTPResponse {
	w := req.Match.Route.With
	p := &produceCall{req: req, with: w, opts: opts, refs: *kafkaroute.RefsOf(req.Match), kafka: kr.Kafka}
	p.refs.CorrelationID = req.Match.Params["correlationId"]
	if !followUpAllowed(p.refs.CorrelationID, req.Match.Identities) {
		// Malformed, or issued to another caller: either way not a
		// location this caller was given.
		return handler.ProblemResponse(http.StatusNotFound, "no request with this correlation id was accepted for you")
	}
	replies := kr.Cluster.Replies
	watch := replies.Watch(w.ReplyTo, p.refs.CorrelationID)
	defer watch.Close()
	cctx, cancel := context.WithTimeout(ctx, req.Limits.KafkaTimeout)
	err := replies.WaitCaughtUp(cctx, w.ReplyTo)
	cancel()
	if err != nil {
		return produceFailure(ctx, fmt.Errorf("reply topic %q: %w", w.ReplyTo, err), w.Topic.Raw, true, p.retry)
	}
	if !watch.Stored() && w.Topic.Static() {
		if bad := h.followUpExpired(ctx, kr, p); bad != nil {
			return bad
		}
	}
	prefs := httphdr.ParsePrefer(req.Headers.Values("prefer"))
	var wait time.Duration
	applied := ""
	if prefs.WaitSet {
		wait = min(prefs.Wait, req.Limits.MaxWait)
		applied = "wait=" + strconv.Itoa(int(wait/time.Second))
	}
	r, end := h.awaitReply(ctx, req.Drain, watch, readBackWait(watch, wait, req.Limits.KafkaTimeout))
	switch end {
	case replied:
		return p.reply(ctx, r, applied)
	case clientGone:
		return gone()
	case unreadable:
		return readBackFailure(watch.Err(), w.ReplyTo)
	}
	return p.accepted(applied)
}

// followUpExpired answers 410 for a follow-up whose request is past the
// idempotency window, or no longer (or never) in the key index, so that
// an expired result does not look pending forever.
func (h *Handler) followUpExpired(ctx context.Context, kr *kafkaroute.Route, p *produceCall) *handler.HTTPResponse {
	topic, cid := p.with.Topic.Raw, p.refs.CorrelationID
	st, err := kafkaroute.Claim(ctx, kr, topic, cid, nil, p.req.Limits.KafkaTimeout)
	var expired *kafkaroute.ExpiredError
	switch {
	case errors.As(err, &expired):
		return handler.ProblemResponse(http.StatusGone, fmt.Sprintf(
			"the request of this location was written at %s, more than limits.idempotency-window (%v) ago, and no reply is stored: its result expired",
			expired.First.UTC().Format(time.RFC3339), expired.Window))
	case err != nil:
		return produceFailure(ctx, err, topic, true, p.retry)
	case !st.Written():
		keys, _ := kr.Cluster.WrittenIDs()
		return handler.ProblemResponse(http.StatusGone, fmt.Sprintf(
			"no request of this location was written to topic %q in the last 2 × limits.idempotency-window (%v), and no reply is stored: its result expired",
			topic, 2*keys.Window()))
	}
	return nil
}

type waitEnd int

const (
	replied waitEnd = iota
	timedOut
	drained
	clientGone
	unreadable // the stored reply was evicted and could not be read back
)

// awaitReply waits up to wait for the first reply record of the watch.
// drain may be nil (the wait does not end on drain).
func (h *Handler) awaitReply(ctx, drain context.Context, watch *replies.Watch, wait time.Duration) (*client.Record, waitEnd) {
	var drainCh <-chan struct{}
	if drain != nil {
		drainCh = drain.Done()
	}
	// One defer outside the loop, so the compiler open-codes it: a defer
	// inside the loop went through the runtime's defer records every time.
	var timer *time.Timer
	defer func() {
		if timer != nil {
			h.pools.timers.Put(timer)
		}
	}()
	for {
		first, changed := watch.First()
		if first != nil {
			return first, replied
		}
		if ctx.Err() != nil {
			return nil, clientGone
		}
		if wait <= 0 {
			return nil, timedOut
		}
		if drain != nil && drain.Err() != nil {
			return nil, drained
		}
		if watch.Err() != nil { // checked only before blocking: a held reply costs nothing
			return nil, unreadable
		}
		if timer == nil {
			timer = h.pools.timers.Get(wait)
		}
		h.replyWaiters.Add(1)
		select {
		case <-changed:
			h.replyWaiters.Add(-1)
		case <-timer.C:
			h.replyWaiters.Add(-1)
			if recs := watch.Records(); len(recs) > 0 {
				return recs[0], replied
			}
			return nil, timedOut
		case <-ctx.Done():
			h.replyWaiters.Add(-1)
			return nil, clientGone
		case <-drainCh:
			h.replyWaiters.Add(-1)
			if recs := watch.Records(); len(recs) > 0 {
				return recs[0], replied
			}
			return nil, drained
		}
	}
}

// gone is the answer to a request whose client left; nobody reads it.
func gone() *handler.HTTPResponse {
	return handler.ProblemResponse(http.StatusServiceUnavailable, "the request was cancelled")
}

// produceFailure maps what kept a record from Kafka to the answer that says
// whether it was written, not written or may have been (docs/reliability.md).
func produceFailure(ctx context.Context, err error, topic string, static bool, retry kafkaroute.RetryHint) *handler.HTTPResponse {
	var rejected *produce.RejectedError
	var expired *kafkaroute.ExpiredError
	var reused *kafkaroute.KeyReusedError
	switch {
	case ctx.Err() != nil:
		return gone()
	case errors.As(err, &reused):
		return handler.ProblemResponse(http.StatusUnprocessableEntity, reused.Error())
	case errors.As(err, &rejected) && rejected.Limit > 0:
		// librdkafka's own size check, not Kafka refusing: the request was
		// larger than the producer takes (a broker's refusal stays 502).
		return handler.ProblemResponse(http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the record for topic %q was not written: %s, which is limits.max-body plus room for headers; send a smaller body or fewer headers", topic, rejected.Reason))
	case errors.As(err, &expired):
		return handler.ProblemResponse(http.StatusGone, expired.Error())
	case errors.As(err, &rejected):
		return handler.ProblemResponse(http.StatusBadGateway, fmt.Sprintf("Kafka refused the record for topic %q: %s", topic, rejected.Reason))
	case errors.Is(err, client.ErrUnknownTopic) && errors.Is(err, client.ErrNotReady):
		// The reply topic (a route's static setting) is missing.
		return unavailable(fmt.Sprintf("the route's reply topic does not exist in Kafka: %v", err))
	case errors.Is(err, client.ErrUnknownTopic) && !static:
		return handler.ProblemResponse(http.StatusNotFound, fmt.Sprintf("topic %q does not exist", topic))
	case errors.Is(err, client.ErrUnknownTopic):
		return unavailable(fmt.Sprintf("the route's topic %q does not exist in Kafka", topic))
	case errors.Is(err, produce.ErrUnacknowledged):
		return handler.ProblemResponse(http.StatusGatewayTimeout, fmt.Sprintf(
			"Kafka did not acknowledge the record for topic %q within limits.kafka-timeout: it may or may not have been written; %s", topic, retry.UnknownOutcome()))
	case errors.Is(err, client.ErrNotReady):
		return unavailable(fmt.Sprintf("nothing was written: the processor could not read back from Kafka in time (%v); retrying is safe", err))
	case errors.Is(err, produce.ErrNotEnqueued):
		return unavailable(fmt.Sprintf("the record for topic %q was not written to Kafka (%v); retrying is safe", topic, rootCause(err)))
	}
	return unavailable(fmt.Sprintf("Kafka is not available for topic %q: %v", topic, err))
}

// rootCause is the innermost error's text, for a detail on one line.
func rootCause(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}
