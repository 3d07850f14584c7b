// Package grpckafka answers calls matched to grpc-kafka routes (DESIGN §6.4,
// §6.5): fetch streams and correlated produce.
//
// Fetch (fetch.go): a server stream of the topic's records, history then
// live until the client cancels, each message carrying its message id in
// the reliability field so the client can resume after it. Produce
// (produce.go): every request message becomes a record, the client's
// half-close a null-value record, and the responder's reply records with the
// call's correlation id become the response, ended by a null-value reply
// carrying the status.
package grpckafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// Handler answers every call the exchange matched to a grpc-kafka route; it
// dispatches on the route's capability. It is the processor's
// capability.GRPCHandler.
//
// Everything it holds is keyed by cluster and topic (log readers, topic
// configurations) or by correlation id (calls in flight), never by route, so
// it carries over a reload.
type Handler struct {
	log      *slog.Logger
	clusters map[string]*kafkaio.Cluster // by kafka binding name

	mu   sync.Mutex
	logs map[string]*kafkaio.Logs // by kafka binding name, created on first fetch

	compaction compaction
	flights    flights

	streams atomic.Int64 // fetch streams open
	lagged  atomic.Int64 // fetch streams ended for their lag budget
	calls   atomic.Int64 // produce calls in progress
	replays atomic.Int64 // produce calls answered from stored replies, nothing produced
}

var _ capability.GRPCHandler = (*Handler)(nil)

// Option configures a Handler.
type Option func(*Handler)

// Clusters gives the handler the kafka bindings by name. Without them every
// route ends with UNIMPLEMENTED (a configuration can be tried without Kafka).
func Clusters(clusters map[string]*kafkaio.Cluster) Option {
	return func(h *Handler) { h.clusters = clusters }
}

// New returns the grpc-kafka handler.
func New(log *slog.Logger, opts ...Option) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{log: log, logs: map[string]*kafkaio.Logs{}}
	for _, o := range opts {
		o(h)
	}
	return h
}

// HandleGRPC answers one matched call.
func (h *Handler) HandleGRPC(ctx context.Context, call *capability.GRPCCall) capability.Status {
	r := call.Match.Route
	if r.With == nil {
		return capability.NewStatus(codes.Unimplemented,
			fmt.Sprintf("route %d of binding %q has no `with`, so it has nothing to do", r.Index, call.Match.Binding.Name))
	}
	cl, ok := h.clusters[r.Exit]
	if !ok {
		return capability.NewStatus(codes.Unimplemented, fmt.Sprintf(
			"grpc-kafka capability %s (topic %q) of %s/%s cannot run: kafka binding %q is not connected in this processor",
			r.With.Capability, r.With.Topic.Raw, call.Service, call.Method, r.Exit))
	}
	switch r.With.Capability {
	case config.Fetch:
		return h.fetch(ctx, cl, call)
	case config.Produce:
		return h.produce(ctx, cl, call)
	}
	return capability.NewStatus(codes.Unimplemented, fmt.Sprintf("unknown capability %q", r.With.Capability))
}

// Stats are the handler's counters.
type Stats struct {
	Streams int64 // fetch streams open
	Lagged  int64 // fetch streams ended for their lag budget
	Calls   int64 // produce calls in progress
	Replays int64 // produce calls answered from stored replies
	Logs    kafkaio.LogsStats
}

// Stats reports the handler's counters and the sizes of its log readers.
func (h *Handler) Stats() Stats {
	st := Stats{Streams: h.streams.Load(), Lagged: h.lagged.Load(), Calls: h.calls.Load(), Replays: h.replays.Load()}
	h.mu.Lock()
	logs := make([]*kafkaio.Logs, 0, len(h.logs))
	for _, l := range h.logs {
		logs = append(logs, l)
	}
	h.mu.Unlock()
	for _, l := range logs {
		ls := l.Stats()
		st.Logs.Topics += ls.Topics
		st.Logs.Streams += ls.Streams
		st.Logs.RingRecords += ls.RingRecords
		st.Logs.RingBytes += ls.RingBytes
		st.Logs.Readers += ls.Readers
	}
	return st
}

