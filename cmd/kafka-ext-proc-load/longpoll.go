package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
)

// longPollWait is the prefer: wait=N of the waiters, in seconds: long
// enough that no waiter's wait runs out while the others register.
const longPollWait = 60

// answerMargin bounds, beyond the waiters' own wait, how long the scenario
// waits for their answers.
const answerMargin = 15 * time.Second

// perWaiter is a memory difference divided by the waiters.
type perWaiter struct {
	Heap       float64 `json:"heap_bytes_per_waiter"`
	Stacks     float64 `json:"stack_bytes_per_waiter"`
	Bytes      float64 `json:"bytes_per_waiter"` // heap + stacks
	Goroutines float64 `json:"goroutines_per_waiter"`
}

func perWaiterOf(before, after memory, n int) perWaiter {
	d := func(a, b uint64) float64 { return float64(int64(a)-int64(b)) / float64(n) }
	p := perWaiter{Heap: d(after.Heap, before.Heap), Stacks: d(after.Stacks, before.Stacks), Goroutines: d(after.Goroutines, before.Goroutines)}
	p.Bytes = p.Heap + p.Stacks
	return p
}

func (p perWaiter) plus(q perWaiter) perWaiter {
	return perWaiter{Heap: p.Heap + q.Heap, Stacks: p.Stacks + q.Stacks, Bytes: p.Bytes + q.Bytes, Goroutines: p.Goroutines + q.Goroutines}
}

// waitFigures are the measurements of N waiters on one side.
type waitFigures struct {
	Waiters         int     `json:"waiters"`
	RegisterSeconds float64 `json:"register_seconds"`
	// Wake-up: from the write (processor: just before the produce call;
	// no-op: just before the release) to each waiter's answer as its
	// client saw it.
	WakeMinMs float64 `json:"wake_min_ms"`
	WakeP50Ms float64 `json:"wake_p50_ms"`
	WakeP99Ms float64 `json:"wake_p99_ms"`
	WakeMaxMs float64 `json:"wake_max_ms"`
	// All is memory per waiter over every process of the run, sampled after
	// a collection with the waiters held minus before: in-process it
	// includes the client side's streams, an upper bound of the server's.
	All perWaiter `json:"all"`
	// Server is the server process alone (-split only).
	Server *perWaiter `json:"server,omitempty"`
	// WakeCPUus and WakeAllocs are the server process's CPU time and heap
	// allocations from the release until every waiter had its answer, per
	// waiter (-split only): the wake-up's cost, which a loaded machine
	// does not stretch as it stretches the times.
	WakeCPUus  float64 `json:"server_wake_cpu_us_per_waiter,omitempty"`
	WakeAllocs float64 `json:"server_wake_allocs_per_waiter,omitempty"`
}

