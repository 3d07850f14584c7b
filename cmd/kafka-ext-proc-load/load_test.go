package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// TestScenarios runs every scenario briefly, as a user would run the
// command, so the load generator cannot rot. It checks that each completes
// with sane figures, not how fast anything is.
func TestScenarios(t *testing.T) {
	t.Run("in-process", func(t *testing.T) { testScenarios(t, false) })
	// The servers in a child process: this test binary again (TestMain).
	t.Run("split", func(t *testing.T) { testScenarios(t, true) })
}

func testScenarios(t *testing.T, split bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	args := []string{
		"-scenario", "all", "-json",
		"-clients", "4", "-conns", "2", "-duration", "200ms", "-warmup", "50ms", "-rounds", "2",
		"-keys", "50", "-waiters", "50", "-register-timeout", "20s", "-timeout", "90s",
		"-streams", "20", "-rate", "200", "-fanout-duration", "500ms",
	}
	// Profiles: of this process, or of the server process with -split.
	dir := t.TempDir()
	profs := []string{filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mutex.pprof"), filepath.Join(dir, "allocs.pprof")}
	args = append(args, "-cpuprofile", profs[0], "-mutexprofile", profs[1], "-allocprofile", profs[2])
	if split {
		// The split run also has the raw loops carry the processor's
		// record headers, read back from Kafka, and writes the long poll's
		// heap profiles (of both server processes).
		args = append(args, "-split", "-raw-headers", "gateway", "-heapprofile", filepath.Join(dir, "lp"))
		for _, s := range []string{"noop", "processor"} {
			for _, w := range []string{"before", "held", "woken"} {
				profs = append(profs, filepath.Join(dir, "lp-"+s+"-"+w+".pprof"))
			}
		}
	}
	code := run(ctx, args, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	for _, p := range profs {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v", filepath.Base(p), err)
		}
	}
	raw := bytes.Clone(out.Bytes())
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
			if side.Requests <= 0 || side.Errors != 0 || side.PerSecond <= 0 || side.All.Allocs <= 0 || len(side.RoundPerSecond) != 2 {
				t.Errorf("%s %s: %+v", s, name, side)
			}
			if split != (side.Server != nil) || split && (side.Server.Allocs <= 0 || side.Server.Allocs >= side.All.Allocs) {
				t.Errorf("%s %s (split %v): server share %+v of %+v", s, name, split, side.Server, side.All)
			}
		}
		if r.Ratio <= 0 || r.AllocRatio <= 0 || r.NetAllocRatio <= 0 || r.Background.Allocs < 0 || split && r.ServerAllocRatio <= 0 {
			t.Errorf("%s: %+v", s, r)
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
			f.All.Goroutines < 1 || f.All.Bytes <= 0 {
			t.Errorf("longpoll %s: %+v", name, f)
		}
		// Each held stream holds memory in the server process. Not
		// necessarily a goroutine of its own: its handler may run on one of
		// the server's gRPC stream workers, started before the first waiter.
		if split != (f.Server != nil) || split && f.Server.Bytes <= 0 {
			t.Errorf("longpoll %s (split %v): server share %+v", name, split, f.Server)
		}
	}
	if lp.WakeRatio <= 0 || lp.MemRatio <= 0 || split && (lp.ServerMemRatio <= 0 || lp.ServerHeapRatio <= 0) {
		t.Errorf("longpoll: %+v", lp)
	}
	// Every answer was 201 with the responder's reply (the scenario fails
	// otherwise).
	var rr requestReplyResult
	if err := json.Unmarshal(got[scenarioRequestReply], &rr); err != nil {
		t.Fatalf("request-reply: %v (output %q)", err, out.String())
	}
	for name, f := range map[string]rrFigures{"gateway 1": rr.GatewayOne, "raw 1": rr.RawOne, "gateway n": rr.GatewayMany, "raw n": rr.RawMany,
		"hop 1": rr.HopOne, "hop n": rr.HopMany, "machinery 1": rr.MachineryOne, "machinery n": rr.MachineryMany} {
		if f.Requests <= 0 || f.Errors != 0 || f.PerSecond <= 0 || len(f.RoundPerSecond) != 2 ||
			f.Latency.Samples != uint64(f.Requests) || f.Latency.P50Ms <= 0 || f.Latency.P50Ms > f.Latency.P99Ms || f.Latency.P99Ms > f.Latency.MaxMs {
			t.Errorf("request-reply %s: %+v", name, f)
		}
	}
	if rr.LatencyRatio <= 0 || rr.RateRatio <= 0 || rr.HopRateRatio <= 0 || rr.HopCeilingRatio <= 0 || rr.ReplyBytes <= rr.BodyBytes ||
		rr.OwnRatio <= 0 || rr.CeilingRatio <= 0 || rr.OwnCPURatio <= 0 || rr.CeilingCPURatio <= 0 {
		t.Errorf("request-reply: %+v", rr)
	}
	// Its own five headers, or the processor's: the request headers the
	// emulator sends (more than five) with reply-to and the correlation id.
	if !split && rr.RawHeaders != 5 || split && rr.RawHeaders <= 5 {
		t.Errorf("request-reply (split %v): the raw loop's records carry %d headers", split, rr.RawHeaders)
	}
	// Every answer was 204 (the scenario fails otherwise).
	var ow onewayResult
	if err := json.Unmarshal(got[scenarioOneway], &ow); err != nil {
		t.Fatalf("produce-oneway: %v (output %q)", err, out.String())
	}
	for name, f := range map[string]rrFigures{"gateway 1": ow.GatewayOne, "raw 1": ow.RawOne, "hop 1": ow.HopOne,
		"gateway n": ow.GatewayMany, "raw n": ow.RawMany, "hop n": ow.HopMany, "machinery 1": ow.MachineryOne, "machinery n": ow.MachineryMany} {
		if f.Requests <= 0 || f.Errors != 0 || f.PerSecond <= 0 || len(f.RoundPerSecond) != 2 || f.All.CPUus <= 0 ||
			f.Latency.Samples != uint64(f.Requests) || f.Latency.P50Ms <= 0 || f.Latency.P50Ms > f.Latency.P99Ms || f.Latency.P99Ms > f.Latency.MaxMs {
			t.Errorf("produce-oneway %s: %+v", name, f)
		}
	}
	if ow.HopRateRatio <= 0 || ow.HopCeilingRatio <= 0 || ow.RateRatio <= 0 || ow.LatencyRatio <= 0 || ow.HopCPURatio <= 0 ||
		ow.OwnRatio <= 0 || ow.CeilingRatio <= 0 || ow.OwnCPURatio <= 0 || ow.CeilingCPURatio <= 0 ||
		ow.Concurrency != replyConcurrency || ow.BodyBytes <= 0 || ow.RawHeaders != 1 {
		t.Errorf("produce-oneway: %+v", ow)
	}
	// Every record reached every stream once (the scenario fails
	// otherwise): 20 streams × 100 records.
	var fo fanoutResult
	if err := json.Unmarshal(got[scenarioFanout], &fo); err != nil {
		t.Fatalf("grpc-fanout: %v (output %q)", err, out.String())
	}
	if fo.Streams != 20 || fo.Written != 100 || fo.DeliveredMin != 100 || fo.StreamsComplete != 20 || fo.Delivered != 2000 ||
		fo.Lag.Samples != 2000 || fo.Raw.Samples != 100 || fo.Lag.P50Ms <= 0 || fo.Lag.P99Ms > fo.Lag.MaxMs || fo.LagP99Ratio <= 0 ||
		fo.ClientCores <= 0 || split != (fo.Server != nil) || split && fo.ServerCores <= 0 {
		t.Errorf("grpc-fanout: %+v", fo)
	}
	checkMedians(t, raw, split)
}

