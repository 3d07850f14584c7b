package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
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
	mallocs  uint64 // runtime.MemStats.Mallocs delta, the whole process
	bytes    uint64 // runtime.MemStats.TotalAlloc delta
	firstErr error
}

func (w *window) add(o window) {
	w.requests += o.requests
	w.errors += o.errors
	w.elapsed += o.elapsed
	w.mallocs += o.mallocs
	w.bytes += o.bytes
	if w.firstErr == nil {
		w.firstErr = o.firstErr
	}
}

// rate is the figures of one target over every round.
type rate struct {
	Requests       int64     `json:"requests"`
	Errors         int64     `json:"errors"`
	Seconds        float64   `json:"seconds"`
	PerSecond      float64   `json:"req_per_s"`
	AllocsPerReq   float64   `json:"allocs_per_req"`
	BytesPerReq    float64   `json:"bytes_per_req"`
	RoundPerSecond []float64 `json:"round_req_per_s"`
}

func rateOf(w window, rounds []float64) rate {
	r := rate{Requests: w.requests, Errors: w.errors, Seconds: w.elapsed.Seconds(), RoundPerSecond: rounds}
	if w.elapsed > 0 {
		r.PerSecond = float64(w.requests) / w.elapsed.Seconds()
	}
	if w.requests > 0 {
		r.AllocsPerReq = float64(w.mallocs) / float64(w.requests)
		r.BytesPerReq = float64(w.bytes) / float64(w.requests)
	}
	return r
}

// load runs clients concurrent request loops against one side for d (or
// until budget requests were sent), each client on connection i mod conns,
// and tallies what was answered as check wants.
func load(ctx context.Context, s *side, clients int, d time.Duration, budget int64, req emulator.Request, check func(reply) error) window {
	// Garbage of the previous window must not be collected on this one's
	// account more than it must: start from a collected heap.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	end := start.Add(d)
	ctx, cancel := context.WithDeadline(ctx, end.Add(loadGrace))
	defer cancel()

	var ok, failed atomic.Int64
	left := atomic.Int64{}
	left.Store(budget)
	var errOnce sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for i := range clients {
		c := s.client(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && left.Add(-1) >= 0 && ctx.Err() == nil {
				rep, err := exchange(ctx, c, req)
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
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return window{
		requests: ok.Load(), errors: failed.Load(), elapsed: elapsed,
		mallocs: after.Mallocs - before.Mallocs, bytes: after.TotalAlloc - before.TotalAlloc,
		firstErr: firstErr,
	}
}

// fetchResult is the outcome of a fetch scenario.
type fetchResult struct {
	Scenario   string  `json:"scenario"`
	Clients    int     `json:"clients"`
	Conns      int     `json:"conns"`
	Rounds     int     `json:"rounds"`
	Duration   string  `json:"duration_per_round"`
	BodyBytes  int     `json:"body_bytes"`
	Processor  rate    `json:"processor"`
	Noop       rate    `json:"noop"`
	Ratio      float64 `json:"ratio"`       // processor req/s ÷ no-op req/s
	AllocRatio float64 `json:"alloc_ratio"` // processor allocs/req ÷ no-op allocs/req
	// ExtraAllocsPerReq is processor − no-op allocs/req: the client side
	// is the same for both, so this is what the processor allocates beyond
	// the gRPC plumbing (plus noise from background work).
	ExtraAllocsPerReq float64 `json:"extra_allocs_per_req"`
	Target            float64 `json:"target_ratio"`
}

func (fetchResult) isResult() {}

// runFetch measures a fetch route through the processor and through the
// no-op server answering the same bytes.
func runFetch(ctx context.Context, e *env, o *options, scenario string) (result, error) {
	var path string
	var want []byte
	var target float64 // issue 9 target 1
	switch scenario {
	case scenarioSingle:
		key := "single"
		value := jsonValue(key, 1, o.valueSize)
		if _, err := e.put(ctx, itemsTopic, map[string][]byte{key: value}); err != nil {
			return nil, err
		}
		path, want, target = "/items/"+key, value, 0.6
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
		if _, err := e.put(ctx, mergedTopic, records); err != nil {
			return nil, err
		}
		path, want, target = "/merged", b.Bytes(), 0.5
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
	answer, _, err := e.capture(ctx, req, check)
	if err != nil {
		return nil, err
	}
	nop, err := startNoop(answer, false)
	if err != nil {
		return nil, err
	}
	defer nop.stop()
	noopSide, err := e.dial("no-op", nop.addr(), o.conns)
	if err != nil {
		return nil, err
	}
	defer noopSide.close()

	sides := []*side{noopSide, e.procSide}
	if o.warmup > 0 {
		for _, s := range sides {
			load(ctx, s, o.clients, o.warmup, o.maxReqs, req, check)
		}
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
			w := load(ctx, sides[i], o.clients, o.duration, o.maxReqs, req, check)
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
	res := fetchResult{
		Scenario: scenario, Clients: o.clients, Conns: o.conns, Rounds: o.rounds, Duration: o.duration.String(),
		BodyBytes: len(want),
		Noop:      rateOf(totals[0], perRound[0]),
		Processor: rateOf(totals[1], perRound[1]),
		Target:    target,
	}
	res.Ratio = res.Processor.PerSecond / res.Noop.PerSecond
	res.AllocRatio = res.Processor.AllocsPerReq / res.Noop.AllocsPerReq
	res.ExtraAllocsPerReq = res.Processor.AllocsPerReq - res.Noop.AllocsPerReq
	return res, nil
}
