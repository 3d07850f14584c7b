package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
)

// longPollWait is the prefer: wait=N of the waiters, in seconds: long
// enough that no waiter's wait runs out while the others register.
const longPollWait = 60

// answerMargin bounds, beyond the waiters' own wait, how long the scenario
// waits for their answers.
const answerMargin = 15 * time.Second

// waitersGauge is the processor's count of fetch requests holding a long
// poll (httpkafka.Fetch.Waiting summed over routes), read from the registry
// stack.Processor exposes: a waiter is counted once it is in its wait.
const waitersGauge = "kafka_ext_proc_fetch_waiters"

// waitFigures are the measurements of N waiters on one side.
type waitFigures struct {
	Waiters         int     `json:"waiters"`
	RegisterSeconds float64 `json:"register_seconds"`
	// Wake-up: from the write (processor: just before the produce call;
	// no-op: the release) to each waiter's answer as its client saw it.
	WakeMinMs float64 `json:"wake_min_ms"`
	WakeP50Ms float64 `json:"wake_p50_ms"`
	WakeP99Ms float64 `json:"wake_p99_ms"`
	WakeMaxMs float64 `json:"wake_max_ms"`
	// Memory after a collection, waiters registered minus before, per
	// waiter: live heap and goroutine stacks of the whole process.
	HeapPerWaiter       float64 `json:"heap_bytes_per_waiter"`
	StackPerWaiter      float64 `json:"stack_bytes_per_waiter"`
	BytesPerWaiter      float64 `json:"bytes_per_waiter"`
	GoroutinesPerWaiter float64 `json:"goroutines_per_waiter"`
}

// longPollResult is the outcome of the longpoll scenario.
type longPollResult struct {
	Scenario  string      `json:"scenario"`
	Conns     int         `json:"conns"`
	Processor waitFigures `json:"processor"`
	Noop      waitFigures `json:"noop"`
	// AckMs is the time from the produce call to the broker's
	// acknowledgement of the write that wakes the processor's waiters.
	AckMs float64 `json:"ack_ms"`
	// WakeRatio is the processor's wake-up max ÷ the no-op's.
	WakeRatio float64 `json:"wake_ratio"`
	// MemRatio is the processor's bytes per waiter ÷ the no-op's held stream.
	MemRatio float64 `json:"mem_ratio"`
	// ExtraBytesPerWaiter is processor − no-op bytes per waiter: what a
	// waiter costs beyond an open ext_proc stream (both ends' share of
	// which is in both figures).
	ExtraBytesPerWaiter float64 `json:"extra_bytes_per_waiter"`
	TargetWakeMs        float64 `json:"target_wake_max_ms"`
	TargetBytes         float64 `json:"target_bytes_per_waiter"`
}

func (longPollResult) isResult() {}

