// Package httpkafka answers requests matched to http-kafka routes (DESIGN §6.2,
// §6.3): fetch from views of compacted topics, and produce with correlated
// replies.
package httpkafka

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// Handler answers every request the exchange matched to an http-kafka route;
// it dispatches on the route's capability. It is the processor's
// capability.HTTPHandler.
//
// Capabilities are wired in as they gain behaviour. Until then a matched
// route answers 501 with a problem naming the capability and topic, so a
// configuration can be tried (routing, guards, limits) before its Kafka side
// exists.
type Handler struct {
	log      *slog.Logger
	clusters map[string]*kafkaio.Cluster // by kafka binding name

	// fetches holds the compiled fetch routes, keyed by their `with`: a
	// reload brings new routes and so new entries, while views (keyed by
	// topic in the ViewSource) carry over.
	fetches sync.Map // *config.With → *Fetch
}

var _ capability.HTTPHandler = (*Handler)(nil)

// New returns the http-kafka handler. clusters are the kafka bindings by
// name (nil: every route answers 501).
func New(log *slog.Logger, clusters map[string]*kafkaio.Cluster) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{log: log, clusters: clusters}
}

// HandleHTTP answers one matched request.
func (h *Handler) HandleHTTP(ctx context.Context, req *capability.HTTPRequest) *capability.HTTPResponse {
	r := req.Match.Route
	if r.With == nil {
		return capability.ProblemResponse(http.StatusNotImplemented,
			fmt.Sprintf("route %d of binding %q has no `with`, so it has nothing to do", r.Index, req.Match.Binding.Name))
	}
	if r.With.Capability == config.Fetch {
		if src, ok := h.clusters[r.Exit]; ok {
			f, ok := h.fetches.Load(r.With)
			if !ok {
				f, _ = h.fetches.LoadOrStore(r.With, NewFetch(r.With, src, req.Limits))
			}
			return f.(*Fetch).Serve(ctx, req.Drain, fetchRequest(req))
		}
	}
	return capability.ProblemResponse(http.StatusNotImplemented,
		fmt.Sprintf("http-kafka capability %s (topic %q) is not implemented yet", r.With.Capability, r.With.Topic.Raw))
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