// TestViewScale runs the view-scale scenario small, as a user would.
// Heap figures are only checked as reported: a collection between the two
// samples can make a delta of a small view negative.
func TestViewScale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	args := []string{"-scenario", "view-scale", "-json", "-view-keys", "3000", "-keys", "50",
		"-clients", "4", "-conns", "2", "-duration", "100ms", "-rounds", "2", "-timeout", "90s"}
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	var r viewScaleResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v (output %q)", err, out.String())
	}
	if r.Keys != 3000 || r.SmallKeys != 50 || r.Partitions != 4 || r.RawSeconds <= 0 || r.ReadySeconds <= 0 || r.LoadRatio <= 0 ||
		r.LiveBytes != 3000*int64(len("k1500")+r.ValueBytes) || r.HeapPerKey == 0 || r.MemRatio == 0 ||
		r.MapSeconds <= 0 || r.MapRatio <= 0 || r.MapOverheadPerKey == 0 {
		t.Errorf("view-scale: %+v", r)
	}
	// Every GET was answered 200 with the key's value (the scenario fails
	// otherwise).
	for name, g := range map[string]rate{"big": r.BigGet, "small": r.SmallGet} {
		if g.Requests <= 0 || g.Errors != 0 || len(g.RoundPerSecond) != 2 {
			t.Errorf("view-scale %s GETs: %+v", name, g)
		}
	}
	// Every waiter was answered 200 with the new value (the scenario fails
	// otherwise).
	if r.GetRatio <= 0 || r.BigWakeMs <= 0 || r.SmallWakeMs <= 0 || r.WakeRatio <= 0 {
		t.Errorf("view-scale: %+v", r)
	}
}