// logsOf returns the log readers of a cluster, creating them on first use
// with the limits of the call that needs them.
func (h *Handler) logsOf(exit string, cl *kafkaio.Cluster, limits config.Limits) (*kafkaio.Logs, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.logs[exit]; ok {
		return l, nil
	}
	l, err := kafkaio.NewLogs(cl.Client, kafkaio.LogsOptions{
		KafkaTimeout: limits.KafkaTimeout,
		RingRecords:  max(limits.StreamLagBudget, 1024),
		TopicIdle:    limits.ViewIdle,
		Logger:       h.log,
	})
	if err != nil {
		return nil, err
	}
	h.logs[exit] = l
	return l, nil
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
		},
	}
}

// checkTopic refuses a templated topic that resolves to a name outside the
// route's topic-pattern, to an internal one, or to one Kafka cannot have.
// The last check comes first: librdkafka takes names as C strings, so an
// identity "secret\x00-public" would match the pattern *-public here and
// reach Kafka as "secret".
func checkTopic(topic, pattern string) (capability.Status, bool) {
	if topic != "" && !legalTopic(topic) {
		return capability.NewStatus(codes.InvalidArgument, fmt.Sprintf(
			"topic %q is not a legal Kafka topic name (1 to 249 characters of A-Z a-z 0-9 . _ -, not . or ..)", topic)), true
	}
	if topic == "" || strings.HasPrefix(topic, "_") {
		return capability.NewStatus(codes.InvalidArgument,
			fmt.Sprintf("topic %q is not allowed: names starting with '_' (or empty) are refused", topic)), true
	}
	if ok, err := path.Match(pattern, topic); err != nil || !ok {
		return capability.NewStatus(codes.InvalidArgument,
			fmt.Sprintf("topic %q does not match the route's topic-pattern %q", topic, pattern)), true
	}
	return capability.Status{}, false
}

// legalTopic reports whether name is a legal Kafka topic name (Kafka's
// Topic.validate): 1 to 249 characters of [a-zA-Z0-9._-], not "." or "..".
func legalTopic(name string) bool {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// topicStatus answers a topic that cannot be read or written: a templated
// topic that does not exist is the caller's NOT_FOUND; a configured one is
// the service's problem (UNAVAILABLE, a retry may work once it exists).
func topicStatus(err error, topic string, static bool) capability.Status {
	if errors.Is(err, kafkaio.ErrUnknownTopic) {
		if static {
			return capability.NewStatus(codes.Unavailable, fmt.Sprintf("the route's topic %q does not exist in Kafka", topic))
		}
		return capability.NewStatus(codes.NotFound, fmt.Sprintf("topic %q does not exist", topic))
	}
	return capability.NewStatus(codes.Unavailable, fmt.Sprintf("topic %q cannot be read now: %v; retry shortly", topic, err))
}

// compaction caches whether topics are compacted (cleanup.policy), per
// cluster: fetch reads a compacted topic's view as its history, and produce
// needs a key for one. Answers are kept a minute; a missing topic a second.
type compaction struct {
	mu    sync.Mutex
	known map[compactionKey]compactionEntry
}

type compactionKey struct{ cluster, topic string }

type compactionEntry struct {
	compacted bool
	err       error
	until     time.Time
}

// maxCompactionEntries bounds the cache (templated topics are per caller).
const maxCompactionEntries = 4096

func (c *compaction) compacted(ctx context.Context, cl *kafkaio.Cluster, exit, topic string, timeout time.Duration) (bool, error) {
	k := compactionKey{exit, topic}
	now := time.Now()
	c.mu.Lock()
	if e, ok := c.known[k]; ok && now.Before(e.until) {
		c.mu.Unlock()
		return e.compacted, e.err
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := cl.TopicConfig(ctx, topic)
	e := compactionEntry{until: now.Add(time.Minute)}
	switch {
	case errors.Is(err, kafkaio.ErrUnknownTopic):
		e.err, e.until = err, now.Add(time.Second)
	case err != nil:
		return false, fmt.Errorf("%w: %w", kafkaio.ErrNotReady, err) // not cached: Kafka may be back soon
	default:
		e.compacted = strings.Contains(cfg["cleanup.policy"], "compact")
	}
	c.mu.Lock()
	if c.known == nil || len(c.known) >= maxCompactionEntries {
		c.known = map[compactionKey]compactionEntry{}
	}
	c.known[k] = e
	c.mu.Unlock()
	return e.compacted, e.err
}
