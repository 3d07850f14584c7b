// Package grpckafka answers calls matched to grpc-kafka routes (DESIGN §6.4,
// §6.5): fetch streams and correlated produce.
package grpckafka

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
)

// Handler answers every call the exchange matched to a grpc-kafka route; it
// dispatches on the route's capability. It is the processor's
// capability.GRPCHandler.
//
// Capabilities are wired in as they gain behaviour. Until then a matched
// route ends with UNIMPLEMENTED naming the capability and topic.
type Handler struct {
	log *slog.Logger
}

var _ capability.GRPCHandler = (*Handler)(nil)

// New returns the grpc-kafka handler.
func New(log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{log: log}
}

// HandleGRPC answers one matched call.
func (h *Handler) HandleGRPC(ctx context.Context, call *capability.GRPCCall) capability.Status {
	r := call.Match.Route
	if r.With == nil {
		return capability.NewStatus(codes.Unimplemented,
			fmt.Sprintf("route %d of binding %q has no `with`, so it has nothing to do", r.Index, call.Match.Binding.Name))
	}
	return capability.NewStatus(codes.Unimplemented,
		fmt.Sprintf("grpc-kafka capability %s (topic %q) of %s/%s is not implemented yet", r.With.Capability, r.With.Topic.Raw, call.Service, call.Method))
}
