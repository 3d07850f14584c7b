package streampace

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPacer(t *testing.T) {
	ctx := context.Background()
	t.Run("first send and no interval go at once", func(t *testing.T) {
		// A pacer that waited would hit this deadline and fail, not hang.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := New(every(time.Hour)).Wait(cctx); err != nil { // nothing sent yet
			t.Fatalf("first send: %v", err)
		}
		p := New(every(0))
		p.Sent(false)
		if err := p.Wait(cctx); err != nil {
			t.Fatalf("no interval: %v", err)
		}
	})
	t.Run("the next send waits for the interval", func(t *testing.T) {
		p := New(every(50 * time.Millisecond))
		defer p.Stop()
		for range 2 { // the second round reuses the timer
			p.Sent(false)
			start := time.Now()
			if err := p.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if waited := time.Since(start); waited < 40*time.Millisecond {
				t.Fatalf("waited %v, want the rest of 50ms", waited)
			}
		}
	})
	t.Run("a stream that is behind does not wait", func(t *testing.T) {
		p := New(every(time.Hour))
		defer p.Stop()
		p.Sent(false)
		p.Sent(true)                                             // the next batch was waiting already
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second) // fails, not hangs, if it waits
		defer cancel()
		if err := p.Wait(cctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the call ending stops the wait", func(t *testing.T) {
		p := New(every(time.Hour))
		defer p.Stop()
		p.Sent(false)
		cctx, cancel := context.WithCancel(ctx)
		go cancel()
		if err := p.Wait(cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("wait = %v, want context.Canceled", err)
		}
	})
}

// every is a fixed spacing.
func every(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

func TestSpacing(t *testing.T) {
	var streams atomic.Int64
	for _, c := range []struct {
		interval time.Duration
		rate     int
		streams  int64
		want     time.Duration
	}{
		{50 * time.Millisecond, 20000, 1, 50 * time.Microsecond},    // a few streams send almost at once
		{50 * time.Millisecond, 20000, 100, 5 * time.Millisecond},   // 100 streams: 20,000 messages/s in all
		{50 * time.Millisecond, 20000, 1000, 50 * time.Millisecond}, // 1,000: at the interval
		{50 * time.Millisecond, 20000, 5000, 50 * time.Millisecond}, // never more than the interval
		{0, 20000, 1000, 0}, // interval 0: never held
		{20 * time.Millisecond, 0, 10, 20 * time.Millisecond}, // no rate: the interval
	} {
		streams.Store(c.streams)
		if got := Spacing(c.interval, c.rate, &streams)(); got != c.want {
			t.Errorf("Spacing(%v, %d) with %d streams = %v, want %v", c.interval, c.rate, c.streams, got, c.want)
		}
	}
	// The spacing follows the streams open now, not when it was made.
	streams.Store(10)
	f := Spacing(time.Second, 1000, &streams)
	streams.Store(20)
	if got := f(); got != 20*time.Millisecond {
		t.Errorf("after streams opened: %v, want 20ms", got)
	}
}
