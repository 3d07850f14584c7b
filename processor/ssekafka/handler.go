package ssekafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/streampace"
)

// Handler answers every request the exchange matched to an sse-kafka
// route. It is the processor's handler.SSEHandler. It holds no state per
// route, so it carries over a reload; the log tails belong to the clusters.
type Handler struct {
	log   *slog.Logger
	kafka *kafkaroute.Kafka

	streams atomic.Int64 // event streams open
	events  atomic.Int64 // events sent
	resumes atomic.Int64 // streams opened with a last-event-id
	gaps    atomic.Int64 // resumes refused: the log cannot continue from the id
	lagged  atomic.Int64 // event streams ended for their lag budget
	drained atomic.Int64 // event streams ended by the processor's shutdown
}

var _ handler.SSEHandler = (*Handler)(nil)

// New returns the sse-kafka handler answering from the Kafka side of the
// routes (nil: none is connected, every route is answered 501).
func New(log *slog.Logger, kafka *kafkaroute.Kafka) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if kafka == nil {
		kafka = kafkaroute.New(nil)
	}
	return &Handler{log: log, kafka: kafka}
}

// Stats are the handler's counters.
type Stats struct {
	Streams int64 // event streams open
	Events  int64 // events sent (records and tombstones; not comments)
	Resumes int64 // streams opened with a last-event-id
	Gaps    int64 // resumes refused (410, 400): the log cannot continue from the id
	Lagged  int64 // event streams ended for their lag budget
	Drained int64 // event streams ended by the processor's shutdown
}

// Stats reports the handler's counters.
func (h *Handler) Stats() Stats {
	return Stats{Streams: h.streams.Load(), Events: h.events.Load(), Resumes: h.resumes.Load(),
		Gaps: h.gaps.Load(), Lagged: h.lagged.Load(), Drained: h.drained.Load()}
}

// HandleSSE answers one matched request: a problem before the stream
// starts, or the stream.
func (h *Handler) HandleSSE(ctx context.Context, req *handler.HTTPRequest, out handler.EventWriter) *handler.HTTPResponse {
	r := req.Match.Route
	if r.With == nil {
		return handler.ProblemResponse(http.StatusNotImplemented,
			fmt.Sprintf("route %d of binding %q has no `with`, so it has nothing to do", r.Index, req.Match.Binding.Name))
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		// A route without a method condition takes every method; an event
		// stream is opened with GET only.
		return handler.ProblemResponse(http.StatusMethodNotAllowed, fmt.Sprintf(
			"an event stream is opened with GET (as EventSource does), not %s", req.Method),
			route.Header{Name: "allow", Value: "GET, HEAD"})
	}
	if req.Method == http.MethodHead {
		// What a GET would start, without the stream.
		return &handler.HTTPResponse{Status: http.StatusOK, Headers: streamHeaders()}
	}
	if !acceptsEventStream(req.Headers) {
		return notAcceptable(req.Headers)
	}
	start, problem := lastEventID(req.Headers)
	if problem != nil {
		return problem
	}
	if req.Drain.Err() != nil {
		return draining()
	}
	kr, err := h.kafka.Route(req.Match.Binding, r)
	switch {
	case errors.Is(err, kafkaroute.ErrNotConnected):
		return handler.ProblemResponse(http.StatusNotImplemented, fmt.Sprintf(
			"the event stream of topic %q cannot run: kafka binding %q is not connected in this processor", r.With.Topic.Raw, r.Exit))
	case err != nil:
		return unavailable(fmt.Sprintf("kafka binding %q cannot serve this route now: %v", r.Exit, err))
	}
	s, problem := h.open(ctx, kr, req, start)
	if problem != nil {
		return problem
	}
	if start != nil {
		h.resumes.Add(1)
	}
	h.streams.Add(1)
	defer h.streams.Add(-1)
	h.serve(ctx, req, out, s)
	return nil
}

// stream is an open event stream and the topic it reads.
type stream struct {
	ls     *logtails.Stream
	topic  string
	static bool // the route's topic, not a template
}

