package grpckafka

import (
	"context"
	"time"
)

// pacer keeps a fetch stream's sends at least interval apart. Records that
// arrive within the interval after a send wait for its end and go together:
// on a busy topic each stream sends one message per interval rather than
// one per record, which is most of the cost of a message on both sides of
// the ext_proc stream. A send after a quiet spell goes at once, so a quiet
// stream waits for nothing; nor does a stream that is behind (more records
// were waiting than one send holds), whose sends are full already and must
// not be held to one per interval.
type pacer struct {
	interval time.Duration
	last     time.Time // of the last send
	timer    *time.Timer
}

func newPacer(interval time.Duration) *pacer { return &pacer{interval: interval} }

// sent records a send; behind: more records were waiting than it held.
func (p *pacer) sent(behind bool) {
	switch {
	case p.interval <= 0:
	case behind:
		p.last = time.Time{}
	default:
		p.last = time.Now()
	}
}

// wait returns once the next send may go, or ctx's error.
func (p *pacer) wait(ctx context.Context) error {
	if p.interval <= 0 || p.last.IsZero() {
		return ctx.Err()
	}
	d := time.Until(p.last.Add(p.interval))
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
