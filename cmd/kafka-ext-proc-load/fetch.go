package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
)

// loadGrace bounds how long a window waits, after its duration, for the
// requests still in flight; they are cancelled after it.
const loadGrace = 30 * time.Second

// window is the raw tally of one measured window on one target.
type window struct {
	requests int64 // answered as expected
	errors   int64
	elapsed  time.Duration
	all      usage // every process of the run (client side included)
	server   usage // the server process alone (-split only)
	firstErr error
}

func (w *window) add(o window) {
	w.requests += o.requests
	w.errors += o.errors
	w.elapsed += o.elapsed
	w.all = w.all.add(o.all)
	w.server = w.server.add(o.server)
	if w.firstErr == nil {
		w.firstErr = o.firstErr
	}
}

// perRequest is a usage divided by the requests answered.
type perRequest struct {
	Allocs float64 `json:"allocs_per_req"`
	Bytes  float64 `json:"bytes_per_req"`
	CPUus  float64 `json:"cpu_us_per_req"`
}

func perReq(u usage, n int64) perRequest {
	if n == 0 {
		return perRequest{}
	}
	return perRequest{
		Allocs: float64(u.Mallocs) / float64(n),
		Bytes:  float64(u.Bytes) / float64(n),
		CPUus:  float64(u.CPU.Microseconds()) / float64(n),
	}
}

// rate is the figures of one target over every round.
type rate struct {
	Requests  int64   `json:"requests"`
	Errors    int64   `json:"errors"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"req_per_s"`
	// All is per request over every process of the run: in-process, client
	// and servers; with -split, both processes.
	All perRequest `json:"all"`
	// Server is per request in the server process alone (-split only).
	Server         *perRequest `json:"server,omitempty"`
	RoundPerSecond []float64   `json:"round_req_per_s"`
}

func rateOf(w window, rounds []float64, split bool) rate {
	r := rate{Requests: w.requests, Errors: w.errors, Seconds: w.elapsed.Seconds(), RoundPerSecond: rounds, All: perReq(w.all, w.requests)}
	if w.elapsed > 0 {
		r.PerSecond = float64(w.requests) / w.elapsed.Seconds()
	}
	if split {
		s := perReq(w.server, w.requests)
		r.Server = &s
	}
	return r
}

// load runs clients concurrent request loops against one side for d (or
// until budget requests were sent), client i on connection i mod conns,
// and tallies what was answered as check wants.
func (e *env) load(ctx context.Context, s *side, clients int, d time.Duration, budget int64, req emulator.Request, check func(reply) error) (window, error) {
	srvBefore, split, err := e.srv.usage(ctx, true)
	if err != nil {
		return window{}, err
	}
	w := loops(ctx, s, clients, d, budget, func(ctx context.Context, c *emulator.Client) (reply, error) {
		return exchange(ctx, c, req)
	}, check)
	srvAfter, _, err := e.srv.usage(ctx, false)
	if err != nil {
		return w, err
	}
	if split {
		w.server = srvAfter.sub(srvBefore)
		w.all = w.all.add(w.server)
	}
	return w, nil
}