// open resolves the request's topic, checks the resume position against
// the topic and opens the stream on the cluster's log tails.
func (h *Handler) open(ctx context.Context, kr *kafkaroute.Route, req *handler.HTTPRequest, start map[int32]int64) (*stream, *handler.HTTPResponse) {
	w := req.Match.Route.With
	resolve := kafkaroute.RefsOf(req.Match).Resolve
	topic, err := kafkaroute.Topic(w, resolve)
	if err != nil {
		return nil, handler.ProblemResponse(http.StatusBadRequest, err.Error())
	}
	static := w.Topic.Static()
	compacted, err := h.kafka.Compaction.Compacted(ctx, kr.Cluster, kr.Exit, topic, req.Limits.KafkaTimeout)
	if err != nil {
		return nil, topicProblem(err, topic, static)
	}
	tails, err := kr.Cluster.LogTails()
	if err != nil {
		return nil, unavailable(fmt.Sprintf("the log tails of kafka binding %q cannot start: %v", kr.Exit, err))
	}
	octx, cancel := context.WithTimeout(ctx, req.Limits.KafkaTimeout)
	defer cancel()
	ls, err := tails.Open(octx, logtails.StreamOptions{
		Topic:     topic,
		Framer:    frame{},
		Start:     start,
		Compacted: compacted,
		Filters:   kafkaroute.StreamFilters(w.Filters, resolve),
		LagBudget: req.Limits.StreamLagBudget,
	})
	var gap *logtails.GapError
	if errors.As(err, &gap) {
		h.gaps.Add(1)
		return nil, gapProblem(gap)
	}
	if err != nil {
		return nil, topicProblem(err, topic, static)
	}
	return &stream{ls: ls, topic: topic, static: static}, nil
}

// gapProblem answers a resume position the log cannot continue from
// without skipping records, as logtails finds it (the gRPC fetch stream
// ends the same gap OUT_OF_RANGE): records removed below it (retention,
// DeleteRecords) are a 410, the client's last event being older than what
// the topic holds; a position past the log's end or in a partition the
// topic lacks (an id of another stream, or of a deleted generation of the
// topic) is a 400. Either way nothing is streamed from a position the
// client did not ask for.
func gapProblem(gap *logtails.GapError) *handler.HTTPResponse {
	if gap.Cause == logtails.Truncated {
		return handler.ProblemResponse(http.StatusGone, gap.Error()+
			"; the records after this last-event-id are gone: reconnect without last-event-id to read what the topic still holds")
	}
	return handler.ProblemResponse(http.StatusBadRequest, gap.Error()+
		"; this last-event-id is not a position of this topic's stream: reconnect without it to start afresh")
}

