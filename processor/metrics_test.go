package processor

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

func TestAnswerLabelsSeparateHTTPAndGRPCCodes(t *testing.T) {
	for _, c := range []struct{ kind, status, outcome, code, grpcCode string }{
		{"http", "200", outcomeOK, "200", labelNone},
		{"http", "304", outcomeOK, "304", labelNone},
		{"http", "404", outcomeClientError, "404", labelNone},
		{"http", "503", outcomeServerError, "503", labelNone},
		{"grpc", "OK", outcomeOK, labelNone, "OK"},
		{"grpc", "NOT_FOUND", outcomeClientError, labelNone, "NOT_FOUND"},
		{"grpc", "UNAVAILABLE", outcomeServerError, labelNone, "UNAVAILABLE"},
	} {
		o, code, g := answerLabels(c.kind, c.status)
		if o != c.outcome || code != c.code || g != c.grpcCode {
			t.Errorf("%s %s: outcome %s code %s grpc_code %s, want %s %s %s", c.kind, c.status, o, code, g, c.outcome, c.code, c.grpcCode)
		}
	}
}

// TestRouteSeriesCountUnderTheRoutesLabels checks the series an exchange
// updates through its matched route (routeSeries) against the labels the
// exchange has: every answer, mode and outcome of a route lands under the
// route's binding, id, capability and kind, exchanges without a route
// under "none", and a reload, which makes new route series, keeps counting
// into the same series.
func TestRouteSeriesCountUnderTheRoutesLabels(t *testing.T) {
	cfg := testConfig(t)
	for _, b := range cfg.Bindings {
		for _, r := range b.Routes {
			r.ID = b.Name + "-r" + strconv.Itoa(r.Index)
		}
	}
	entered := make(chan struct{}, 1)
	h := newHarness(t, cfg, func(o *Options) {
		o.HTTP = httpFunc(func(ctx context.Context, req *handler.HTTPRequest) *handler.HTTPResponse {
			if req.Path == "/items/hang" {
				entered <- struct{}{}
				<-ctx.Done()
				return nil
			}
			st, _ := strconv.Atoi(strings.TrimPrefix(req.Path, "/items/"))
			if req.Method == "POST" {
				st = 503
			}
			return &handler.HTTPResponse{Status: st}
		})
		o.GRPC = grpcFunc(func(context.Context, *handler.GRPCCall) handler.Status {
			return handler.NewStatus(codes.NotFound, "no such thing")
		})
	})
	get := func(path string, extra ...string) {
		t.Helper()
		s := h.open()
		s.headers(true, httpReq("GET", path, extra...)...)
		s.immediate()
		s.finish()
	}
	get("/items/200")
	get("/items/200", "prefer", "wait=5")
	get("/items/404")
	get("/nowhere")
	s := h.open()
	s.headers(false, httpReq("POST", "/items", "content-length", "2")...)
	s.body([]byte("{}"), true)
	s.immediate()
	s.finish()
	s = h.open()
	s.headers(false, grpcReq("/example.Echo/Say")...)
	grpcError(t, s.immediate(), codes.NotFound)
	s.finish()
	s = h.open()
	s.headers(true, httpReq("GET", "/items/hang")...)
	<-entered
	s.cancel()
	waitIdle(t, h.srv)
	if err := h.srv.Swap(cfg); err != nil {
		t.Fatal(err)
	}
	get("/items/200")
	waitIdle(t, h.srv)

	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var l []string
			for _, lp := range m.GetLabel() {
				l = append(l, lp.GetValue())
			}
			switch mf.GetName() {
			case "kafka_ext_proc_exchanges_total":
				got["exchanges "+strings.Join(l, " ")] = m.GetCounter().GetValue()
			case "kafka_ext_proc_exchange_duration_seconds":
				got["duration "+strings.Join(l, " ")] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	// Labels in the vectors' order, which Gather sorts by name: binding,
	// capability, code, grpc_code, kind, outcome, route; binding,
	// capability, kind, mode, route.
	want := map[string]float64{
		"exchanges http0 fetch 200 none http ok http0-r1":                   3,
		"exchanges http0 fetch 404 none http client_error http0-r1":         1,
		"exchanges http0 fetch none none http cancelled http0-r1":           1,
		"exchanges http0 produce 503 none http server_error http0-r0":       1,
		"exchanges grpc0 produce none NOT_FOUND grpc client_error grpc0-r0": 1,
		"exchanges http0 none 404 none http client_error none":              2, // with the harness's warm-up
		"duration http0 fetch http request http0-r1":                        3,
		"duration http0 fetch http long_poll http0-r1":                      1,
		"duration http0 produce http request http0-r0":                      1,
		"duration grpc0 produce grpc request grpc0-r0":                      1,
		"duration http0 none http request none":                             2,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s: %v", k, v)
		}
	}
}

// BenchmarkRouteMetrics is an exchange's metric updates (its duration and
// its count, a 200 answer) over one route and cycling over many: through
// the route's series, and through the label values as before them (the
// path an exchange without a route still takes).
func BenchmarkRouteMetrics(b *testing.B) {
	for _, n := range []int{1, 1000} {
		cfg := &config.Config{Source: "bench", Bindings: []*config.Binding{{Name: "http0", Type: config.HTTPKafka}}}
		for i := range n {
			cfg.Bindings[0].Routes = append(cfg.Bindings[0].Routes, &config.Route{
				Index: i, ID: "GET /r" + strconv.Itoa(i) + "/{id}",
				When: []config.Condition{{Method: "GET", Path: mustPath(b, "/r"+strconv.Itoa(i)+"/{id}")}}, With: with(config.Fetch, "t"+strconv.Itoa(i)),
			})
		}
		t, err := route.Build(cfg)
		if err != nil {
			b.Fatal(err)
		}
		m, err := newMetrics(prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		series := m.newRouteSeries(t)
		b.Run("routes="+strconv.Itoa(n)+"/series", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := &series[i%n]
				r.duration(0).Observe(0.001)
				r.exchange("200").Inc()
				i++
			}
		})
		b.Run("routes="+strconv.Itoa(n)+"/labels", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := cfg.Bindings[0].Routes[i%n]
				binding, rt, capab, kind := cfg.Bindings[0].Name, routeLabelOf(r), capabilityLabelOf(r), kindLabel(kindHTTP)
				m.durationOf(durationLabels{binding, rt, capab, kind, modeLabel(0)}).Observe(0.001)
				outcome, code, grpcCode := outcomeLabels(kind, "200")
				m.exchange(exchangeLabels{binding, rt, capab, kind, outcome, code, grpcCode}).Inc()
				i++
			}
		})
	}
}
