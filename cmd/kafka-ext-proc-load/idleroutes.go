package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// Many quiet routes: -routes fetch routes, each on a
// topic of its own holding one record, and no traffic. The scenario starts
// a broker with those topics in this process, measures this process's CPU
// for -idle with the broker alone (the baseline: the broker, and the shared
// servers every scenario starts, idle), starts a processor with the routes,
// waits until every view is ready, and measures again: the difference is
// the processor's idle cost, with the broker's answers to its consumers.
// Between the two it measures the baseline (idlebaseline.go): one raw
// consumer with the live consumer's settings on the same partitions, what
// the processor cannot avoid; idle_ratio is the processor's cost over it.
// Memory per route is the Go heap and stacks the processor added, over the
// routes. Then one GET to each route, against as many GETs of one route,
// after as many unmeasured GETs of that route warm the connections (else the
// first pass pays for them); then rounds of GETs to one route and to each
// route again, which tell the cost of a route's first request from that of
// many routes. The same rounds, alternated with the processor's, run on the
// no-op server holding each route's own captured answer: the ceiling, what
// going from one route to many costs a server that does no work.

func idleTopic(i int) string { return "bench-idle-" + strconv.Itoa(i) }

// idleRoutesYAML is -routes fetch routes GET /r<i>/{id}, by key, on a
// binding with the extra librdkafka properties props.
func idleRoutesYAML(n int, props map[string]string) string {
	var b strings.Builder
	bindings := bindingsYAML
	for k, v := range props {
		bindings = strings.Replace(bindings, `bootstrap.servers: "127.0.0.1:9092"`, fmt.Sprintf(`bootstrap.servers: "127.0.0.1:9092", %s: %q`, k, v), 1)
	}
	b.WriteString(bindings)
	for i := range n {
		fmt.Fprintf(&b, "      - when: [{ method: GET, path: \"/r%d/{id}\" }]\n        exit: kafka0\n        with: { capability: fetch, topic: %s, filters: [{ key: \"${params.id}\" }] }\n", i, idleTopic(i))
	}
	return b.String()
}