// TestIdleRoutes runs the idle-routes scenario small, as a user would. The
// idle CPU and memory deltas are only checked as reported: neither has a
// sign a small run can promise.
func TestIdleRoutes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	prof := filepath.Join(t.TempDir(), "idle.pprof")
	args := []string{"-scenario", "idle-routes", "-json", "-routes", "20", "-idle", "200ms", "-clients", "4", "-timeout", "90s", "-idleprofile", prof, "-fetch-wait", "2s"}
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	var r idleRoutesResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v (output %q)", err, out.String())
	}
	// Every GET was answered 200 with the route's record (the scenario
	// fails otherwise).
	if r.Routes != 20 || r.FetchWaitMS != 2000 || r.ReadySeconds <= 0 || r.BaselineCores <= 0 || r.WithProcessorCores <= 0 || r.HeapPerRoute == 0 ||
		r.AllRoutesPerSecond <= 0 || r.OneRoutePerSecond <= 0 || r.RouteRatio <= 0 ||
		r.AgainRoutesPerSecond <= 0 || r.AgainRouteRatio <= 0 || r.IdleRatio == 0 ||
		r.AllRoutesCPUMicros <= 0 || r.OneRouteCPUMicros <= 0 || r.RouteCPURatio <= 0 || r.AgainRouteCPURatio <= 0 {
		t.Errorf("idle-routes: %+v", r)
	}
	// The librdkafka share is read from /proc: where there is one, the
	// processor's clients have live rdk: threads throughout the window.
	if _, err := os.Stat("/proc/self/task"); err == nil {
		if r.LibrdkafkaCores == nil || *r.LibrdkafkaCores < 0 || *r.LibrdkafkaCores > r.WithProcessorCores {
			t.Errorf("librdkafka_cores %v, want 0..%v", r.LibrdkafkaCores, r.WithProcessorCores)
		}
		// The baseline consumer's threads ran throughout its window too
		// (in 200 ms they may not reach the /proc clock's 10 ms tick).
		if r.RawLibrdkafkaCores == nil || *r.RawLibrdkafkaCores < 0 {
			t.Errorf("raw_librdkafka_cores %v, want ≥ 0", r.RawLibrdkafkaCores)
		}
		// The counts leave out the clients that lived before (the shared
		// servers'): the baseline is one client, the processor at least one.
		if n := r.RawLibrdkafkaThreadCounts["rdk:main"]; n != 1 {
			t.Errorf("raw_librdkafka_thread_counts %v: %d rdk:main, want 1", r.RawLibrdkafkaThreadCounts, n)
		}
		if n := r.LibrdkafkaThreadCounts["rdk:main"]; n < 1 {
			t.Errorf("librdkafka_thread_counts %v: %d rdk:main, want at least 1", r.LibrdkafkaThreadCounts, n)
		}
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("-idleprofile wrote no profile: %v", err)
	}
}

func TestStatTicks(t *testing.T) {
	// A thread name with a space and a parenthesis, as comm allows.
	line := []byte("4242 (rdk:broker (1)) S 1 1 1 0 -1 4194304 133 0 0 0 17 25 0 0 20 0 1 0 401747\n")
	got, err := statTicks(line)
	if err != nil || got != 42 {
		t.Errorf("statTicks = %d, %v; want 42 (utime 17 + stime 25)", got, err)
	}
	if _, err := statTicks([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("statTicks accepted a short line")
	}
}

// checkMedians runs medians.jq, which BENCHMARKS.md uses, over the output,
// so a renamed field cannot silently turn its figures into nulls.
func checkMedians(t *testing.T, jsonl []byte, split bool) {
	jq, err := exec.LookPath("jq")
	if err != nil {
		t.Log("jq is not installed: medians.jq not checked")
		return
	}
	cmd := exec.Command(jq, "-s", "-f", "medians.jq")
	cmd.Stdin = bytes.NewReader(jsonl)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("medians.jq: %v", err)
	}
	var med []map[string]any
	if err := json.Unmarshal(b, &med); err != nil {
		t.Fatalf("medians.jq: %v\n%s", err, b)
	}
	if len(med) != 6 {
		t.Fatalf("medians.jq: %d scenarios, want 6:\n%s", len(med), b)
	}
	for _, m := range med {
		for k, v := range m {
			// Only server-side figures are absent in-process.
			if v == nil && (split || !strings.Contains(k, "server")) {
				t.Errorf("medians.jq: %s %s is null", m["scenario"], k)
			}
		}
	}
}

