package e2e_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
)

// A route keeps its label when the configuration is reordered: labels are
// route ids, never positions, so dashboards and alerts survive an edit. A
// positional label would put the same route under "0" before and "1" after.
func TestReorderedConfigurationKeepsRouteLabels(t *testing.T) {
	t.Parallel()
	e := startEnv(t, opsConfig, withAdmin)
	e.put("items", 0, "k", []byte("v"))
	ask := func() {
		if r, _ := e.request(e.h1, "GET", "/items/k", "", "prefer", "wait=1"); r.StatusCode != 200 {
			t.Fatalf("items: %d", r.StatusCode)
		}
		e.request(e.h1, "GET", "/t/t-1/x", "") // a 404 or 503: counted either way
	}
	ask()
	reordered := strings.Replace(opsConfig, `      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
`, "", 1) + `
`
	reordered = strings.Replace(reordered, "limits:", `      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
limits:`, 1)
	next := e.reload("reordered.yaml", reordered)
	if next.Bindings[0].Routes[0].ID != topicRoute || next.Bindings[0].Routes[1].ID != itemsRoute {
		t.Fatalf("the reordered file's routes are %s, %s", next.Bindings[0].Routes[0].ID, next.Bindings[0].Routes[1].ID)
	}
	ask()
	mfs := e.scrape()

	var routes []string
	for _, m := range mfs["kafka_ext_proc_exchanges_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" {
				routes = append(routes, l.GetValue())
			}
		}
	}
	slices.Sort(routes)
	routes = slices.Compact(routes)
	if strings.Join(routes, " ") != itemsRoute+" "+topicRoute {
		t.Errorf("route labels %q, want exactly [%s %s]", routes, itemsRoute, topicRoute)
	}
	for _, r := range []string{itemsRoute, topicRoute} {
		if n := value(mfs, "kafka_ext_proc_exchanges_total", map[string]string{"route": r}); n != 2 {
			t.Errorf("route %s counted %v exchanges, want 2 (one before the reorder, one after)", r, n)
		}
	}
	// The items requests asked to wait: their durations are long polls.
	lp := map[string]string{"route": itemsRoute, "mode": "long_poll"}
	if n := value(mfs, "kafka_ext_proc_exchange_duration_seconds", lp); n != 2 {
		t.Errorf("long polls of %s observed %v, want 2", itemsRoute, n)
	}
	if n := value(mfs, "kafka_ext_proc_exchange_duration_seconds", map[string]string{"route": itemsRoute, "mode": "request"}); n != 0 {
		t.Errorf("requests of %s observed %v, want 0: every one asked to wait", itemsRoute, n)
	}
}

// gRPC exchanges are labelled by the route's id (its method or service),
// their gRPC code (code is none) and outcome; a fetch stream's duration is
// mode stream, a unary call's mode request.
func TestGRPCExchangeLabels(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t, withAdmin)
	e.put("fanout", 0, "k", []byte("v"))
	if r, err := example.NewEchoClient(e.grpcConn()).Say(ctxFor(t, 30*time.Second), &example.EchoMessage{Message: "hi"}); err != nil || r.GetMessage() != "hi" {
		t.Fatalf("Say: %v %v", r, err)
	}
	st, err := subscribeErr(ctxFor(t, 20*time.Second), e.grpcConn(), "/example.Fanout/Subscribe", []byte{0x0a, 0x01, 'x'})
	if err == nil {
		_, s := endStatus(st)
		err = s.Err()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a fetch with a request: %v, want INVALID_ARGUMENT", err)
	}
	mfs := e.scrape()
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"route": "example.Echo/*", "kind": "grpc", "outcome": "ok", "code": "none", "grpc_code": "OK"}, 1},
		{map[string]string{"route": "example.Fanout", "capability": "fetch", "outcome": "client_error", "code": "none", "grpc_code": "INVALID_ARGUMENT"}, 1},
	} {
		if n := value(mfs, "kafka_ext_proc_exchanges_total", c.labels); n != c.want {
			t.Errorf("exchanges %v: %v, want %v", c.labels, n, c.want)
		}
	}
	for _, c := range []struct{ route, mode string }{{"example.Echo/*", "request"}, {"example.Fanout", "stream"}} {
		if n := value(mfs, "kafka_ext_proc_exchange_duration_seconds", map[string]string{"route": c.route, "mode": c.mode}); n != 1 {
			t.Errorf("durations of %s in mode %s: %v, want 1", c.route, c.mode, n)
		}
	}
}
