package processor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httphdr"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// debugging reports whether debug lines are logged. Callers check it first:
// the exchange's logger formats the request's attributes on first use, and
// the arguments of a line are allocated even if it is not written.
func (x *exchange) debugging() bool { return x.s.log.Enabled(x.ctx, slog.LevelDebug) }

// The groups of the request's log attributes, in the order they become
// known (exchangeLog.stage).
const (
	logKnownRequest uint8 = 1 + iota // kind, path, request_id, trace ids
	logKnownBinding                  // binding
	logKnownRoute                    // route
)

// exchangeLog is an exchange's logging state. The request's attributes in
// log lines (kind, path, request_id, the trace's ids, binding, route) are
// made from the exchange's own fields when a line is logged, not when they
// become known: most exchanges log nothing, and slog's With formats its
// attributes eagerly. Its fields are guarded by mu: the handler goroutine
// of a gRPC call logs too.
type exchangeLog struct {
	mu      sync.Mutex
	stage   uint8 // how many groups of attributes are known (logKnown*)
	carried uint8 // how many of them logger carries
	// split ends the path in text. An int32 keeps the state's small fields
	// in one word: a long poll holds its exchange for the whole wait.
	split int32
	// text is the request's path without its query followed by its
	// x-request-id, copied out of the request's headers so that a waiting
	// exchange does not keep their whole string alive.
	text   string
	logger *slog.Logger // nil until the first line
	// cause, when set, is why the exchange failed in the processor's own
	// terms (a panic, a protocol error), logged in place of what the answer
	// says.
	cause *failCause
}

// failCause is why an exchange failed in the processor's own terms, with
// the attributes logged with it.
type failCause struct {
	text  string
	attrs []any
}

// requestKnown records the request's path (without its query: a query may
// carry credentials) and request id.
func (l *exchangeLog) requestKnown(path, requestID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// One new string (the concatenation copies both) instead of two
	// substrings that keep the request's header string alive.
	l.text, l.split, l.stage = path+requestID, int32(len(path)), logKnownRequest
}

// known records that the attributes up to stage are known.
func (l *exchangeLog) known(stage uint8) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stage = stage
}

// setCause records the cause logged when the exchange ends.
func (l *exchangeLog) setCause(c *failCause) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cause = c
}

// failCause is the cause recorded, or nil.
func (l *exchangeLog) failCause() *failCause {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// logger is the exchange's logger, with the request's attributes.
func (x *exchange) logger() *slog.Logger {
	l := &x.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.logger == nil || l.carried < l.stage {
		base := l.logger
		if base == nil {
			base = x.s.log
		}
		if attrs := x.logAttrsSince(l.carried); len(attrs) > 0 {
			base = slog.New(base.Handler().WithAttrs(attrs))
		}
		l.logger, l.carried = base, l.stage
	}
	return l.logger
}

// logAttrsSince are the attributes of the groups known now but not at
// stage. Called with x.log.mu held.
func (x *exchange) logAttrsSince(stage uint8) []slog.Attr {
	var attrs []slog.Attr
	l := &x.log
	if stage < logKnownRequest && l.stage >= logKnownRequest {
		attrs = append(attrs, slog.String("kind", kindLabel(x.kind)), slog.String("path", l.text[:l.split]), slog.String("request_id", l.text[l.split:]))
		attrs = append(attrs, traceAttrs(x.span)...)
	}
	if stage < logKnownBinding && l.stage >= logKnownBinding {
		attrs = append(attrs, slog.String("binding", x.binding.Name))
	}
	if stage < logKnownRoute && l.stage >= logKnownRoute {
		attrs = append(attrs, slog.String("route", x.series.cfg.ID))
	}
	return attrs
}

// logEnd writes the exchange's one line when it failed (an error answer or
// a protocol error), with its cause: warn for the processor's or Kafka's
// failures, info for the client's mistakes, error for a panic. Nothing of
// the request's body or credentials is in it.
func (x *exchange) logEnd(st, answerCause string, answered bool) {
	c := x.log.failCause()
	var cause string
	var attrs []any
	if c != nil {
		cause, attrs = c.text, c.attrs
	}
	failed := (answered && answerCause != "") || x.protocolErr
	if !failed {
		if x.debugging() {
			x.logger().Debug("exchange ended", "status", st, "duration", time.Since(x.start))
		}
		return
	}
	level := slog.LevelInfo
	switch {
	case len(attrs) > 0:
		level = slog.LevelError
	case x.protocolErr || failedStatus(st):
		level = slog.LevelWarn
	}
	if cause == "" {
		cause = answerCause
	}
	x.logger().Log(context.Background(), level, "exchange failed",
		append([]any{"status", st, "cause", cause, "duration", time.Since(x.start)}, attrs...)...)
}

// failedBecause records the cause logged when the exchange ends.
func (x *exchange) failedBecause(cause string, attrs ...any) {
	x.log.setCause(&failCause{text: cause, attrs: attrs})
}

// failedStatus tells server errors (5xx, and gRPC codes other than OK and
// the client's own mistakes) from answers that went as planned.
func failedStatus(st string) bool {
	if len(st) == 3 && st[0] == '5' {
		return true
	}
	switch st {
	case "UNKNOWN", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS":
		return true
	}
	return false
}

func (x *exchange) bindingLabel() string {
	if x.binding == nil {
		return labelNone
	}
	return x.binding.Name
}

func (x *exchange) routeLabel() string {
	if x.series == nil {
		return labelNone
	}
	return x.series.route
}

func (x *exchange) capabilityLabel() string {
	if x.series == nil {
		return labelNone
	}
	return x.series.capability
}

func routeLabelOf(r *config.Route) string {
	if r == nil || r.ID == "" {
		return labelNone
	}
	return r.ID
}

func capabilityLabelOf(r *config.Route) string {
	if r == nil || r.With == nil || r.With.Capability == "" {
		return labelNone
	}
	return string(r.With.Capability)
}

// matched records the route an exchange matched, for its metrics, and
// whether the exchange is a long poll (an HTTP fetch asking to wait) or a
// stream (a gRPC fetch), which the duration histogram keeps apart.
func (x *exchange) matched(m *route.Match, headers route.Headers) {
	x.series = &x.snap.series[m.Ordinal] // m.Route's
	if m.Route.With != nil && m.Route.With.Capability == config.Fetch {
		if x.kind == kindGRPC || m.Binding.Type == config.SSEKafka {
			x.mode = modeCodeStream
		} else if p := httphdr.ParsePrefer(headers.Values("prefer")); p.WaitSet && p.Wait > 0 {
			x.mode = modeCodeLongPoll
		}
	}
	x.log.known(logKnownRoute)
	if x.debugging() {
		x.logger().Debug("route matched") // the logger carries the route
	}
}

func modeLabel(mode uint8) string {
	switch mode {
	case modeCodeLongPoll:
		return modeLongPoll
	case modeCodeStream:
		return modeStream
	}
	return modeRequest
}

func kindLabel(kind uint8) string {
	switch kind {
	case kindHTTP:
		return "http"
	case kindGRPC:
		return "grpc"
	}
	return "unknown" // the stream ended before its request headers
}