// runLongPoll holds N long polls on one key of the processor and answers
// them with one write, then does the same against the no-op server (which
// holds N streams and answers them all on a release).
func runLongPoll(ctx context.Context, e *env, o *options) (result, error) {
	const key = "longpoll"
	path := "/items/" + key
	v1, v2 := jsonValue(key, 1, o.valueSize), jsonValue(key, 2, o.valueSize)
	if _, err := e.put(ctx, itemsTopic, map[string][]byte{key: v1}); err != nil {
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
	answer, _, err := e.capture(ctx, plain, func(r reply) error {
		if r.status != 200 {
			return fmt.Errorf("GET %s: %d", path, r.status)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	req := newRequest(e.procSide.client(0), path, "if-none-match", etag, "prefer", "wait="+strconv.Itoa(longPollWait))

	res := longPollResult{Scenario: scenarioLongPoll, Conns: o.conns, TargetWakeMs: 1000, TargetBytes: 16 << 10}

	nop, err := startNoop(answer, true)
	if err != nil {
		return nil, err
	}
	defer nop.stop()
	noopSide, err := e.dial("no-op", nop.addr(), o.conns)
	if err != nil {
		return nil, err
	}
	defer noopSide.close()
	res.Noop, err = holdWaiters(ctx, o, noopSide, req,
		func() (int64, error) { return nop.heldNow(), nil }, "streams the no-op server holds",
		func() (time.Time, error) { t0 := time.Now(); nop.releaseAll(); return t0, nil },
		func(r reply) error {
			if r.status != 200 || len(r.body) != len(v1) {
				return fmt.Errorf("%d with %d bytes, want 200 with %d", r.status, len(r.body), len(v1))
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("no-op: %w", err)
	}

	var acked time.Duration
	res.Processor, err = holdWaiters(ctx, o, e.procSide, req,
		func() (int64, error) { return gauge(e.proc.Registry, waitersGauge) }, "the processor's "+waitersGauge+" gauge",
		func() (time.Time, error) {
			t0 := time.Now()
			at, err := e.put(ctx, itemsTopic, map[string][]byte{key: v2})
			acked = at.Sub(t0)
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
	res.AckMs = ms(acked)
	res.WakeRatio = res.Processor.WakeMaxMs / res.Noop.WakeMaxMs
	res.MemRatio = res.Processor.BytesPerWaiter / res.Noop.BytesPerWaiter
	res.ExtraBytesPerWaiter = res.Processor.BytesPerWaiter - res.Noop.BytesPerWaiter
	return res, nil
}

// outcome is one waiter's answer.
type outcome struct {
	rep reply
	err error
}

// holdWaiters opens o.waiters exchanges of req on s, waits (bounded) until
// registered reports them all held, measures memory, calls release (the
// event that should answer them; it returns when it happened) and waits
// for every answer.
// counted says how registered counts, for error messages.
func holdWaiters(ctx context.Context, o *options, s *side, req emulator.Request,
	registered func() (int64, error), counted string, release func() (time.Time, error), check func(reply) error) (waitFigures, error) {
	n := o.waiters
	fig := waitFigures{Waiters: n}
	outcomes := make([]outcome, n) // allocated before the baseline: not a waiter's cost
	before := sampleMemory()

	wctx, cancel := context.WithTimeout(ctx, o.register+longPollWait*time.Second+answerMargin)
	defer cancel()
	var answered atomic.Int64
	early := make(chan outcome, 1) // the first answer, for the message if it came before the write
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
	// On any early return, end the waiters before returning.
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
			return fig, fmt.Errorf("%d waiters were answered before the write (%d registered); first: status %d, err %v", a, got, oc.rep.status, oc.err)
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
	fig.HeapPerWaiter = float64(int64(held.heap)-int64(before.heap)) / float64(n)
	fig.StackPerWaiter = float64(int64(held.stacks)-int64(before.stacks)) / float64(n)
	fig.BytesPerWaiter = fig.HeapPerWaiter + fig.StackPerWaiter
	fig.GoroutinesPerWaiter = float64(int64(held.goroutines)-int64(before.goroutines)) / float64(n)

	t0, err := release()
	if err != nil {
		return fig, err
	}
	wg.Wait()
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

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100 // ceil(n·p/100)
	return sorted[max(i-1, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// memory is a sample of the process after a full collection.
type memory struct {
	heap, stacks, goroutines uint64
}

// sampleMemory collects garbage and reads the live heap (what the
// collection marked), the goroutine stacks and the goroutine count.
func sampleMemory() memory {
	// Twice: objects in sync.Pools (gRPC's buffers among them) survive one
	// collection in the pools' victim caches, and a previous scenario's
	// buffers would otherwise count against this sample.
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	metrics.Read(s)
	var m memory
	for i, p := range []*uint64{&m.heap, &m.stacks, &m.goroutines} {
		if s[i].Value.Kind() == metrics.KindUint64 {
			*p = s[i].Value.Uint64()
		}
	}
	return m
}

// gauge reads a gauge without labels from a registry.
func gauge(g prometheus.Gatherer, name string) (int64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("reading the processor's metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge() != nil {
			return int64(mf.GetMetric()[0].GetGauge().GetValue()), nil
		}
	}
	return 0, fmt.Errorf("the processor's metrics have no gauge %s", name)
}
