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

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// Many quiet routes (issue 20, target 4): -routes fetch routes, each on a
// topic of its own holding one record, and no traffic. The scenario starts
// a broker with those topics in this process, measures this process's CPU
// for -idle with the broker alone (the baseline: the broker, and the shared
// servers every scenario starts, idle), starts a processor with the routes,
// waits until every view is ready, and measures again: the difference is
// the processor's idle cost, with the broker's answers to its consumers.
// Between the two it measures the baseline (idlebaseline.go): one raw
// consumer with the live consumer's settings on the same partitions, what
// the processor cannot avoid; IdleRatio is the processor's cost over it.
// Memory per route is the Go heap and stacks the processor added, over the
// routes. Then one GET to each route, against as many GETs of one route,
// after as many unmeasured GETs of that route warm the connections (else the
// first pass pays for them); then rounds of GETs to one route and to each
// route again, which tell the cost of a route's first request from that of
// many routes.

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

// idleRoutesResult is the outcome of the idle-routes scenario.
type idleRoutesResult struct {
	Scenario     string  `json:"scenario"`
	Routes       int     `json:"routes"`
	FetchWaitMS  int64   `json:"fetch_wait_ms,omitempty"` // -fetch-wait, when given
	IdleSeconds  float64 `json:"idle_seconds"`
	ReadySeconds float64 `json:"ready_seconds"` // processor start to every view ready
	// Cores of this process while idle: before the processor started
	// (BaselineCores) and with it (WithProcessorCores); IdleCores is the
	// difference (target ≤ 0.01, 1 % of a core).
	BaselineCores      float64 `json:"baseline_cores"`
	WithProcessorCores float64 `json:"with_processor_cores"`
	IdleCores          float64 `json:"idle_cores"`
	// LibrdkafkaCores is the part of WithProcessorCores spent in the
	// processor's librdkafka threads (its Kafka clients' C side, which the
	// Go profiler does not see; those of clients that lived before it, the
	// shared servers', left out); the rest of IdleCores is Go code: the
	// processor's and the embedded broker's answers to its clients, told
	// apart by -idleprofile. Absent where /proc is not.
	LibrdkafkaCores *float64 `json:"librdkafka_cores,omitempty"`
	// LibrdkafkaThreads is LibrdkafkaCores by thread name (rdk:main,
	// rdk:broker…; the processor's clients summed), and RawLibrdkafkaThreads
	// the baseline consumer's.
	LibrdkafkaThreads    map[string]float64 `json:"librdkafka_threads,omitempty"`
	RawLibrdkafkaThreads map[string]float64 `json:"raw_librdkafka_threads,omitempty"`
	// LibrdkafkaThreadCounts and RawLibrdkafkaThreadCounts are how many of
	// those threads of each name lived at the window's end: one rdk:main
	// per librdkafka client, so the processor's clients alive, and the
	// baseline's (1).
	LibrdkafkaThreadCounts    map[string]int `json:"librdkafka_thread_counts,omitempty"`
	RawLibrdkafkaThreadCounts map[string]int `json:"raw_librdkafka_thread_counts,omitempty"`
	// BrokerRequests and RawBrokerRequests are the requests the broker
	// answered in the processor's window and in the baseline's, by kind.
	BrokerRequests    map[string]int64 `json:"broker_requests,omitempty"`
	RawBrokerRequests map[string]int64 `json:"raw_broker_requests,omitempty"`
	// RawConsumerCores is the baseline's idle cost (this process's cores
	// with the raw consumer, less BaselineCores), RawLibrdkafkaCores its
	// librdkafka threads' part, and IdleRatio IdleCores ÷ RawConsumerCores:
	// how far the processor's idle cost is above the floor a consumer of
	// those partitions sets.
	RawConsumerCores   float64  `json:"raw_consumer_cores"`
	RawLibrdkafkaCores *float64 `json:"raw_librdkafka_cores,omitempty"`
	IdleRatio          float64  `json:"idle_ratio"`
	// Go heap and stacks the processor added, per route, and goroutines.
	HeapPerRoute       float64 `json:"heap_bytes_per_route"`
	StacksPerRoute     float64 `json:"stack_bytes_per_route"`
	GoroutinesPerRoute float64 `json:"goroutines_per_route"`
	// One GET to each route, and as many to one route, -clients at a
	// time: RouteRatio is the first rate ÷ the second (target: 1).
	// The one route's rate is over -route-rounds passes; AgainRoutesPerSecond
	// is as many passes of one more GET to each route, and AgainRouteRatio
	// its rate ÷ the one route's: the first pass is a route's first
	// request, these are not.
	AllRoutesPerSecond   float64 `json:"all_routes_req_per_s"`
	OneRoutePerSecond    float64 `json:"one_route_req_per_s"`
	AgainRoutesPerSecond float64 `json:"again_routes_req_per_s"`
	RouteRatio           float64 `json:"route_ratio"`
	AgainRouteRatio      float64 `json:"again_route_ratio"`
	// The same passes by this process's CPU per GET (processor,
	// clients and broker), which other work on the machine disturbs less
	// than rates over passes this short; RouteCPURatio is the one route's
	// CPU per GET ÷ the first pass's (1: a route's first request costs no
	// more), AgainRouteCPURatio the same for the second pass.
	AllRoutesCPUMicros   float64 `json:"all_routes_cpu_us_per_req"`
	OneRouteCPUMicros    float64 `json:"one_route_cpu_us_per_req"`
	AgainRoutesCPUMicros float64 `json:"again_routes_cpu_us_per_req"`
	RouteCPURatio        float64 `json:"route_cpu_ratio"`
	AgainRouteCPURatio   float64 `json:"again_route_cpu_ratio"`
}