// runLongPoll holds N long polls on one key of the no-op server and
// answers them with a release, then does the same against the processor,
// answered by one write.
func runLongPoll(ctx context.Context, e *env, o *options) (*Result, error) {
	const key = "longpoll"
	path := "/items/" + key
	v1, v2 := jsonValue(key, 1, o.valueSize), jsonValue(key, 2, o.valueSize)
	if err := e.srv.put(ctx, itemsTopic, map[string][]byte{key: v1}); err != nil {
		return nil, err
	}
	plain := newRequest(e.procSide.client(0), path)
	first, err := e.awaitAnswer(ctx, plain, func(r reply) bool { return r.status == 200 && bytes.Equal(r.body, v1) })
	if err != nil {
		return nil, err
	}
	etag := first.header("etag")
	if etag == "" {
		return nil, fmt.Errorf("GET %s: no etag", path)
	}
	// The no-op answers as the processor answers a plain GET: the same 200,
	// the same value size, an etag.
	answer, _, err := e.capture(ctx, plain, nil, func(r reply) error {
		if r.status != 200 {
			return fmt.Errorf("GET %s: %d", path, r.status)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	req := newRequest(e.procSide.client(0), path, "if-none-match", etag, "prefer", "wait="+strconv.Itoa(longPollWait))

	// With -split the no-op server runs in a fresh process of its own, as
	// the processor's waiters start in a process that held no waiters
	// before: the runtime keeps a finished goroutine's descriptor (heap) for
	// reuse, so a server measured after the other would not pay for its
	// goroutines' descriptors; and the processor's process frees the
	// short-lived Kafka clients of its start (23 MB apiece) at a time of
	// their own, which once fell inside the no-op's sample.
	noopSrv := e.srv
	if e.split {
		c, err := startChild(ctx, childConfig{LogLevel: o.logLevel.String(), Profiles: profiles{Heap: o.profiles.Heap, Wake: o.profiles.Wake}, NoopOnly: true})
		if err != nil {
			return nil, fmt.Errorf("no-op: %w", err)
		}
		defer c.close()
		noopSrv = c
	}
	addr, err := noopSrv.startNoop(ctx, answer, true)
	if err != nil {
		return nil, err
	}
	noopSide, err := e.dial("no-op", addr, o.conns)
	if err != nil {
		_ = noopSrv.stopNoop(ctx)
		return nil, err
	}
	noop, err := e.holdWaiters(ctx, o, "noop", noopSrv, noopSide, req,
		func() (int64, error) { return noopSrv.heldNoop(ctx) }, "streams the no-op server holds",
		func() (time.Time, error) { t0 := time.Now(); return t0, noopSrv.releaseNoop(ctx) },
		func(r reply) error {
			if r.status != 200 || len(r.body) != len(v1) {
				return fmt.Errorf("%d with %d bytes, want 200 with %d", r.status, len(r.body), len(v1))
			}
			return nil
		})
	noopSide.close()
	if serr := noopSrv.stopNoop(ctx); err == nil {
		err = serr
	}
	if err != nil {
		return nil, fmt.Errorf("no-op: %w", err)
	}

	var acked time.Duration
	proc, err := e.holdWaiters(ctx, o, "processor", e.srv, e.procSide, req,
		func() (int64, error) { return e.srv.gauge(ctx, waitersGauge) }, "the processor's kafka_ext_proc_fetch_waiters gauge",
		func() (time.Time, error) {
			t0 := time.Now()
			err := e.srv.put(ctx, itemsTopic, map[string][]byte{key: v2})
			acked = time.Since(t0)
			return t0, err
		},
		func(r reply) error {
			if r.status != 200 || !bytes.Equal(r.body, v2) || r.header("etag") == etag {
				return fmt.Errorf("%d with %d bytes, etag %s; want 200 with the new value and a new etag", r.status, len(r.body), r.header("etag"))
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	return longPollResult(o, e.split, noop, proc, acked), nil
}

// longPollResult is the long poll's result: each side's figures, the
// write's acknowledgement time and their ratios.
func longPollResult(o *options, split bool, noop, proc waitFigures, acked time.Duration) *Result {
	res := newResult(scenarioLongPoll, split)
	res.param("conns", o.conns)
	res.param("waiters", o.waiters)
	res.figures("processor", proc)
	res.figures("noop", noop)
	// From the produce call to the broker's acknowledgement of the write
	// that wakes the processor's waiters.
	res.figure("ack_ms", ms(acked))
	// What a waiter costs beyond an open ext_proc stream.
	res.figure("extra_bytes_per_waiter", proc.All.Bytes-noop.All.Bytes)
	res.target("processor_wake_max_ms", "≤ 1000 at 10,000 waiters")
	res.ratio("wake_ratio", ratio(proc.WakeMaxMs, noop.WakeMaxMs), "the last waiter's answer after the write, processor ÷ no-op", "")
	res.ratio("mem_ratio", ratio(proc.All.Bytes, noop.All.Bytes), "bytes per waiter over every process, processor ÷ no-op's held stream", "")
	if !split {
		// The client side's streams are in both: an upper bound of the
		// processor's bytes per waiter.
		res.target("processor_all_bytes_per_waiter", "≤ 16384 in the server process (-split)")
		return res
	}
	res.target("processor_server_bytes_per_waiter", "≤ 16384")
	res.ratio("server_mem_ratio", ratio(proc.Server.Bytes, noop.Server.Bytes), "bytes per waiter in the server process, processor ÷ no-op", "")
	res.ratio("server_heap_ratio", ratio(proc.Server.Heap, noop.Server.Heap), "heap per waiter in the server process, processor ÷ no-op", "")
	res.ratio("server_stack_ratio", ratio(proc.Server.Stacks, noop.Server.Stacks), "stacks per waiter in the server process, processor ÷ no-op", "")
	res.ratio("server_wake_cpu_ratio", ratio(proc.WakeCPUus, noop.WakeCPUus), "server CPU per waiter woken, processor ÷ no-op", "")
	return res
}

// outcome is one waiter's answer.
type outcome struct {
	rep reply
	err error
}

// holdWaiters opens o.waiters exchanges of req on s, waits (bounded) until
// registered reports them all held, samples memory, calls release (the
// event that should answer them; it returns when the event happened) and
// waits for every answer. counted says how registered counts, for errors.
func (e *env) holdWaiters(ctx context.Context, o *options, name string, srv servers, s *side, req emulator.Request,
	registered func() (int64, error), counted string, release func() (time.Time, error), check func(reply) error) (waitFigures, error) {
	n := o.waiters
	fig := waitFigures{Waiters: n}
	outcomes := make([]outcome, n) // allocated before the baseline: not a waiter's cost
	srvBefore, split, err := srv.memory(ctx, heapProfile(o, name, "before"))
	if err != nil {
		return fig, err
	}
	before := sampleMemory()
	if !split {
		if err := writeHeapProfile(o, name, "before"); err != nil {
			return fig, err
		}
	}

	wctx, cancel := context.WithTimeout(ctx, o.register+longPollWait*time.Second+answerMargin)
	defer cancel()
	var answered atomic.Int64
	early := make(chan outcome, 1) // the first answer, for the message if it came before the release
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		c := s.client(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := exchange(wctx, c, req)
			outcomes[i] = outcome{rep: rep, err: err}
			answered.Add(1)
			select {
			case early <- outcomes[i]:
			default:
			}
		}()
	}
	// On an early return, end the waiters before returning.
	defer func() {
		cancel()
		wg.Wait()
	}()

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(o.register)
	defer deadline.Stop()
	for {
		got, err := registered()
		if err != nil {
			return fig, err
		}
		if a := answered.Load(); a > 0 {
			oc := <-early
			return fig, fmt.Errorf("%d waiters were answered before the release (%d registered); first: status %d, err %v", a, got, oc.rep.status, oc.err)
		}
		if got >= int64(n) {
			break
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return fig, fmt.Errorf("%d of %d waiters registered within %v (counted as %s)", got, n, o.register, counted)
		case <-ctx.Done():
			return fig, ctx.Err()
		}
	}
	fig.RegisterSeconds = time.Since(start).Seconds()
	held := sampleMemory()
	if !split {
		if err := writeHeapProfile(o, name, "held"); err != nil {
			return fig, err
		}
	}
	srvHeld, _, err := srv.memory(ctx, heapProfile(o, name, "held"))
	if err != nil {
		return fig, err
	}
	fig.All = perWaiterOf(before, held, n)
	if split {
		srv := perWaiterOf(srvBefore, srvHeld, n)
		fig.Server = &srv
		fig.All = fig.All.plus(srv)
	}

	var wake0 usage
	if split {
		if wake0, _, err = srv.usage(ctx, false); err != nil {
			return fig, err
		}
	}
	if o.profiles.Wake != "" {
		if err := srv.cpuProfile(ctx, o.profiles.Wake+"-"+name+"-wake.pprof"); err != nil {
			return fig, err
		}
	}
	t0, err := release()
	if err != nil {
		return fig, err
	}
	wg.Wait()
	if o.profiles.Wake != "" {
		if err := srv.cpuProfile(ctx, ""); err != nil {
			return fig, err
		}
	}
	if split {
		wake1, _, err := srv.usage(ctx, false)
		if err != nil {
			return fig, err
		}
		w := wake1.sub(wake0)
		fig.WakeCPUus = float64(w.CPU.Microseconds()) / float64(n)
		fig.WakeAllocs = float64(w.Mallocs) / float64(n)
	}
	// With every waiter answered: the allocations since "held" are the
	// wake-up's (pprof -sample_index=alloc_space -diff_base).
	if o.profiles.Heap != "" {
		if split {
			_, _, err = srv.memory(ctx, heapProfile(o, name, "woken"))
		} else {
			err = writeHeapProfile(o, name, "woken")
		}
		if err != nil {
			return fig, err
		}
	}
	wakes := make([]time.Duration, 0, n)
	var bad int
	var firstBad error
	for _, oc := range outcomes {
		err := oc.err
		if err == nil {
			err = check(oc.rep)
		}
		if err != nil {
			bad++
			if firstBad == nil {
				firstBad = err
			}
			continue
		}
		wakes = append(wakes, oc.rep.at.Sub(t0))
	}
	if bad > 0 {
		return fig, fmt.Errorf("%d of %d waiters were not answered as expected; first: %w", bad, n, firstBad)
	}
	slices.Sort(wakes)
	fig.WakeMinMs = ms(wakes[0])
	fig.WakeP50Ms = ms(percentile(wakes, 50))
	fig.WakeP99Ms = ms(percentile(wakes, 99))
	fig.WakeMaxMs = ms(wakes[len(wakes)-1])
	return fig, nil
}

// heapProfile names the heap profile of side name at point when, or is ""
// without -heapprofile.
func heapProfile(o *options, name, when string) string {
	if o.profiles.Heap == "" {
		return ""
	}
	return o.profiles.Heap + "-" + name + "-" + when + ".pprof"
}

// writeHeapProfile writes this process's heap profile, if asked for.
func writeHeapProfile(o *options, name, when string) error {
	if f := heapProfile(o, name, when); f != "" {
		return writeProfile("heap", f)
	}
	return nil
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100 // ceil(n·p/100)
	return sorted[max(i-1, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
