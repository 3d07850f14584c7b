// Package httpkafka answers requests matched to http-kafka routes: fetch from
// views of compacted topics, and produce with correlated replies
// (docs/design.md#http-kafka-fetch, docs/design.md#http-kafka-produce).
package httpkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
)

// Handler answers every request the exchange matched to an http-kafka route;
// it dispatches on the route's capability. It is the processor's
// handler.HTTPHandler.
//
// Fetch and produce are answered from the route's Kafka side (package
// kafkaroute). Without one (New with no clusters) a matched route answers
// 501 with a problem naming the capability and topic, so a configuration can
// be tried (routing, guards, limits) before its Kafka side exists.
type Handler struct {
	log   *slog.Logger
	kafka *kafkaroute.Kafka

	// fetches holds the compiled fetch routes, keyed by their `with`: a
	// reload brings new routes and so new entries, while views (keyed by
	// topic in the ViewSource) carry over.
	fetches sync.Map // *config.With → *Fetch

	// Produce state is keyed by cluster, topic and correlation id, never by
	// route, so it carries over a reload.
	flights      kafkaroute.Flights
	replyWaiters atomic.Int64 // produce requests and follow-ups waiting for a reply now
	replays      atomic.Int64 // requests answered from a stored reply without producing
	pools        producePools
	uuids        kafkaroute.UUIDs // stand for missing idempotency keys
}

var _ handler.HTTPHandler = (*Handler)(nil)

// New returns the http-kafka handler answering from the Kafka side of the
// routes (nil: none is connected, every route answers 501).
func New(log *slog.Logger, kafka *kafkaroute.Kafka) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if kafka == nil {
		kafka = kafkaroute.New(nil)
	}
	return &Handler{log: log, kafka: kafka}
}

// HandleHTTP answers one matched request.
func (h *Handler) HandleHTTP(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
	r := req.Match.Route
	if r.With == nil {
		return handler.ProblemResponse(http.StatusNotImplemented,
			fmt.Sprintf("route %d of binding %q has no `with`, so it has nothing to do", r.Index, req.Match.Binding.Name))
	}
	if r.With.Capability == config.Fetch {
		// A route compiled by an earlier request found its Kafka side then,
		// and a route's Kafka side does not change (the clusters are fixed
		// for the process): no need to look it up again.
		if f, ok := h.fetches.Load(r.With); ok {
			return f.(*Fetch).Serve(ctx, req.Drain, fetchRequest(req))
		}
	}
	kr, err := h.kafka.Route(req.Match.Binding, r)
	switch {
	case errors.Is(err, kafkaroute.ErrNotConnected):
		return handler.ProblemResponse(http.StatusNotImplemented,
			fmt.Sprintf("http-kafka capability %s (topic %q) is not implemented yet", r.With.Capability, r.With.Topic.Raw))
	case err != nil:
		return unavailable(fmt.Sprintf("Kafka is not available for topic %q: %v", r.With.Topic.Raw, err))
	}
	switch r.With.Capability {
	case config.Fetch:
		f, _ := h.fetches.LoadOrStore(r.With, NewFetch(r.With, kr.Cluster.Views))
		return f.(*Fetch).Serve(ctx, req.Drain, fetchRequest(req))
	case config.Produce:
		return h.produce(ctx, kr, req)
	}
	return handler.ProblemResponse(http.StatusNotImplemented,
		fmt.Sprintf("http-kafka capability %s (topic %q) is not implemented yet", r.With.Capability, r.With.Topic.Raw))
}

// ReplyWaiters is the number of produce requests and follow-ups waiting for
// a reply now.
func (h *Handler) ReplyWaiters() int64 { return h.replyWaiters.Load() }

// Replays counts requests answered from a stored reply without producing.
func (h *Handler) Replays() int64 { return h.replays.Load() }

// InFlight is the number of correlation ids this replica is producing or
// waiting on (requests attached to one count once).
func (h *Handler) InFlight() int { return h.flights.Len() }

// Retain drops the compiled fetch routes (and their render caches) that cfg
// no longer has, once a reload swapped it in. A route with long polls still
// open stays until a later reload finds it idle.
func (h *Handler) Retain(cfg *config.Config) {
	keep := map[*config.With]bool{}
	for _, b := range cfg.Bindings {
		for _, r := range b.Routes {
			if r.With != nil {
				keep[r.With] = true
			}
		}
	}
	h.fetches.Range(func(k, f any) bool {
		if !keep[k.(*config.With)] && f.(*Fetch).Waiting() == 0 {
			h.fetches.Delete(k)
		}
		return true
	})
}

// Waiting is the number of fetch requests holding a long poll now.
func (h *Handler) Waiting() int64 {
	var n int64
	h.fetches.Range(func(_, f any) bool {
		n += f.(*Fetch).Waiting()
		return true
	})
	return n
}