func runIdleRoutes(ctx context.Context, e *env, o *options) (*Result, error) {
	res := newResult(scenarioIdleRoutes, false)
	res.param("routes", o.routes)
	if o.fetchWait > 0 {
		res.param("fetch_wait_ms", o.fetchWait.Milliseconds())
	}
	res.param("idle_seconds", o.idle.Seconds())
	topics := make([]brokerTopic, o.routes)
	for i := range topics {
		topics[i] = brokerTopic{Name: idleTopic(i)}
	}
	quiet := slog.New(slog.DiscardHandler)
	broker, err := startBroker(quiet, topics...)
	if err != nil {
		return nil, err
	}
	defer broker.Close()
	reqs := countRequests(broker.Cluster())
	if err := fillTopics(ctx, broker.Addr(), o.routes, o.valueSize, false, func(i int) (string, string) { return idleTopic(i), "k" }); err != nil {
		return nil, err
	}
	noEnv := func(string) (string, bool) { return "", false }
	props := map[string]string{}
	if o.fetchWait > 0 {
		props["fetch.wait.max.ms"] = strconv.FormatInt(o.fetchWait.Milliseconds(), 10)
	}
	cfg, err := config.Parse("idle-routes.yaml", []byte(idleRoutesYAML(o.routes, props)), noEnv)
	if err != nil {
		return nil, fmt.Errorf("the idle-routes configuration: %w", err)
	}

	// This process's cores while idle before the processor started: the
	// broker, and the shared servers every scenario starts.
	baseline, err := idleCores(ctx, o.idle)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	raw, err := measureRawIdle(ctx, broker.Addr(), reqs, props, names, o.idle)
	if err != nil {
		return nil, err
	}
	before := sampleMemory()
	others := librdkafkaThreadIDs()
	t0 := time.Now()
	proc, err := stack.StartProcessor(stack.ProcessorOptions{Config: stack.PointAt(cfg, broker.Addr()), Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer proc.Shutdown(context.Background())
	if err := awaitGauge(ctx, proc, viewsReadyGauge, int64(o.routes), 10*time.Minute); err != nil {
		return nil, err
	}
	res.figure("ready_seconds", time.Since(t0).Seconds()) // the processor's start to every view ready
	after := sampleMemory()
	n := float64(o.routes)
	with, err := measureIdleWithProcessor(ctx, o, reqs, others)
	if err != nil {
		return nil, err
	}
	addIdleFigures(res, baseline, with, raw)
	// Go heap and stacks the processor added, per route, and goroutines.
	res.figure("heap_bytes_per_route", (float64(after.Heap)-float64(before.Heap))/n)
	res.figure("stack_bytes_per_route", (float64(after.Stacks)-float64(before.Stacks))/n)
	res.figure("goroutines_per_route", (float64(after.Goroutines)-float64(before.Goroutines))/n)

	s, err := e.dial("idle-routes processor", proc.Addr(), o.conns)
	if err != nil {
		return nil, err
	}
	defer s.close()
	each := make([]string, o.routes)
	oneRoute := make([]string, o.routes)
	for i := range each {
		each[i] = "/r" + strconv.Itoa(i) + "/k"
		oneRoute[i] = "/r0/k"
	}
	if _, err := getEach(ctx, s, o.clients, oneRoute, o.valueSize); err != nil {
		return nil, fmt.Errorf("warming the connections: %w", err)
	}
	// The first GET to each route, measured before anything else reaches
	// the routes.
	u0 := sampleUsage(false)
	tookFirst, err := getEach(ctx, s, o.clients, each, o.valueSize)
	if err != nil {
		return nil, err
	}
	cpuFirst := sampleUsage(false).CPU - u0.CPU

	// The ceiling: the no-op server holding each route's own answer, as
	// the processor sent it, and doing nothing else.
	answers, err := e.captureEach(ctx, proc.Addr(), each, func(path string, r reply) error {
		if r.status != 200 || len(r.body) != o.valueSize {
			return fmt.Errorf("GET %s: %d with %d bytes, want 200 with %d", path, r.status, len(r.body), o.valueSize)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	nop, err := startNoopByPath(answers)
	if err != nil {
		return nil, err
	}
	defer nop.stop()
	ns, err := e.dial("idle-routes no-op", nop.addr(), o.conns)
	if err != nil {
		return nil, err
	}
	defer ns.close()
	// The no-op's connections warmed, and each of its answers sent once,
	// as the processor's were by the first pass and the capture.
	for _, paths := range [][]string{oneRoute, each} {
		if _, err := getEach(ctx, ns, o.clients, paths, o.valueSize); err != nil {
			return nil, fmt.Errorf("warming the no-op server: %w", err)
		}
	}

	// Rounds of one route and of each route again, on the processor and
	// on the no-op, alternating so that what else the machine does falls
	// on all four alike.
	passes := []struct {
		s     *side
		paths []string
	}{{s, oneRoute}, {s, each}, {ns, oneRoute}, {ns, each}}
	var took [4]time.Duration
	var used [4]usage
	for range o.routeRounds {
		for i, p := range passes {
			u0 := sampleUsage(false)
			d, err := getEach(ctx, p.s, o.clients, p.paths, o.valueSize)
			if err != nil {
				return nil, err
			}
			took[i] += d
			used[i] = used[i].add(sampleUsage(false).sub(u0))
		}
	}
	addRouteFigures(res, n, o.routeRounds, tookFirst, cpuFirst, took, used)
	if o.routeProf != "" {
		for _, p := range []struct {
			name string
			s    *side
		}{{"", s}, {"noop-", ns}} {
			if err := profileRoutePasses(ctx, o, p.name, p.s, oneRoute, each); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// profileRoutePasses writes a CPU profile of -route-rounds passes of one
// route, then one of as many passes of each route, so that what a GET to
// one of many routes costs beyond a GET to the same route can be told
// function by function (go tool pprof -diff_base). The passes are after the
// measured ones and not in the figures. The files are
// -routeprofile-{prefix}one.pprof and -{prefix}each.pprof.
func profileRoutePasses(ctx context.Context, o *options, prefix string, s *side, oneRoute, each []string) error {
	for _, p := range []struct {
		name  string
		paths []string
	}{{"one", oneRoute}, {"each", each}} {
		f, err := os.Create(o.routeProf + "-" + prefix + p.name + ".pprof")
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		for range o.routeRounds {
			if _, err = getEach(ctx, s, o.clients, p.paths, o.valueSize); err != nil {
				break
			}
		}
		pprof.StopCPUProfile()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("profiling the passes of %s route (%s): %w", p.name, s.name, err)
		}
	}
	return nil
}

// measureIdleWithProcessor measures the idle process with the processor,
// under the -idleprofile CPU profile if one is asked for.
func measureIdleWithProcessor(ctx context.Context, o *options, reqs *requestCounts, others map[string]bool) (_ rawIdle, err error) {
	if o.idleProfile != "" {
		f, err := os.Create(o.idleProfile)
		if err != nil {
			return rawIdle{}, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return rawIdle{}, err
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}()
	}
	return measureIdle(ctx, o.idle, reqs, others)
}

// addIdleFigures adds the idle window's figures: this process's cores
// before the processor started (baseline), with it, and with the raw
// consumer instead (the floor a consumer of those partitions sets).
func addIdleFigures(res *Result, baseline float64, with, raw rawIdle) {
	res.figure("baseline_cores", baseline)
	res.figure("with_processor_cores", with.cores)
	idle := with.cores - baseline
	res.figure("idle_cores", idle)
	res.target("idle_cores", "≤ 0.01")
	rawCores := raw.cores - baseline
	res.figure("raw_consumer_cores", rawCores)
	// The librdkafka threads' part (their C side, which the Go profiler
	// does not see; the clients that lived before, the shared servers',
	// left out), by thread name, and how many of each name lived at the
	// window's end: one rdk:main per client. The rest is Go code, the
	// processor's and the broker's answers to its clients, which
	// -idleprofile tells apart. Absent where /proc is not.
	for _, m := range []struct {
		prefix string
		idle   rawIdle
	}{{"", with}, {"raw_", raw}} {
		if m.idle.librdkafka != nil {
			res.figure(m.prefix+"librdkafka_cores", *m.idle.librdkafka)
			res.figure(m.prefix+"librdkafka_threads", m.idle.threads)
			res.figure(m.prefix+"librdkafka_thread_counts", m.idle.threadCounts)
		}
		// The requests the broker answered in the window, by kind.
		res.figure(m.prefix+"broker_requests", m.idle.requests)
	}
	res.ratio("idle_ratio", ratio(idle, rawCores), "idle cores, the processor's ÷ a raw consumer of the same partitions", "")
}

// addRouteFigures adds the passes' figures: the first GET to each route
// (first), then routeRounds passes of as many GETs to one route and of one
// more GET to each route, on the processor and on the no-op server
// (took and used: processor one route, each route, no-op one route, each
// route). By CPU per GET of this process (processor, clients and broker),
// which other work on the machine disturbs less than rates over passes
// this short.
func addRouteFigures(res *Result, n float64, routeRounds int, tookFirst, cpuFirst time.Duration, took [4]time.Duration, used [4]usage) {
	rounds := time.Duration(routeRounds)
	perGET := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	gets := int64(routeRounds) * int64(n)
	all, one, again := n/tookFirst.Seconds(), n/(took[0]/rounds).Seconds(), n/(took[1]/rounds).Seconds()
	res.figure("all_routes_req_per_s", all)
	res.figure("one_route_req_per_s", one)
	res.figure("again_routes_req_per_s", again)
	cpuAll, cpuOne, cpuAgain := perGET(cpuFirst), perGET(used[0].CPU/rounds), perGET(used[1].CPU/rounds)
	noopOne, noopAgain := perGET(used[2].CPU/rounds), perGET(used[3].CPU/rounds)
	res.figure("all_routes_cpu_us_per_req", cpuAll)
	res.figure("one_route_cpu_us_per_req", cpuOne)
	res.figure("again_routes_cpu_us_per_req", cpuAgain)
	res.figure("noop_one_route_cpu_us_per_req", noopOne)
	res.figure("noop_again_routes_cpu_us_per_req", noopAgain)
	res.figure("one_route_allocs_per_req", perReq(used[0], gets).Allocs)
	res.figure("again_routes_allocs_per_req", perReq(used[1], gets).Allocs)
	res.figure("noop_one_route_allocs_per_req", perReq(used[2], gets).Allocs)
	res.figure("noop_again_routes_allocs_per_req", perReq(used[3], gets).Allocs)
	res.ratio("route_ratio", ratio(all, one), "GETs per second, the first to each route ÷ as many to one route", "1")
	res.ratio("again_route_ratio", ratio(again, one), "GETs per second, one more to each route ÷ as many to one route", "")
	res.ratio("route_cpu_ratio", ratio(cpuOne, cpuAll), "CPU per GET, one route ÷ the first to each route (1: a route's first request costs no more)", "")
	res.ratio("again_route_cpu_ratio", ratio(cpuOne, cpuAgain), "CPU per GET, one route ÷ one more to each route", "")
	res.ratio("noop_again_route_cpu_ratio", ratio(noopOne, noopAgain), "the no-op's CPU per GET, one route ÷ each route", "")
	res.ratio("one_route_noop_cpu_ratio", ratio(noopOne, cpuOne), "CPU per GET to one route, no-op ÷ processor", "")
	res.ratio("each_route_noop_cpu_ratio", ratio(noopAgain, cpuAgain), "CPU per GET to each route, no-op ÷ processor", "")
	res.ratio("again_route_vs_noop_ratio", ratio(ratio(cpuOne, cpuAgain), ratio(noopOne, noopAgain)),
		"again_route_cpu_ratio ÷ noop_again_route_cpu_ratio (1: many routes cost the processor no more than the no-op)", "")
}

// idleCores is the cores this process kept busy over d. It first returns
// the free heap to the system: otherwise the runtime's scavenger does so
// through the window, at up to about 1 % of a core, after the views'
// catch-ups freed their garbage (a third of the Go samples of an idle
// processor), which fades by itself and is not what idling costs.
func idleCores(ctx context.Context, d time.Duration) (float64, error) {
	debug.FreeOSMemory()
	u0 := sampleUsage(true)
	t0 := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	u1 := sampleUsage(false)
	return (u1.CPU - u0.CPU).Seconds() / time.Since(t0).Seconds(), nil
}

// getEach GETs every path once, clients at a time, and wants 200 with a
// size-byte body each time; it returns how long all took.
func getEach(ctx context.Context, s *side, clients int, paths []string, size int) (time.Duration, error) {
	var next atomic.Int64
	var failed atomic.Int64
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(paths) || ctx.Err() != nil {
					return
				}
				rep, err := exchange(ctx, s.client(c), newRequest(s.client(c), paths[i]))
				if err == nil && (rep.status != 200 || len(rep.body) != size) {
					err = fmt.Errorf("GET %s: %d with %d bytes, want 200 with %d", paths[i], rep.status, len(rep.body), size)
				}
				if err != nil {
					failed.Add(1)
					once.Do(func() { firstErr = err })
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	if n := failed.Load(); n > 0 {
		return 0, fmt.Errorf("%d of %d GETs failed; first: %w", n, len(paths), firstErr)
	}
	return d, ctx.Err()
}
