package grpckafka

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPacer(t *testing.T) {
	ctx := context.Background()
	t.Run("first send and no interval go at once", func(t *testing.T) {
		// A pacer that waited would hit this deadline and fail, not hang.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := newPacer(time.Hour).wait(cctx); err != nil { // nothing sent yet
			t.Fatalf("first send: %v", err)
		}
		p := newPacer(0)
		p.sent(false)
		if err := p.wait(cctx); err != nil {
			t.Fatalf("no interval: %v", err)
		}
	})
	t.Run("the next send waits for the interval", func(t *testing.T) {
		p := newPacer(50 * time.Millisecond)
		defer p.stop()
		for range 2 { // the second round reuses the timer
			p.sent(false)
			start := time.Now()
			if err := p.wait(ctx); err != nil {
				t.Fatal(err)
			}
			if waited := time.Since(start); waited < 40*time.Millisecond {
				t.Fatalf("waited %v, want the rest of 50ms", waited)
			}
		}
	})
	t.Run("a stream that is behind does not wait", func(t *testing.T) {
		p := newPacer(time.Hour)
		defer p.stop()
		p.sent(false)
		p.sent(true)                                             // the next batch was waiting already
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second) // fails, not hangs, if it waits
		defer cancel()
		if err := p.wait(cctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the call ending stops the wait", func(t *testing.T) {
		p := newPacer(time.Hour)
		defer p.stop()
		p.sent(false)
		cctx, cancel := context.WithCancel(ctx)
		go cancel()
		if err := p.wait(cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("wait = %v, want context.Canceled", err)
		}
	})
}
