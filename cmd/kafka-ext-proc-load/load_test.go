package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestScenarios runs every scenario briefly, as a user would run the
// command, so the load generator cannot rot. It checks that each completes
// with sane figures, not how fast anything is.
func TestScenarios(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{
		"-scenario", "all", "-json",
		"-clients", "4", "-conns", "2", "-duration", "200ms", "-warmup", "50ms", "-rounds", "2",
		"-keys", "50", "-waiters", "50", "-register-timeout", "20s", "-timeout", "90s",
	}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	got := map[string]json.RawMessage{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var head struct{ Scenario string }
		if err := json.Unmarshal(sc.Bytes(), &head); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got[head.Scenario] = append(json.RawMessage(nil), sc.Bytes()...)
	}
	for _, s := range []string{scenarioSingle, scenarioMerged} {
		var r fetchResult
		if err := json.Unmarshal(got[s], &r); err != nil {
			t.Fatalf("%s: %v (output %q)", s, err, out.String())
		}
		for name, side := range map[string]rate{"processor": r.Processor, "no-op": r.Noop} {
			if side.Requests <= 0 || side.Errors != 0 || side.PerSecond <= 0 || side.AllocsPerReq <= 0 || len(side.RoundPerSecond) != 2 {
				t.Errorf("%s %s: %+v", s, name, side)
			}
		}
		if r.Ratio <= 0 || r.AllocRatio <= 0 {
			t.Errorf("%s: ratio %v, alloc ratio %v", s, r.Ratio, r.AllocRatio)
		}
	}
	var lp longPollResult
	if err := json.Unmarshal(got[scenarioLongPoll], &lp); err != nil {
		t.Fatalf("longpoll: %v (output %q)", err, out.String())
	}
	// Every waiter was answered 200 with the new value (the scenario fails
	// otherwise); the figures must be those of 50 waiters.
	for name, f := range map[string]waitFigures{"processor": lp.Processor, "no-op": lp.Noop} {
		if f.Waiters != 50 || f.WakeMaxMs <= 0 || f.WakeMinMs > f.WakeP50Ms || f.WakeP50Ms > f.WakeP99Ms || f.WakeP99Ms > f.WakeMaxMs ||
			f.GoroutinesPerWaiter < 1 || f.BytesPerWaiter <= 0 {
			t.Errorf("longpoll %s: %+v", name, f)
		}
	}
	if lp.WakeRatio <= 0 || lp.MemRatio <= 0 {
		t.Errorf("longpoll: %+v", lp)
	}
}

// The text report names every figure the JSON has.
func TestTextReport(t *testing.T) {
	var b bytes.Buffer
	err := report(&b, false, fetchResult{Scenario: scenarioSingle, Clients: 1, Conns: 1, Rounds: 1, Duration: "1s",
		Noop: rate{PerSecond: 10, RoundPerSecond: []float64{10}}, Processor: rate{PerSecond: 6, RoundPerSecond: []float64{6}}, Ratio: 0.6, Target: 0.6})
	if err != nil {
		t.Fatal(err)
	}
	if err := report(&b, false, longPollResult{Scenario: scenarioLongPoll, Processor: waitFigures{Waiters: 3}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fetch-single:", "no-op", "processor", "0.60 × the no-op rate", "longpoll: 3 waiters"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestFlagsRefuseOutOfBounds(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "nope"},
		{"-waiters", "20001"},
		{"-clients", "0"},
		{"-duration", "11m"},
		{"-value-size", "8"},
		{"extra"},
	} {
		var errOut bytes.Buffer
		if code := run(context.Background(), args, &bytes.Buffer{}, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
}

func TestPercentile(t *testing.T) {
	d := make([]time.Duration, 100)
	for i := range d {
		d[i] = time.Duration(i+1) * time.Millisecond
	}
	for p, want := range map[int]time.Duration{50: 50 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond, 1: time.Millisecond} {
		if got := percentile(d, p); got != want {
			t.Errorf("p%d = %v, want %v", p, got, want)
		}
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one = %v", got)
	}
}

func TestJSONValueSize(t *testing.T) {
	for _, size := range []int{minValue, 200, 4096} {
		v := jsonValue("k123", 7, size)
		if len(v) != size || !json.Valid(v) {
			t.Errorf("size %d: %d bytes, valid %v: %s", size, len(v), json.Valid(v), v)
		}
	}
}
