// Package timerpool reuses timers that a hot path starts for every request
// and stops soon after, so each request does not allocate a timer and its
// channel.
package timerpool

import (
	"sync"
	"time"
)

// Pool holds stopped timers. The zero value is ready to use.
type Pool struct {
	p sync.Pool
}

// Get returns a timer that fires once after d.
func (p *Pool) Get(d time.Duration) *time.Timer {
	if t, ok := p.p.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// Put stops t and takes it back; the caller must not use it after. Since
// Go 1.23 a stopped timer's channel holds no stale value, so whoever gets
// it next starts clean, whether or not it had fired.
func (p *Pool) Put(t *time.Timer) {
	t.Stop()
	p.p.Put(t)
}
