// Package streampace spaces the sends of a streamed answer (a gRPC fetch
// stream's messages, an event stream's events) so that many busy streams
// cost about a configured number of sends a second, not one per record and
// stream. Both stream bindings use it under the same limits.
package streampace

import (
	"context"
	"sync/atomic"
	"time"
)

// Pacer spaces a stream's sends. Records that arrive within the spacing
// after a send wait for its end and go together: on a busy topic each
// stream sends one message per spacing rather than one per record, and a
// message, not a record, is most of the cost on both sides of the ext_proc
// stream. A send after a quiet spell goes at once, so a quiet stream waits
// for nothing; nor does a stream that is behind (more records were waiting
// than one send holds), whose sends are full already.
//
// The spacing is the open streams ÷ the send rate, at most the interval: a
// few busy streams send at once, and a thousand of them together still cost
// about rate messages a second, not one per record and stream.
type Pacer struct {
	spacing func() time.Duration
	last    time.Time // of the last send
	timer   *time.Timer
}

// Spacing returns the time between two sends of a busy stream when streams
// are open: streams ÷ rate, at most interval (0: never held). streams is the
// binding's count of its open streams.
func Spacing(interval time.Duration, rate int, streams *atomic.Int64) func() time.Duration {
	return func() time.Duration {
		if interval <= 0 || rate <= 0 {
			return interval
		}
		return min(interval, time.Duration(streams.Load())*time.Second/time.Duration(rate))
	}
}

// New returns a pacer whose spacing is asked at each wait (see Spacing).
func New(spacing func() time.Duration) *Pacer { return &Pacer{spacing: spacing} }

// Sent records a send; behind: more records were waiting than it held.
func (p *Pacer) Sent(behind bool) {
	if behind {
		p.last = time.Time{}
		return
	}
	p.last = time.Now()
}

// Wait returns once the next send may go, or ctx's error.
func (p *Pacer) Wait(ctx context.Context) error {
	if p.last.IsZero() {
		return ctx.Err()
	}
	d := time.Until(p.last.Add(p.spacing()))
	if d <= 0 {
		return ctx.Err()
	}
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
	select {
	case <-p.timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop releases the pacer's timer.
func (p *Pacer) Stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