// serve streams the records until the stream ends. The sender owns the
// log stream; serve waits apart from it, as a send may block for as long as
// Envoy does not read, and the lag budget, the drain and the client's
// cancel must still end the stream then.
func (h *Handler) serve(ctx context.Context, req *handler.HTTPRequest, out handler.EventWriter, s *stream) {
	if err := out.Start(ctx, streamHeaders()); err != nil {
		s.ls.Close()
		return
	}
	retry := "retry: " + strconv.FormatInt(req.Limits.SSERetry.Milliseconds(), 10) + "\n\n"
	if err := out.Send(ctx, []byte(retry)); err != nil {
		s.ls.Close()
		return
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var last atomic.Int64 // unix nanoseconds of the last send
	snd := &sender{out: out, last: &last, events: &h.events,
		pace: streampace.New(streampace.Spacing(req.Limits.StreamSendInterval, req.Limits.StreamSendRate, &h.streams))}
	snd.touch()
	ended := make(chan error, 1)
	go func() {
		defer s.ls.Close()
		ended <- snd.loop(sctx, s.ls)
	}()
	beat := newHeartbeat(req.Limits.SSEHeartbeat)
	defer beat.stop()
	for {
		select {
		case err := <-ended:
			h.end(ctx, out, snd, h.reason(err, ctx, s, req.Limits))
			return
		// The sender is told to stop, not waited for: its send may be
		// blocked for as long as Envoy does not read. It closes the log
		// stream when it returns, and its sends after the end fail.
		case <-s.ls.Lagged():
			stop()
			h.end(ctx, out, snd, h.reason(logtails.ErrLagged, ctx, s, req.Limits))
			return
		case <-s.ls.Retired():
			stop()
			h.end(ctx, out, snd, h.reason(s.ls.RetiredErr(), ctx, s, req.Limits))
			return
		case <-req.Drain.Done():
			stop()
			h.drained.Add(1)
			h.end(ctx, out, snd, "the processor is shutting down; reconnect (last-event-id resumes)")
			return
		case <-ctx.Done():
			return
		case <-beat.c():
			if idle := snd.idle(); idle >= req.Limits.SSEHeartbeat {
				// The sender may be sending too: the writer sends whole
				// messages one at a time, and a comment between two events
				// is harmless.
				if err := out.Send(ctx, []byte(":\n\n")); err == nil {
					snd.touch()
				}
				beat.reset(req.Limits.SSEHeartbeat)
			} else {
				beat.reset(req.Limits.SSEHeartbeat - idle)
			}
		}
	}
}

// end says, in a comment, why the stream ends; the exchange then ends the
// response.
func (h *Handler) end(ctx context.Context, out handler.EventWriter, snd *sender, why string) {
	if why == "" || ctx.Err() != nil {
		return
	}
	if err := out.Send(ctx, appendComment(nil, why)); err == nil {
		snd.touch()
	}
}

// reason is the comment of a stream that ended on err ("" when nobody is
// left to read it).
func (h *Handler) reason(err error, ctx context.Context, s *stream, limits config.Limits) string {
	switch {
	case ctx.Err() != nil:
		return ""
	case errors.Is(err, logtails.ErrLagged):
		h.lagged.Add(1)
		return fmt.Sprintf("the stream fell more than limits.stream-lag-budget (%d records) behind topic %q; reconnect (last-event-id resumes)",
			limits.StreamLagBudget, s.topic)
	case errors.Is(err, logtails.ErrClosed):
		h.drained.Add(1)
		return "the processor is shutting down; reconnect (last-event-id resumes)"
	case errors.Is(err, logtails.ErrPartitionsChanged):
		return fmt.Sprintf("topic %q gained partitions; reconnect (last-event-id resumes)", s.topic)
	case errors.Is(err, views.ErrLater):
		return fmt.Sprintf("the next record of topic %q cannot be decoded now; reconnect (last-event-id resumes at it)", s.topic)
	}
	h.log.Debug("event stream ended", "topic", s.topic, "err", err)
	return fmt.Sprintf("the stream of topic %q ended: %v; reconnect (last-event-id resumes)", s.topic, err)
}

// streamHeaders are the headers of an event stream: no caching anywhere,
// and no buffering by a proxy that honours x-accel-buffering.
func streamHeaders() []route.Header {
	return []route.Header{
		{Name: "content-type", Value: eventStream},
		{Name: "cache-control", Value: "no-cache"},
		{Name: "x-accel-buffering", Value: "no"},
	}
}

func draining() *handler.HTTPResponse {
	return unavailable("the processor is shutting down; reconnect (last-event-id resumes)")
}

func unavailable(detail string) *handler.HTTPResponse {
	return handler.ProblemResponse(http.StatusServiceUnavailable, detail, route.Header{Name: "retry-after", Value: "1"})
}

// topicProblem answers a topic that cannot be read: a templated topic that
// does not exist is the caller's 404; a configured one is the service's 503.
func topicProblem(err error, topic string, static bool) *handler.HTTPResponse {
	switch {
	case errors.Is(err, client.ErrUnknownTopic) && !static:
		return handler.ProblemResponse(http.StatusNotFound, fmt.Sprintf("topic %q does not exist", topic))
	case errors.Is(err, client.ErrUnknownTopic):
		return unavailable(fmt.Sprintf("the route's topic %q does not exist in Kafka", topic))
	case errors.Is(err, logtails.ErrClosed):
		return draining()
	}
	return unavailable(fmt.Sprintf("topic %q cannot be read now: %v; retry shortly", topic, err))
}
