package grpckafka

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/streampace"
)

// fetch answers one call of a fetch route.
func (h *Handler) fetch(ctx context.Context, kr *kafkaroute.Route, call *handler.GRPCCall) handler.Status {
	if call.Drain.Err() != nil {
		return draining()
	}
	if st, bad := readEmptyRequest(ctx, call); bad {
		return st
	}
	fs, st, bad := h.openStream(ctx, kr, call)
	if bad {
		return st
	}
	h.streams.Add(1)
	defer h.streams.Add(-1)

	first, err := fs.ls.Peek(ctx)
	if err != nil {
		fs.ls.Close()
		return h.streamEnd(err, ctx, fs, call.Limits)
	}
	if err := call.Out.SendHeader(ctx, metadataOf(first)); err != nil {
		fs.ls.Close()
		return handler.NewStatus(codes.Canceled, "the call ended")
	}
	return h.send(ctx, call, fs)
}

// fetchStream is a fetch call's open stream and the topic it reads.
type fetchStream struct {
	ls     *logtails.Stream
	topic  string
	static bool   // the route's topic, not a template
	meta   string // the reliability metadata's name, for a gap's resume id
}

// openStream resolves the call's topic and resume position and opens its
// stream on the cluster's log tails.
func (h *Handler) openStream(ctx context.Context, kr *kafkaroute.Route, call *handler.GRPCCall) (*fetchStream, handler.Status, bool) {
	w := call.Match.Route.With
	opts := grpcOptions(call.Match.Binding)
	start, st, bad := resumePosition(call.Headers, opts.ReliabilityMetadata)
	if bad {
		return nil, st, true
	}
	resolve := kafkaroute.RefsOf(call.Match).Resolve
	topic, err := kafkaroute.Topic(w, resolve)
	if err != nil {
		return nil, handler.NewStatus(codes.InvalidArgument, err.Error()), true
	}
	static := w.Topic.Static()
	compacted, err := h.kafka.Compaction.Compacted(ctx, kr.Cluster, kr.Exit, topic, call.Limits.KafkaTimeout)
	if err != nil {
		return nil, topicStatus(err, topic, static), true
	}
	tails, err := kr.Cluster.LogTails()
	if err != nil {
		return nil, handler.NewStatus(codes.Unavailable, fmt.Sprintf("the log tails of kafka binding %q cannot start: %v", kr.Exit, err)), true
	}
	octx, cancel := context.WithTimeout(ctx, call.Limits.KafkaTimeout)
	ls, err := tails.Open(octx, logtails.StreamOptions{
		Topic:     topic,
		Framer:    grpcwire.ReliableFrame{Field: opts.ReliabilityField},
		Start:     start,
		Compacted: compacted,
		Filters:   kafkaroute.StreamFilters(w.Filters, resolve),
		LagBudget: call.Limits.StreamLagBudget,
	})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, handler.NewStatus(codes.Canceled, "the client went away"), true
		}
		var gap *logtails.GapError
		if errors.As(err, &gap) {
			return nil, gapStatus(gap, opts.ReliabilityMetadata), true
		}
		return nil, topicStatus(err, topic, static), true
	}
	return &fetchStream{ls: ls, topic: topic, static: static, meta: opts.ReliabilityMetadata}, handler.Status{}, false
}

// send streams the records until the stream ends. The sender owns the
// stream. The handler waits apart from it: a send can block for as long as
// Envoy does not read, and the lag budget, the drain and the client's
// cancel must still end the call then.
func (h *Handler) send(ctx context.Context, call *handler.GRPCCall, fs *fetchStream) handler.Status {
	ls := fs.ls
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ended := make(chan error, 1)
	go func() {
		defer ls.Close()
		ended <- h.sendLoop(sctx, call, ls)
	}()
	select {
	case err := <-ended:
		return h.streamEnd(err, ctx, fs, call.Limits)
	case <-ls.Lagged():
		return h.streamEnd(logtails.ErrLagged, ctx, fs, call.Limits)
	case <-ls.Retired():
		return h.streamEnd(ls.RetiredErr(), ctx, fs, call.Limits)
	case <-call.Drain.Done():
		return draining()
	case <-ctx.Done():
		// The client went away (its send fails at once) or grpc-timeout
		// elapsed (the exchange answers DEADLINE_EXCEEDED).
		return handler.NewStatus(codes.Canceled, "the call ended")
	}
}

// sendLoop sends the stream's chunks, paced, until a send or a read fails.
func (h *Handler) sendLoop(ctx context.Context, call *handler.GRPCCall, ls *logtails.Stream) error {
	pace := streampace.New(streampace.Spacing(call.Limits.StreamSendInterval, call.Limits.StreamSendRate, &h.streams))
	defer pace.Stop()
	for {
		if err := pace.Wait(ctx); err != nil {
			return err
		}
		chunk, err := ls.Next(ctx)
		if err == nil {
			err = call.Out.SendFramed(ctx, chunk)
			pace.Sent(ls.Behind())
		}
		if err != nil {
			return err
		}
	}
}

