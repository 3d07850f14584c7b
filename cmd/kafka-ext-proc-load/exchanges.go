package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// exchanges counts the exchanges of one load loop: those answered as expected,
// with their latencies, and those that failed, the first failure kept.
type exchanges struct {
	requests, errors int64
	lat              hist
	firstErr         error
}

// record counts one exchange begun at t0 that ended with err.
func (t *exchanges) record(t0 time.Time, err error) {
	if err != nil {
		t.errors++
		if t.firstErr == nil {
			t.firstErr = err
		}
		return
	}
	t.lat.add(time.Since(t0))
	t.requests++
}

// merge adds o's counts and latencies to t's.
func (t *exchanges) merge(o *exchanges) {
	t.requests += o.requests
	t.errors += o.errors
	t.lat.merge(&o.lat)
	if t.firstErr == nil {
		t.firstErr = o.firstErr
	}
}

// runLoops runs workers concurrent loops of exchanges for d, or until budget
// exchanges were begun, timing each: loop i makes its exchanges with the
// function newLoop(i) returns, under a context that ends loadGrace after d.
// It returns the merged counts and the time the loops took.
func runLoops(ctx context.Context, workers int, d time.Duration, budget int64,
	newLoop func(i int) func(ctx context.Context) error) (exchanges, time.Duration) {
	start := time.Now()
	end := start.Add(d)
	lctx, cancel := context.WithDeadline(ctx, end.Add(loadGrace))
	defer cancel()
	var left atomic.Int64
	left.Store(budget)
	ws := make([]exchanges, workers)
	var wg sync.WaitGroup
	for i := range workers {
		w, do := &ws[i], newLoop(i)
		wg.Go(func() {
			for time.Now().Before(end) && left.Add(-1) >= 0 && lctx.Err() == nil {
				t0 := time.Now()
				w.record(t0, do(lctx))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var out exchanges
	for i := range ws {
		out.merge(&ws[i])
	}
	return out, elapsed
}