// TestMain lets this test binary be the server process of a -split run,
// as the command itself is.
func TestMain(m *testing.M) {
	if config, ok := os.LookupEnv(childEnv); ok {
		os.Exit(childMain(context.Background(), config, os.Stdin, os.NewFile(3, "answers"), os.Stderr))
	}
	os.Exit(m.Run())
}

// The text report names every figure the JSON has.
func TestTextReport(t *testing.T) {
	var b bytes.Buffer
	srv := &perRequest{Allocs: 7}
	err := report(&b, false, fetchResult{Scenario: scenarioSingle, Split: true, Clients: 1, Conns: 1, Rounds: 1, Duration: "1s",
		Noop:      rate{PerSecond: 10, RoundPerSecond: []float64{10}, Server: srv},
		Processor: rate{PerSecond: 6, RoundPerSecond: []float64{6}, Server: srv}, Ratio: 0.6, Target: 0.6, ServerAllocRatio: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	if err := report(&b, false, longPollResult{Scenario: scenarioLongPoll, Processor: waitFigures{Waiters: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := report(&b, false, requestReplyResult{Scenario: scenarioRequestReply, Concurrency: 64, RawHeaders: 11, LatencyRatio: 1.5, TargetLatency: 2, RateRatio: 0.4, TargetRate: 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := report(&b, false, onewayResult{Scenario: scenarioOneway, Concurrency: 64, HopRateRatio: 0.85, TargetHopRate: 0.9, HopCeilingRatio: 0.3,
		machineryRatios: machineryRatios{OwnRatio: 0.87, CeilingRatio: 0.93, OwnCPURatio: 0.86, CeilingCPURatio: 0.91}}); err != nil {
		t.Fatal(err)
	}
	if err := report(&b, false, viewScaleResult{Scenario: scenarioViewScale, Keys: 9, LoadRatio: 1.25, OverheadPerKey: 70, WakeRatio: 1.5}); err != nil {
		t.Fatal(err)
	}
	if err := report(&b, false, idleRoutesResult{Scenario: scenarioIdleRoutes, Routes: 8, IdleCores: 0.005, RouteRatio: 0.97, IdleRatio: 1.75, AgainRouteRatio: 0.99}); err != nil {
		t.Fatal(err)
	}
	if err := report(&b, false, fanoutResult{Scenario: scenarioFanout, Streams: 7, Split: true, Lag: latency{P99Ms: 12}, TargetP99Ms: 500, Server: &perRequest{Allocs: 2}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fetch-single:", "no-op", "processor", "0.60 × the no-op rate", "server alone:     7.0 allocs/req",
		"allocations 1.50 × (issue 9 target ≤ 2)", "longpoll: 3 waiters", "upper bound",
		"request-reply:", "median round trip 1.50 × the raw loop's (issue 9 target ≤ 2)", "with 64 in flight 0.40 ×",
		"request records carry 11 headers", "produce-oneway:", "view-scale: 9 keys", "1.25 × (issue 20 target ≤ 1.5)", "70 B over the key and value", "small view 0.0 ms: 1.50 ×", "idle-routes: 8 fetch routes", "0.50 % its own (issue 20 target ≤ 1 %)", "0.97 ×", "is 1.75 × it", "0.99 ×", "0.85 × the hop baseline's (issue 20 target ≥ 0.9), which reaches 0.30 ×",
		"0.87 × the machinery baseline's", "which reaches 0.93 × the hop's (the ceiling); by CPU per request 0.86 and 0.91",
		"grpc-fanout: 7 streams", "p99 12.0", "target p99 ≤ 500 ms", "server alone 2.00 allocs"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestFlagsRefuseOutOfBounds(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "nope"},
		{"-waiters", "100001"},
		{"-raw-headers", "some"},
		{"-view-keys", "2000001"},
		{"-routes", "10001"},
		{"-idle", "1ms"},
		{"-idleprofile", "a.pprof", "-cpuprofile", "b.pprof"},
		{"-wakeprofile", "a", "-cpuprofile", "b.pprof"},
		{"-clients", "0"},
		{"-duration", "11m"},
		{"-value-size", "8"},
		{"-streams", "20001"},
		{"-rate", "0"},
		{"-record-size", "8"},
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

// The histogram's buckets are within 1 % of their values, contiguous and
// monotonic, and its percentiles are nearest-rank.
func TestHist(t *testing.T) {
	prev := -1
	for us := uint64(0); us < 1<<24; us = us*17/16 + 1 {
		i := histIndex(us)
		if i < prev {
			t.Fatalf("index of %d µs is %d, below %d", us, i, prev)
		}
		prev = i
		if v := histValue(i); v < float64(us)*0.99-1 || v > float64(us)*1.01+1 {
			t.Errorf("%d µs is in bucket %d, worth %.1f", us, i, v)
		}
	}
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	for p, want := range map[float64]float64{50: 500, 99: 990, 100: 1000} {
		if got := h.quantileMs(p); got < want*0.99 || got > want*1.01 {
			t.Errorf("p%v = %.2f ms, want %v", p, got, want)
		}
	}
	if h.maxMs() != 1000 || h.summary().Samples != 1000 {
		t.Errorf("%+v", h.summary())
	}
}

// A fan-out record is a protobuf message of exactly the asked size whose
// head reads back.
func TestFanoutValue(t *testing.T) {
	for _, size := range []int{minRecord, 100, 146, 147, 148, 149, 4096, maxValue} {
		v := fanoutValue(7, size)
		binary.LittleEndian.PutUint64(v[10:18], 42)
		seq, at, ok := readRecord(append(v, 0xfa, 0xff, 0x0f, 1, 0)) // with a reliability field after it
		if len(v) != size || !ok || seq != 7 || at != 42 {
			t.Errorf("size %d: %d bytes, %d %d %v", size, len(v), seq, at, ok)
		}
		for b := v; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 || num < 1 || num > 3 {
				t.Fatalf("size %d: not a protobuf message at %d: %v", size, len(v)-len(b), protowire.ParseError(n))
			}
			b = b[n:]
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				t.Fatalf("size %d: field %d: %v", size, num, protowire.ParseError(n))
			}
			b = b[n:]
		}
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

func TestLimitsFlag(t *testing.T) {
	o, err := parseFlags([]string{"-limits", "stream-send-rate: 1000, stream-send-interval: 100ms"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, more := range []bool{false, true} {
		cfg, err := config.Parse("bench.yaml", []byte(benchConfig(more, o.limits)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if l := cfg.Limits; l.StreamSendRate != 1000 || l.StreamSendInterval != 100*time.Millisecond || l.MaxWait != time.Minute {
			t.Errorf("more routes %v: limits %+v, want the flag's and max-wait 60s", more, l)
		}
	}
}

// TestNoopOnlyChild checks the no-op-only server process the long poll
// measures the no-op in: it serves the no-op and refuses, by name, what
// needs the broker or the processor it does not run.
func TestNoopOnlyChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := startChild(ctx, childConfig{LogLevel: "warn", NoopOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if c.processorAddr() != "" || c.brokerAddr() != "" {
		t.Errorf("addresses %q, %q; want none", c.processorAddr(), c.brokerAddr())
	}
	if _, err := c.startNoop(ctx, nil, true); err != nil {
		t.Fatal(err)
	}
	if n, err := c.heldNoop(ctx); err != nil || n != 0 {
		t.Errorf("held %d, %v; want 0", n, err)
	}
	if _, ok, err := c.memory(ctx, ""); err != nil || !ok {
		t.Errorf("memory: %v, %v", ok, err)
	}
	err = c.put(ctx, itemsTopic, map[string][]byte{"k": []byte("{}")})
	if want := `command "put": this server process runs the no-op server alone`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("put: %v; want %q", err, want)
	}
	if err := c.stopNoop(ctx); err != nil {
		t.Error(err)
	}
}

// TestWakeProfiles runs the long poll with -wakeprofile: a CPU profile of
// each server's wake-up alone, and the wake-up's CPU per waiter.
func TestWakeProfiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := filepath.Join(t.TempDir(), "w")
	var out, errOut bytes.Buffer
	args := []string{"-scenario", "longpoll", "-json", "-split", "-waiters", "50", "-register-timeout", "20s", "-timeout", "90s", "-wakeprofile", prefix}
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	for _, s := range []string{"noop", "processor"} {
		if fi, err := os.Stat(prefix + "-" + s + "-wake.pprof"); err != nil || fi.Size() == 0 {
			t.Errorf("wake profile of %s: %v", s, err)
		}
	}
	var lp longPollResult
	if err := json.Unmarshal(out.Bytes(), &lp); err != nil {
		t.Fatal(err)
	}
	// Every answer allocates in the server (its answer at least).
	if lp.Processor.WakeAllocs < 1 || lp.Noop.WakeAllocs < 1 {
		t.Errorf("wake-up allocations per waiter: processor %.1f, no-op %.1f", lp.Processor.WakeAllocs, lp.Noop.WakeAllocs)
	}
}
