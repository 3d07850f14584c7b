// Package httpkafka answers requests matched to http-kafka routes (DESIGN §6.2,
// §6.3): fetch from views of compacted topics, and produce with correlated
// replies.
package httpkafka

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
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
	log *slog.Logger
}

var _ capability.HTTPHandler = (*Handler)(nil)

// New returns the http-kafka handler.
func New(log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{log: log}
}

// HandleHTTP answers one matched request.
func (h *Handler) HandleHTTP(ctx context.Context, req *capability.HTTPRequest) *capability.HTTPResponse {
	r := req.Match.Route
	if r.With == nil {
		return capability.ProblemResponse(http.StatusNotImplemented,
			fmt.Sprintf("route %d of binding %q has no `with`, so it has nothing to do", r.Index, req.Match.Binding.Name))
	}
	return capability.ProblemResponse(http.StatusNotImplemented,
		fmt.Sprintf("http-kafka capability %s (topic %q) is not implemented yet", r.With.Capability, r.With.Topic.Raw))
}
