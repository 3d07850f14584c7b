package grpckafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
)

// Handler answers every call the exchange matched to a grpc-kafka route; it
// dispatches on the route's capability. It is the processor's
// handler.GRPCHandler.
//
// What it holds is keyed by correlation id (calls in flight), never by
// route, so it carries over a reload; the log tails belong to the clusters.
type Handler struct {
	log   *slog.Logger
	kafka *kafkaroute.Kafka

	flights kafkaroute.Flights

	streams atomic.Int64 // fetch streams open
	lagged  atomic.Int64 // fetch streams ended for their lag budget
	calls   atomic.Int64 // produce calls in progress
	replays atomic.Int64 // produce calls answered from stored replies, nothing produced
}

var _ handler.GRPCHandler = (*Handler)(nil)

// New returns the grpc-kafka handler answering from the Kafka side of the
// routes (nil: none is connected, every route ends with UNIMPLEMENTED, so a
// configuration can be tried without Kafka).
func New(log *slog.Logger, kafka *kafkaroute.Kafka) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if kafka == nil {
		kafka = kafkaroute.New(nil)
	}
	return &Handler{log: log, kafka: kafka}
}

// HandleGRPC answers one matched call.
func (h *Handler) HandleGRPC(ctx context.Context, call *handler.GRPCCall) handler.Status {
	r := call.Match.Route
	if r.With == nil {
		return handler.NewStatus(codes.Unimplemented,
			fmt.Sprintf("route %d of binding %q has no `with`, so it has nothing to do", r.Index, call.Match.Binding.Name))
	}
	kr, err := h.kafka.Route(call.Match.Binding, r)
	switch {
	case errors.Is(err, kafkaroute.ErrNotConnected):
		return handler.NewStatus(codes.Unimplemented, fmt.Sprintf(
			"grpc-kafka capability %s (topic %q) of %s/%s cannot run: kafka binding %q is not connected in this processor",
			r.With.Capability, r.With.Topic.Raw, call.Service, call.Method, r.Exit))
	case err != nil:
		return handler.NewStatus(codes.Unavailable, fmt.Sprintf("kafka binding %q cannot serve this route now: %v", r.Exit, err))
	}
	switch r.With.Capability {
	case config.Fetch:
		return h.fetch(ctx, kr, call)
	case config.Produce:
		return h.produce(ctx, kr, call)
	}
	return handler.NewStatus(codes.Unimplemented, fmt.Sprintf("unknown capability %q", r.With.Capability))
}

// Stats are the handler's counters.
type Stats struct {
	Streams int64 // fetch streams open
	Lagged  int64 // fetch streams ended for their lag budget
	Calls   int64 // produce calls in progress
	Replays int64 // produce calls answered from stored replies
	Logs    logtails.Stats
}

// Stats reports the handler's counters and the sizes of the log tails.
func (h *Handler) Stats() Stats {
	return Stats{Streams: h.streams.Load(), Lagged: h.lagged.Load(), Calls: h.calls.Load(), Replays: h.replays.Load(),
		Logs: h.kafka.LogTailsStats()}
}

func grpcOptions(b *config.Binding) *config.GRPCOptions {
	if b != nil && b.GRPC != nil {
		return b.GRPC
	}
	return &config.GRPCOptions{
		IdempotencyMetadata: config.DefaultIdempotencyKey,
		ReliabilityField:    config.DefaultReliabilityField,
		ReliabilityMetadata: config.DefaultReliabilityMetadata,
		Correlation: config.CorrelationHeaders{
			ReplyTo: config.DefaultReplyToHeader, CorrelationID: config.DefaultCorrelationIDHeader,
			Service: config.DefaultServiceHeader, Method: config.DefaultMethodHeader,
			Status: "gateway:status", Message: "gateway:message",
		},
	}
}

// topicStatus answers a topic that cannot be read or written: a templated
// topic that does not exist is the caller's NOT_FOUND; a configured one is
// the service's problem (UNAVAILABLE, a retry may work once it exists).
func topicStatus(err error, topic string, static bool) handler.Status {
	if errors.Is(err, views.ErrTopicDeleted) {
		// Said apart: a client that just read the topic sees why it is gone.
		code, whose := codes.NotFound, "topic"
		if static {
			code, whose = codes.Unavailable, "the route's topic"
		}
		return handler.NewStatus(code, fmt.Sprintf(
			"%s %q was deleted from Kafka while the processor read it: it is served again once it is created again (a stream then starts over: its messages are a new generation)", whose, topic))
	}
	if errors.Is(err, client.ErrUnknownTopic) {
		if static {
			return handler.NewStatus(codes.Unavailable, fmt.Sprintf("the route's topic %q does not exist in Kafka", topic))
		}
		return handler.NewStatus(codes.NotFound, fmt.Sprintf("topic %q does not exist", topic))
	}
	return handler.NewStatus(codes.Unavailable, fmt.Sprintf("topic %q cannot be read now: %v; retry shortly", topic, err))
}
