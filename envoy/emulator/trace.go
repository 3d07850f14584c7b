package emulator

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"
)

// injectTraceContext adds to a Process stream's initial metadata the trace
// context of Envoy's ext_proc span for a request with headers h, as a
// tracing Envoy does. It is called only when the HCM traces with the
// OpenTelemetry tracer (envoy.Settings.Tracing); without tracing Envoy's
// active span is a null span and nothing is added.
//
// [rule process-stream-trace-context] When the HCM traces with the
// OpenTelemetry tracer, the request's span continues a valid W3C
// traceparent of the request (its trace id, lower-cased, its sampled flag
// and its tracestate values joined with ","), else starts a new sampled
// trace; a traceparent that is present but invalid gives a null span and
// nothing is sent. The ext_proc stream is a child span, and its context
// goes into the stream's initial metadata as traceparent
// "00-<trace>-<child span>-<01|00>" and tracestate (empty when none), over
// grpc_initial_metadata of the same name. The request headers the
// processor sees are not changed.
// source: source/extensions/filters/http/ext_proc/ext_proc.cc Filter::openStream (setParentSpan(activeSpan())); source/common/grpc/async_client_impl.cc AsyncStreamImpl::AsyncStreamImpl (spawnChild), AsyncStreamImpl::initialize (injectContext after the initial metadata); source/extensions/tracers/opentelemetry/opentelemetry_tracer_impl.cc Driver::startSpan; source/extensions/tracers/opentelemetry/span_context_extractor.cc SpanContextExtractor::extractSpanContext; source/extensions/tracers/opentelemetry/tracer.cc Tracer::startSpan, Span::injectContext
// envoy-test: ExtProcIntegrationTest.GetAndCloseStreamWithTracing
// ours: TestProcessStreamTraceContext, e2e.TestSpanJoinsTheTraceThroughTheEmulator
// UNVERIFIED: that the HCM's sampling decision, at the default sampling percentages, traces every request (source/common/tracing not read)
func injectTraceContext(md metadata.MD, h Headers) {
	traceID, sampled, tracestate := "", true, ""
	if tp, ok := h.Get("traceparent"); ok {
		id, s, valid := parseTraceparent(tp)
		if !valid {
			return // Envoy's span is a null span: nothing is injected
		}
		traceID, sampled = id, s
		tracestate = strings.Join(h.Values("tracestate"), ",")
	} else {
		traceID = fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
	}
	// The request's own span sits between the client's and the ext_proc
	// span; only the latter's id leaves Envoy here.
	flags := "00"
	if sampled {
		flags = "01"
	}
	md.Set("traceparent", fmt.Sprintf("00-%s-%016x-%s", traceID, rand.Uint64(), flags))
	md.Set("tracestate", tracestate)
}

// parseTraceparent checks a traceparent as Envoy's OpenTelemetry span
// context extractor does: 55 characters, four hex fields of 2, 32, 16 and
// 2 digits, neither id all zeros. It returns the trace id lower-cased (the
// tracer keeps ids as bytes) and the sampled bit of the flags.
func parseTraceparent(v string) (traceID string, sampled, ok bool) {
	if len(v) != 55 {
		return "", false, false
	}
	parts := strings.Split(v, "-")
	if len(parts) != 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return "", false, false
	}
	for _, p := range parts {
		if !isHex(p) {
			return "", false, false
		}
	}
	if strings.Trim(parts[1], "0") == "" || strings.Trim(parts[2], "0") == "" {
		return "", false, false
	}
	flags, err := strconv.ParseUint(parts[3], 16, 8)
	if err != nil {
		return "", false, false
	}
	return strings.ToLower(parts[1]), flags&1 == 1, true
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}
