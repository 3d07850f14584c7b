package ssekafka

import (
	"context"
	"sync/atomic"
	"time"
)

// pacer spaces an event stream's sends as the gRPC fetch stream's pacer
// spaces its messages, under the same limits (stream-send-interval,
// stream-send-rate): events that arrive within the spacing after a send wait
// for its end and go together, so on a busy topic each stream sends one
// message per spacing rather than one per record. A message, not an event,
// is most of what a send costs on both sides of the ext_proc stream. A send
// after a quiet spell goes at once, and so does one of a stream that is
// behind (more records were waiting than one send held).
//
// The spacing is the open event streams ÷ the send rate, at most the
// interval: a few busy streams send at once, ten thousand together still
// cost about rate messages a second. It is a copy of grpckafka's, so that
// neither binding imports the other.
type pacer struct {
	spacing func() time.Duration
	last    time.Time // of the last send
	timer   *time.Timer
}

// spacing returns the time between two sends of a busy stream when streams
// are open: streams ÷ rate, at most interval (0: never held).
func spacing(interval time.Duration, rate int, streams *atomic.Int64) func() time.Duration {
	return func() time.Duration {
		if interval <= 0 || rate <= 0 {
			return interval
		}
		return min(interval, time.Duration(streams.Load())*time.Second/time.Duration(rate))
	}
}

func newPacer(spacing func() time.Duration) *pacer { return &pacer{spacing: spacing} }

// sent records a send; behind: more records were waiting than it held.
func (p *pacer) sent(behind bool) {
	if behind {
		p.last = time.Time{}
		return
	}
	p.last = time.Now()
}

// wait returns once the next send may go, or ctx's error.
func (p *pacer) wait(ctx context.Context) error {
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

func (p *pacer) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
