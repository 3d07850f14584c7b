package main

import "time"

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