func draining() handler.Status {
	return handler.NewStatus(codes.Unavailable, "the processor is shutting down; reconnect (with last-message-id to resume)")
}

// streamEnd is the status of a stream that ended on err.
func (h *Handler) streamEnd(err error, ctx context.Context, fs *fetchStream, limits config.Limits) handler.Status {
	topic := fs.topic
	var gap *logtails.GapError
	switch {
	case ctx.Err() != nil:
		return handler.NewStatus(codes.Canceled, "the client went away")
	case errors.Is(err, logtails.ErrLagged):
		h.lagged.Add(1)
		return handler.NewStatus(codes.ResourceExhausted, fmt.Sprintf(
			"the stream fell more than limits.stream-lag-budget (%d records) behind topic %q; reconnect with the id of the last message received to resume",
			limits.StreamLagBudget, topic))
	case errors.Is(err, logtails.ErrClosed):
		return draining()
	case errors.Is(err, logtails.ErrPartitionsChanged):
		counts := ""
		var pc *logtails.PartitionsChangedError
		if errors.As(err, &pc) {
			counts = fmt.Sprintf(" (%d → %d)", pc.Was, pc.Now)
		}
		return handler.NewStatus(codes.Unavailable, fmt.Sprintf(
			"topic %q gained partitions%s; reconnect with the id of the last message received to resume", topic, counts))
	case errors.Is(err, views.ErrLater):
		// The next record's schema cannot be had (registry outage, cold
		// cache): the stream ends before it rather than skip it, and the
		// client's resume reads it again.
		return handler.NewStatus(codes.Unavailable, fmt.Sprintf(
			"the next record of topic %q cannot be decoded now: %s; reconnect with the id of the last message received to resume at it",
			topic, laterReason(err)))
	case errors.As(err, &gap):
		return gapStatus(gap, fs.meta)
	case errors.Is(err, client.ErrNotReady), errors.Is(err, client.ErrUnknownTopic):
		return topicStatus(err, topic, fs.static)
	}
	h.log.Debug("fetch stream ended", "topic", topic, "err", err)
	return handler.NewStatus(codes.Unavailable, fmt.Sprintf("the stream of topic %q ended: %v; reconnect to resume", topic, err))
}

// gapStatus is how a stream that cannot continue without skipping records
// ends (or is refused): OUT_OF_RANGE, whose message says which records are
// missing and why, and a trailer named as the reliability metadata holding
// the id to resume from knowingly (past the missing records, or the topic
// from its start). A client that never reads it gets no record silently
// skipped: resuming with its own last id is refused again.
func gapStatus(gap *logtails.GapError, meta string) handler.Status {
	id := base64.RawURLEncoding.EncodeToString(grpcwire.AppendMessageIDOf(nil, gap.Resume))
	what := "past the missing records"
	if len(gap.Resume) == 0 {
		what = "from the topic's start"
	}
	st := handler.NewStatus(codes.OutOfRange, fmt.Sprintf(
		"%v; to continue knowing this, reconnect with the %s this status carries in its trailers (%s: %s)", gap, meta, what, id))
	st.Trailers = []route.Header{{Name: meta, Value: id}}
	return st
}

// readEmptyRequest reads the fetch request: one empty message (or none).
func readEmptyRequest(ctx context.Context, call *handler.GRPCCall) (handler.Status, bool) {
	msg, err := call.In.Recv(ctx)
	switch {
	case errors.Is(err, io.EOF):
		return handler.Status{}, false
	case err != nil:
		if st, ok := status.FromError(err); ok {
			return handler.NewStatus(st.Code(), st.Message()), true
		}
		return handler.NewStatus(codes.Canceled, "the request ended: "+err.Error()), true
	case len(msg) != 0:
		return handler.NewStatus(codes.InvalidArgument, fmt.Sprintf(
			"a fetch stream takes an empty request (google.protobuf.Empty); this one has %d bytes", len(msg))), true
	}
	return handler.Status{}, false
}

// resumePosition reads the reliability metadata: name (text) or name-bin.
func resumePosition(h route.Headers, name string) (map[int32]int64, handler.Status, bool) {
	v, ok := h.Lookup(name)
	which := name
	if !ok || strings.TrimSpace(v) == "" {
		which = name + "-bin"
		v, ok = h.Lookup(which)
	}
	if !ok || strings.TrimSpace(v) == "" {
		return nil, handler.Status{}, false
	}
	if i := strings.IndexByte(v, ','); i >= 0 {
		v = v[:i] // several -bin values: the first
	}
	start, err := grpcwire.ParseMessageID(v)
	if err != nil {
		return nil, handler.NewStatus(codes.InvalidArgument, fmt.Sprintf(
			"%s is not a message id this gateway issued (%v); send the bytes of the reliability field of the last message received", which, err)), true
	}
	return start, handler.Status{}, false
}