// loops runs clients concurrent loops of send for d (or until budget
// requests were sent), client i on connection i mod conns, and tallies what
// was answered as check wants; the window's usage is this process's.
func loops(ctx context.Context, s *side, clients int, d time.Duration, budget int64, send func(context.Context, *emulator.Client) (reply, error), check func(reply) error) window {
	before := sampleUsage(true)
	start := time.Now()
	end := start.Add(d)
	lctx, cancel := context.WithDeadline(ctx, end.Add(loadGrace))
	defer cancel()
	var ok, failed, left atomic.Int64
	left.Store(budget)
	var errOnce sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for i := range clients {
		c := s.client(i)
		wg.Go(func() {
			for time.Now().Before(end) && left.Add(-1) >= 0 && lctx.Err() == nil {
				rep, err := send(lctx, c)
				if err == nil {
					err = check(rep)
				}
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	w := window{requests: ok.Load(), errors: failed.Load(), elapsed: time.Since(start), firstErr: firstErr}
	w.all = sampleUsage(false).sub(before)
	return w
}

// perSecond is a usage divided by the time it took.
type perSecond struct {
	Allocs float64 `json:"allocs_per_s"`
	Bytes  float64 `json:"bytes_per_s"`
	CPUms  float64 `json:"cpu_ms_per_s"`
}

// idle measures what the measured processes consume in d with no load:
// the server process with -split, else this whole process.
func (e *env) idle(ctx context.Context, d time.Duration) (perSecond, error) {
	measure := func(gc bool) (usage, error) {
		u, split, err := e.srv.usage(ctx, gc)
		if err != nil || split {
			return u, err
		}
		return sampleUsage(gc), nil
	}
	before, err := measure(true)
	if err != nil {
		return perSecond{}, err
	}
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return perSecond{}, ctx.Err()
	}
	after, err := measure(false)
	if err != nil {
		return perSecond{}, err
	}
	u, sec := after.sub(before), time.Since(start).Seconds()
	return perSecond{Allocs: float64(u.Mallocs) / sec, Bytes: float64(u.Bytes) / sec, CPUms: float64(u.CPU.Microseconds()) / 1000 / sec}, nil
}

// netOf is a per-request figure with the background of its windows taken out.
func netOf(perReq float64, bgPerSec float64, r rate) float64 {
	if r.Requests == 0 {
		return 0
	}
	return perReq - bgPerSec*r.Seconds/float64(r.Requests)
}

// runFetch measures a fetch route through the processor and through the
// no-op server answering the same bytes.
func runFetch(ctx context.Context, e *env, o *options, scenario string) (*Result, error) {
	var path string
	var want []byte
	var target string // the fetch rate against the no-op's, as BENCHMARKS.md holds it
	switch scenario {
	case scenarioSingle:
		key := "single"
		value := jsonValue(key, 1, o.valueSize)
		if err := e.srv.put(ctx, itemsTopic, map[string][]byte{key: value}); err != nil {
			return nil, err
		}
		path, want, target = "/items/"+key, value, "≥ 0.6"
	case scenarioMerged:
		records := make(map[string][]byte, o.keys)
		var b bytes.Buffer
		b.WriteByte('[')
		// The body lists the values in offset order, and the records are
		// produced from a map, in no set order: the check compares
		// lengths only.
		for i := range o.keys {
			key := "k" + strconv.Itoa(i)
			records[key] = jsonValue(key, 1, o.valueSize)
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(records[key])
		}
		b.WriteByte(']')
		if err := e.srv.put(ctx, mergedTopic, records); err != nil {
			return nil, err
		}
		path, want, target = "/merged", b.Bytes(), "≥ 0.5"
	}
	check := func(r reply) error {
		if r.status != 200 || len(r.body) != len(want) {
			return fmt.Errorf("GET %s: %d with %d bytes, want 200 with %d", path, r.status, len(r.body), len(want))
		}
		return nil
	}
	req := newRequest(e.procSide.client(0), path)
	if _, err := e.awaitAnswer(ctx, req, func(r reply) bool { return check(r) == nil }); err != nil {
		return nil, err
	}
	answer, _, err := e.capture(ctx, req, nil, check)
	if err != nil {
		return nil, err
	}
	addr, err := e.srv.startNoop(ctx, answer, false)
	if err != nil {
		return nil, err
	}
	defer func() { _ = e.srv.stopNoop(ctx) }()
	noopSide, err := e.dial("no-op", addr, o.conns)
	if err != nil {
		return nil, err
	}
	defer noopSide.close()

	sides := []*side{noopSide, e.procSide}
	if o.warmup > 0 {
		for _, s := range sides {
			if _, err := e.load(ctx, s, o.clients, o.warmup, o.maxReqs, req, check); err != nil {
				return nil, err
			}
		}
	}
	// The background in between the warm-up and the rounds: the
	// processor has served, the load has not started.
	bg, err := e.idle(ctx, o.duration)
	if err != nil {
		return nil, err
	}
	var totals [2]window
	var perRound [2][]float64
	for r := range o.rounds {
		// Alternate which side goes first, so a drift of the machine
		// (thermal, other tenants) does not favour one side.
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			w, err := e.load(ctx, sides[i], o.clients, o.duration, o.maxReqs, req, check)
			if err != nil {
				return nil, err
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			e.log.Info("window", "scenario", scenario, "side", sides[i].name, "round", r, "requests", w.requests, "errors", w.errors, "elapsed", w.elapsed)
			totals[i].add(w)
			perRound[i] = append(perRound[i], float64(w.requests)/w.elapsed.Seconds())
		}
	}
	for i, t := range totals {
		if t.errors > 0 || t.requests == 0 {
			return nil, fmt.Errorf("%s: %d answered, %d failed; first failure: %v", sides[i].name, t.requests, t.errors, t.firstErr)
		}
	}
	return fetchResult(scenario, o, e.split, len(want), target,
		rateOf(totals[0], perRound[0], e.split), rateOf(totals[1], perRound[1], e.split), bg), nil
}

// fetchResult is a fetch scenario's result: the processor's and the
// no-op's figures, the background bg, and their ratios.
func fetchResult(scenario string, o *options, split bool, bodyBytes int, target string, noop, proc rate, bg perSecond) *Result {
	res := newResult(scenario, split)
	res.param("clients", o.clients)
	res.param("conns", o.conns)
	res.param("rounds", o.rounds)
	res.param("duration_per_round", o.duration.String())
	res.param("body_bytes", bodyBytes)
	res.figures("processor", proc)
	res.figures("noop", noop)
	// The measured processes with no load: the broker, the Kafka
	// consumers, metrics. It is in both sides' figures per request, which
	// pulls their ratios towards 1; the net ratios take it out (per second
	// of each side's windows) from both sides first.
	res.figures("background", bg)
	// Over every process the client side is the same for both, so these
	// understate the server-side ratios; the extras (processor − no-op)
	// are what the processor costs beyond the gRPC plumbing.
	res.figure("extra_allocs_per_req", proc.All.Allocs-noop.All.Allocs)
	res.figure("extra_cpu_us_per_req", proc.All.CPUus-noop.All.CPUus)
	res.ratio("ratio", ratio(proc.PerSecond, noop.PerSecond), "requests per second, processor ÷ no-op", target)
	res.ratio("alloc_ratio", ratio(proc.All.Allocs, noop.All.Allocs), "allocations per request over every process, processor ÷ no-op", "")
	res.ratio("cpu_ratio", ratio(proc.All.CPUus, noop.All.CPUus), "CPU per request over every process, processor ÷ no-op", "")
	p, n := proc.All, noop.All
	if split {
		res.ratio("server_alloc_ratio", ratio(proc.Server.Allocs, noop.Server.Allocs), "allocations per request in the server process, processor ÷ no-op", "≤ 2")
		res.ratio("server_cpu_ratio", ratio(proc.Server.CPUus, noop.Server.CPUus), "CPU per request in the server process, processor ÷ no-op", "")
		p, n = *proc.Server, *noop.Server
	}
	res.ratio("net_alloc_ratio", ratio(netOf(p.Allocs, bg.Allocs, proc), netOf(n.Allocs, bg.Allocs, noop)),
		"allocations per request without the idle background, processor ÷ no-op", "")
	res.ratio("net_cpu_ratio", ratio(netOf(p.CPUus, bg.CPUms*1000, proc), netOf(n.CPUus, bg.CPUms*1000, noop)),
		"CPU per request without the idle background, processor ÷ no-op", "")
	return res
}

// ratio is a / b, 0 when b is (a figure this platform cannot measure).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
