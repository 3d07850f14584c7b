package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// result is the outcome of one scenario.
type result interface{ isResult() }

func report(w io.Writer, asJSON bool, r result) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var b strings.Builder
	switch r := r.(type) {
	case fetchResult:
		fmt.Fprintf(&b, "%s: %d clients over %d ext_proc connections, %d round(s) of %s per target, %d-byte answer\n",
			r.Scenario, r.Clients, r.Conns, r.Rounds, r.Duration, r.BodyBytes)
		for _, s := range []struct {
			name string
			r    rate
		}{{"no-op", r.Noop}, {"processor", r.Processor}} {
			fmt.Fprintf(&b, "  %-9s %9.0f req/s  %7.1f allocs/req  %9.0f B/req  (%d requests, %d errors, rounds %s)\n",
				s.name, s.r.PerSecond, s.r.AllocsPerReq, s.r.BytesPerReq, s.r.Requests, s.r.Errors, roundList(s.r.RoundPerSecond))
		}
		fmt.Fprintf(&b, "  ratio     %.2f × the no-op rate (issue 9 target ≥ %.1f); allocations %.2f × the no-op's, +%.1f allocs/req (whole process: client side included)\n",
			r.Ratio, r.Target, r.AllocRatio, r.ExtraAllocsPerReq)
	case longPollResult:
		fmt.Fprintf(&b, "%s: %d waiters over %d ext_proc connections, one write\n", r.Scenario, r.Processor.Waiters, r.Conns)
		for _, s := range []struct {
			name string
			f    waitFigures
		}{{"no-op", r.Noop}, {"processor", r.Processor}} {
			fmt.Fprintf(&b, "  %-9s registered in %.2fs; answered min %.1f / p50 %.1f / p99 %.1f / max %.1f ms; %.0f B/waiter (heap %.0f + stacks %.0f), %.2f goroutines/waiter\n",
				s.name, s.f.RegisterSeconds, s.f.WakeMinMs, s.f.WakeP50Ms, s.f.WakeP99Ms, s.f.WakeMaxMs,
				s.f.BytesPerWaiter, s.f.HeapPerWaiter, s.f.StackPerWaiter, s.f.GoroutinesPerWaiter)
		}
		fmt.Fprintf(&b, "  write acknowledged after %.1f ms\n", r.AckMs)
		fmt.Fprintf(&b, "  ratio     wake-up max %.2f × the no-op's (issue 9 target: all within %.0f ms at 10,000); memory %.2f × the no-op's, +%.0f B/waiter (target ≤ %.0f B; whole process: client side included, an upper bound)\n",
			r.WakeRatio, r.TargetWakeMs, r.MemRatio, r.ExtraBytesPerWaiter, r.TargetBytes)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func roundList(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, "/")
}
