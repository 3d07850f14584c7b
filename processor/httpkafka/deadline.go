package httpkafka

import (
	"context"
	"sync"
	"time"
)

// deadlines hands long polls a channel closed at their deadline or when the
// process drains, whichever is first, shared by every waiter whose deadline
// falls in the same millisecond: one timer and one channel per millisecond
// instead of one timer (with its channel) per waiter, which is most of the
// processor's own memory per waiter when many wait on one key. The drain is
// folded in for the same reason: each channel a waiter selects on holds a
// runtime record (a sudog) of its own while it waits. A deadline is rounded
// up to its millisecond, so a waiter never wakes before it.
type deadlines struct {
	mu sync.Mutex
	at map[deadlineKey]*deadline
}

type deadlineKey struct {
	ms    int64 // Unix millisecond
	drain context.Context
}

// deadline is one shared deadline; a waiter holds it from wait to release.
type deadline struct {
	key       deadlineKey
	ch        chan struct{} // closed at the deadline or on drain
	waiters   int
	timer     *time.Timer
	stopDrain func() bool // stops the drain's hook
	fired     bool
}

// wait returns the deadline of t (rounded up to the millisecond) and of
// drain: its ch is closed once t has passed or drain is done. The waiter
// calls release once it stops waiting.
func (d *deadlines) wait(drain context.Context, t time.Time) *deadline {
	k := deadlineKey{ms: (t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond), drain: drain}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at == nil {
		d.at = map[deadlineKey]*deadline{}
	}
	e := d.at[k]
	if e == nil {
		e = &deadline{key: k, ch: make(chan struct{})}
		e.timer = time.AfterFunc(time.Until(time.UnixMilli(k.ms)), func() { d.fire(e) })
		e.stopDrain = context.AfterFunc(drain, func() { d.fire(e) })
		d.at[k] = e
	}
	e.waiters++
	return e
}

// fire closes e's channel once: at its time or on drain.
func (d *deadlines) fire(e *deadline) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.fired {
		return
	}
	e.fired = true
	if d.at[e.key] == e {
		delete(d.at, e.key)
	}
	e.timer.Stop()
	e.stopDrain()
	close(e.ch)
}

// release drops a waiter; the last one stops the timer and the drain's
// hook, unless the deadline fired.
func (d *deadlines) release(e *deadline) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e.waiters--
	if e.waiters == 0 && !e.fired {
		delete(d.at, e.key)
		e.timer.Stop()
		e.stopDrain()
	}
}

// len is the number of pending deadlines (for tests).
func (d *deadlines) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.at)
}
