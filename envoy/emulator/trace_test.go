package emulator

import (
	"net/http"
	"regexp"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/extproctest"
)

// With tracing on, the Process stream carries the context of Envoy's
// ext_proc span: the request's trace continued (or a new one), a span id
// of its own, the sampled flag and tracestate; an invalid traceparent and
// tracing off carry none. The request headers are left as they came.
func TestProcessStreamTraceContext(t *testing.T) {
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	traceparentRe := regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$`)
	for _, c := range []struct {
		name       string
		tracing    bool
		headers    []string // key, value pairs
		trace      string   // "" = a new trace; "-" = no traceparent at all
		flags      string
		tracestate string
	}{
		{"continued", true, []string{"traceparent", "00-" + clientTrace + "-" + clientSpan + "-01", "tracestate", "a=1", "tracestate", "b=2"}, clientTrace, "01", "a=1,b=2"},
		{"not sampled, upper case", true, []string{"traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-" + clientSpan + "-00"}, clientTrace, "00", ""},
		{"new trace", true, nil, "", "01", ""},
		{"invalid", true, []string{"traceparent", "00-00000000000000000000000000000000-" + clientSpan + "-01"}, "-", "", ""},
		{"wrong length", true, []string{"traceparent", "00-" + clientTrace + "-" + clientSpan + "-01-"}, "-", "", ""},
		{"tracing off", false, []string{"traceparent", "00-" + clientTrace + "-" + clientSpan + "-01"}, "-", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := make(chan *extprocv3.ProcessingRequest, 1)
			p := startProcessor(t, func(ps *procStream) error {
				got <- ps.next()
				return ps.send(extproctest.Immediate(200, "ok", nil, nil))
			})
			s := baseSettings()
			s.Tracing = c.tracing
			// grpc_initial_metadata of the same name loses to the injected context.
			s.ExtProc.InitialMetadata = map[string]string{"traceparent": "from-config", "tracestate": "from-config"}
			addr := startEmulator(t, s, p.addr)
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/items/1", nil)
			for i := 0; i+1 < len(c.headers); i += 2 {
				req.Header.Add(c.headers[i], c.headers[i+1])
			}
			resp, err := h1Client(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			ps := p.stream(t)
			m := <-got

			tp, ts := ps.md.Get("traceparent"), ps.md.Get("tracestate")
			if c.trace == "-" {
				if len(tp) != 1 || tp[0] != "from-config" || len(ts) != 1 || ts[0] != "from-config" {
					t.Errorf("traceparent %q tracestate %q, want only grpc_initial_metadata's", tp, ts)
				}
			} else {
				if len(tp) != 1 {
					t.Fatalf("traceparent %q, want one", tp)
				}
				f := traceparentRe.FindStringSubmatch(tp[0])
				switch {
				case f == nil:
					t.Fatalf("traceparent %q is not 00-<trace>-<span>-<flags>", tp[0])
				case c.trace != "" && f[1] != c.trace:
					t.Errorf("trace id %s, want the request's %s", f[1], c.trace)
				case c.trace == "" && (f[1] == clientTrace || f[1] == "00000000000000000000000000000000"):
					t.Errorf("trace id %s, want a new one", f[1])
				case f[2] == clientSpan || f[2] == "0000000000000000":
					t.Errorf("span id %s, want the ext_proc span's own", f[2])
				case f[3] != c.flags:
					t.Errorf("flags %s, want %s", f[3], c.flags)
				}
				if len(ts) != 1 || ts[0] != c.tracestate {
					t.Errorf("tracestate %q, want [%q]", ts, c.tracestate)
				}
			}
			// The processor sees the request's own headers unchanged.
			var sent []string
			for i := 0; i+1 < len(c.headers); i += 2 {
				if c.headers[i] == "traceparent" {
					sent = append(sent, c.headers[i+1])
				}
			}
			h := m.GetRequestHeaders().GetHeaders()
			if g := headerOf(t, h, "traceparent"); len(g) != len(sent) || (len(sent) == 1 && g[0] != sent[0]) {
				t.Errorf("request traceparent %q, want %q", g, sent)
			}
		})
	}
}