func (idleRoutesResult) isResult() {}

func runIdleRoutes(ctx context.Context, e *env, o *options) (result, error) {
	res := idleRoutesResult{Scenario: scenarioIdleRoutes, Routes: o.routes, IdleSeconds: o.idle.Seconds(), FetchWaitMS: o.fetchWait.Milliseconds()}
	topics := make([]embedded.Topic, o.routes)
	for i := range topics {
		topics[i] = embedded.Topic{Name: idleTopic(i)}
	}
	quiet := slog.New(slog.DiscardHandler)
	broker, err := embedded.Start(embedded.Options{Addr: "127.0.0.1:0", Logger: quiet, Topics: topics})
	if err != nil {
		return nil, err
	}
	defer broker.Close()
	reqs := countRequests(broker.Cluster())
	if err := fillTopics(ctx, broker.Addr(), o.routes, o.valueSize, func(i int) (string, string) { return idleTopic(i), "k" }); err != nil {
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

	if res.BaselineCores, err = idleCores(ctx, o.idle); err != nil {
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
	res.RawConsumerCores = raw.cores - res.BaselineCores
	res.RawLibrdkafkaCores = raw.librdkafka
	res.RawLibrdkafkaThreads, res.RawLibrdkafkaThreadCounts, res.RawBrokerRequests = raw.threads, raw.threadCounts, raw.requests
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
	res.ReadySeconds = time.Since(t0).Seconds()
	after := sampleMemory()
	n := float64(o.routes)
	res.HeapPerRoute = (float64(after.Heap) - float64(before.Heap)) / n
	res.StacksPerRoute = (float64(after.Stacks) - float64(before.Stacks)) / n
	res.GoroutinesPerRoute = (float64(after.Goroutines) - float64(before.Goroutines)) / n
	if err := measureIdleWithProcessor(ctx, o, reqs, others, &res); err != nil {
		return nil, err
	}
	res.IdleCores = res.WithProcessorCores - res.BaselineCores
	res.IdleRatio = ratio(res.IdleCores, res.RawConsumerCores)

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
	// took and cpu are by pass: the first to each route, then the rounds
	// of one route and of each route again, alternating so that what else
	// the machine does falls on both alike.
	var took, cpu [3]time.Duration
	pass := func(i int, paths []string) error {
		u0 := sampleUsage(false)
		d, err := getEach(ctx, s, o.clients, paths, o.valueSize)
		took[i] += d
		cpu[i] += sampleUsage(false).CPU - u0.CPU
		return err
	}
	if err := pass(0, each); err != nil {
		return nil, err
	}
	for range o.routeRounds {
		if err := pass(1, oneRoute); err != nil {
			return nil, err
		}
		if err := pass(2, each); err != nil {
			return nil, err
		}
	}
	rounds := time.Duration(o.routeRounds)
	took[1], took[2] = took[1]/rounds, took[2]/rounds
	cpu[1], cpu[2] = cpu[1]/rounds, cpu[2]/rounds
	perGET := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	res.AllRoutesCPUMicros, res.OneRouteCPUMicros, res.AgainRoutesCPUMicros = perGET(cpu[0]), perGET(cpu[1]), perGET(cpu[2])
	res.RouteCPURatio = ratio(res.OneRouteCPUMicros, res.AllRoutesCPUMicros)
	res.AgainRouteCPURatio = ratio(res.OneRouteCPUMicros, res.AgainRoutesCPUMicros)
	res.AllRoutesPerSecond = n / took[0].Seconds()
	res.OneRoutePerSecond = n / took[1].Seconds()
	res.AgainRoutesPerSecond = n / took[2].Seconds()
	res.RouteRatio = ratio(res.AllRoutesPerSecond, res.OneRoutePerSecond)
	res.AgainRouteRatio = ratio(res.AgainRoutesPerSecond, res.OneRoutePerSecond)
	if o.routeProf != "" {
		if err := profileRoutePasses(ctx, o, s, oneRoute, each); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// profileRoutePasses writes a CPU profile of -route-rounds passes of one
// route, then one of as many passes of each route, so that what a GET to
// one of many routes costs beyond a GET to the same route can be told
// function by function (go tool pprof -diff_base). The passes are after the
// measured ones and not in the figures.
func profileRoutePasses(ctx context.Context, o *options, s *side, oneRoute, each []string) error {
	for _, p := range []struct {
		name  string
		paths []string
	}{{"one", oneRoute}, {"each", each}} {
		f, err := os.Create(o.routeProf + "-" + p.name + ".pprof")
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
			return fmt.Errorf("profiling the passes of %s route: %w", p.name, err)
		}
	}
	return nil
}

// measureIdleWithProcessor fills WithProcessorCores and LibrdkafkaCores,
// under the -idleprofile CPU profile if one is asked for.
func measureIdleWithProcessor(ctx context.Context, o *options, reqs *requestCounts, others map[string]bool, res *idleRoutesResult) (err error) {
	if o.idleProfile != "" {
		f, err := os.Create(o.idleProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}()
	}
	m, err := measureIdle(ctx, o.idle, reqs, others)
	if err != nil {
		return err
	}
	res.WithProcessorCores, res.LibrdkafkaCores, res.LibrdkafkaThreads = m.cores, m.librdkafka, m.threads
	res.LibrdkafkaThreadCounts, res.BrokerRequests = m.threadCounts, m.requests
	return nil
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
