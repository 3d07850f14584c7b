package processor

import (
	"context"
	"log/slog"
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
// known (exchange.logStage).
const (
	logKnownRequest uint8 = 1 + iota // kind, path, request_id, trace ids
	logKnownBinding                  // binding
	logKnownRoute                    // route
)

// logger is the exchange's logger, with the request's attributes.
func (x *exchange) logger() *slog.Logger {
	x.logMu.Lock()
	defer x.logMu.Unlock()
	if x.logged == nil || x.loggedStage < x.logStage {
		base := x.logged
		if base == nil {
			base = x.s.log
		}
		if attrs := x.logAttrsSince(x.loggedStage); len(attrs) > 0 {
			base = slog.New(base.Handler().WithAttrs(attrs))
		}
		x.logged, x.loggedStage = base, x.logStage
	}
	return x.logged
}

// logAttrsSince are the attributes of the groups known now but not at
// stage. Called with logMu held.
func (x *exchange) logAttrsSince(stage uint8) []slog.Attr {
	var attrs []slog.Attr
	if stage < logKnownRequest && x.logStage >= logKnownRequest {
		attrs = append(attrs, slog.String("kind", kindLabel(x.kind)), slog.String("path", x.logText[:x.logSplit]), slog.String("request_id", x.logText[x.logSplit:]))
		attrs = append(attrs, traceAttrs(x.span)...)
	}
	if stage < logKnownBinding && x.logStage >= logKnownBinding {
		attrs = append(attrs, slog.String("binding", x.binding.Name))
	}
	if stage < logKnownRoute && x.logStage >= logKnownRoute {
		attrs = append(attrs, slog.String("route", x.series.cfg.ID))
	}
	return attrs
}

// logEnd writes the exchange's one line when it failed (an error answer or
// a protocol error), with its cause: warn for the processor's or Kafka's
// failures, info for the client's mistakes, error for a panic. Nothing of
// the request's body or credentials is in it.
func (x *exchange) logEnd(st, answerCause string, answered bool) {
	x.logMu.Lock()
	c := x.cause
	x.logMu.Unlock()
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
	x.logMu.Lock()
	defer x.logMu.Unlock()
	x.cause = &failCause{text: cause, attrs: attrs}
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
		if x.kind == kindGRPC {
			x.mode = modeCodeStream
		} else if p := httphdr.ParsePrefer(headers.Values("prefer")); p.WaitSet && p.Wait > 0 {
			x.mode = modeCodeLongPoll
		}
	}
	x.logMu.Lock()
	x.logStage = logKnownRoute
	x.logMu.Unlock()
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
