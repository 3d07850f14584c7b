// Package processor is kafka-ext-proc's Envoy external processor: a gRPC
// envoy.service.ext_proc.v3.ExternalProcessor whose every Process stream is
// one HTTP or gRPC request, answered with a locally synthesized response:
// Kafka is the backend, no upstream sits behind Envoy for these routes
// (docs/design.md#the-product).
//
// One exchange runs per Process stream: Recv is drained (by the exchange's
// goroutine, or a reader goroutine while it must wait for more), a
// serialised writer sends, the request is matched against an immutable route
// snapshot (swapped atomically on reload), collected (HTTP) or reassembled
// message by message (gRPC), and handed to a capability handler (package
// capability). Answers are always replies to request_headers — an
// ImmediateResponse or a StreamedImmediateResponse — never replies to body or
// trailer messages, and exactly one terminal answer is sent per exchange.
//
// Envoy must run the filter with request_header_mode SEND,
// request_body_mode FULL_DUPLEX_STREAMED, request_trailer_mode SEND and the
// response side SKIP/NONE; a stream announcing another body mode is answered
// with an error naming the setting. The gRPC server should allow received
// messages as large as Envoy's body chunks (grpc.MaxRecvMsgSize).
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/timerpool"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// GuardChecker verifies credentials for guarded routes (see route.GuardChecker).
type GuardChecker = route.GuardChecker

// BindingMetadata is the ext_proc gRPC initial metadata (set per route in
// envoy.yaml, grpc_initial_metadata) that names the binding to use when the
// configuration has several bindings of the request's type.
const BindingMetadata = "x-kafka-ext-proc-binding"

// defaultCloseWait bounds how long an exchange that answered an incomplete
// request waits for Envoy to cancel the stream (Envoy does so right after the
// final message); an answer to a complete request ends the stream at once.
const defaultCloseWait = 10 * time.Second

// Options configure a Server.
type Options struct {
	Config *config.Config // required
	Logger *slog.Logger   // nil: discard
	// Registerer receives the processor's metrics; nil: a private registry
	// (metrics kept but not exposed). Never the global registry.
	Registerer prometheus.Registerer
	// Drain is cancelled when the process drains; handlers and the exchange's
	// own waits end on it. nil: never.
	Drain context.Context
	// Guards checks guarded routes; nil: guarded routes fail closed (401).
	Guards GuardChecker
	// HTTP and GRPC answer matched routes (required: the bindings, e.g.
	// httpkafka and grpckafka, are the caller's choice, so this package
	// depends on none of them).
	HTTP handler.HTTPHandler
	GRPC handler.GRPCHandler
	// SSE answers sse-kafka routes; nil: they are answered 501.
	SSE handler.SSEHandler
	// TracerProvider makes a span per exchange (nil: no tracing).
	TracerProvider trace.TracerProvider
	// CloseWait bounds the wait for Envoy to cancel a stream answered
	// before its request was complete; 0: 10s.
	CloseWait time.Duration
}

// Server is the ext_proc server. It is safe for concurrent use.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	snap      atomic.Pointer[snapshot]
	tracing   tracing
	log       *slog.Logger
	drain     context.Context
	guards    GuardChecker
	http      handler.HTTPHandler
	grpc      handler.GRPCHandler
	sse       handler.SSEHandler
	metrics   *metrics
	closeWait time.Duration
	timers    timerpool.Pool // the lingers' timers: one per lingering exchange, stopped within closeWait

	// live counts Process calls and the goroutines they start, so tests (and
	// a shutdown) can wait until no exchange holds anything.
	live sync.WaitGroup
}

// snapshot is one immutable routing state; an exchange keeps the snapshot it
// started with, whatever reloads happen meanwhile.
type snapshot struct {
	table  *route.Table
	limits config.Limits
	series []routeSeries // the metric series of table's routes, by route.Match.Ordinal
}

// New builds a Server from a configuration.
func New(opts Options) (*Server, error) {
	s := &Server{
		log:       opts.Logger,
		drain:     opts.Drain,
		guards:    opts.Guards,
		http:      opts.HTTP,
		grpc:      opts.GRPC,
		sse:       opts.SSE,
		closeWait: opts.CloseWait,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.drain == nil {
		s.drain = context.Background()
	}
	if s.http == nil || s.grpc == nil {
		return nil, errors.New("creating the processor: Options.HTTP and Options.GRPC are required")
	}
	if s.closeWait <= 0 {
		s.closeWait = defaultCloseWait
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering processor metrics: %w", err)
	}
	s.metrics = m
	s.tracing = newTracing(opts.TracerProvider)
	if err := s.Swap(opts.Config); err != nil {
		return nil, err
	}
	return s, nil
}

// Register registers the ExternalProcessor service on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	extprocv3.RegisterExternalProcessorServer(g, s)
}

// Swap installs a new configuration: its routing snapshot is built first and
// swapped in atomically; on error the current one stays. Exchanges already
// running keep the snapshot they started with.
func (s *Server) Swap(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("swapping routes: no configuration")
	}
	t, err := route.Build(cfg)
	if err != nil {
		return fmt.Errorf("swapping routes: %w", err)
	}
	s.snap.Store(&snapshot{table: t, limits: cfg.Limits.WithDefaults(), series: s.metrics.newRouteSeries(t)})
	s.log.Info("routes installed", "source", cfg.Source, "bindings", len(cfg.Bindings))
	return nil
}

// Process runs one exchange: one HTTP or gRPC request.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.live.Add(1)
	defer s.live.Done()
	s.metrics.inFlight.Inc()
	defer s.metrics.inFlight.Dec()
	x := newExchange(s, stream)
	defer x.close()
	return x.run()
}
