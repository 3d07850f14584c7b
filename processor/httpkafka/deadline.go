package httpkafka

import (
	"sync"
	"time"
)

// deadlines hands long polls a channel closed at their deadline, shared by
// every waiter whose deadline falls in the same millisecond: one timer and
// one channel per millisecond instead of one timer (with its channel) per
// waiter, which is most of the processor's own memory per waiter when many
// wait on one key. A deadline is rounded up to its millisecond, so a waiter
// never wakes before it.
type deadlines struct {
	mu sync.Mutex
	at map[int64]*deadline // by Unix millisecond
}

type deadline struct {
	ch      chan struct{}
	waiters int
	timer   *time.Timer
}

// wait returns a channel closed once t has passed (rounded up to the
// millisecond), and release, which the waiter calls once it stops waiting.
func (d *deadlines) wait(t time.Time) (<-chan struct{}, func()) {
	ms := (t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at == nil {
		d.at = map[int64]*deadline{}
	}
	e := d.at[ms]
	if e == nil {
		e = &deadline{ch: make(chan struct{})}
		e.timer = time.AfterFunc(time.Until(time.UnixMilli(ms)), func() { d.fire(ms, e) })
		d.at[ms] = e
	}
	e.waiters++
	return e.ch, func() { d.release(ms, e) }
}

func (d *deadlines) fire(ms int64, e *deadline) {
	d.mu.Lock()
	if d.at[ms] == e {
		delete(d.at, ms)
	}
	d.mu.Unlock()
	close(e.ch)
}

// release drops a waiter; the last one stops the timer, unless it fired.
func (d *deadlines) release(ms int64, e *deadline) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e.waiters--
	if e.waiters == 0 && d.at[ms] == e && e.timer.Stop() {
		delete(d.at, ms)
	}
}

// len is the number of pending deadlines (for tests).
func (d *deadlines) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.at)
}
