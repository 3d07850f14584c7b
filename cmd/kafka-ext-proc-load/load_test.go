package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
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
	stdout := runOK(ctx, t, args)
	for _, p := range profs {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v", filepath.Base(p), err)
		}
	}
	raw := bytes.Clone(stdout)
	got := parseOutputs(t, stdout)
	for _, s := range []string{scenarioSingle, scenarioMerged} {
		r := got.of(t, s)
		for _, side := range []string{"processor", "noop"} {
			if r.num(t, side+"_requests") <= 0 || r.num(t, side+"_errors") != 0 || r.num(t, side+"_req_per_s") <= 0 ||
				r.num(t, side+"_all_allocs_per_req") <= 0 || len(r.list(t, side+"_round_req_per_s")) != 2 {
				t.Errorf("%s %s: %v", s, side, r)
			}
			if split != r.has(side+"_server_allocs_per_req") ||
				split && (r.num(t, side+"_server_allocs_per_req") <= 0 || r.num(t, side+"_server_allocs_per_req") >= r.num(t, side+"_all_allocs_per_req")) {
				t.Errorf("%s %s (split %v): server share of %v", s, side, split, r)
			}
		}
		if r.num(t, "ratio") <= 0 || r.num(t, "alloc_ratio") <= 0 || r.num(t, "net_alloc_ratio") <= 0 || r.num(t, "background_allocs_per_s") < 0 ||
			split && r.num(t, "server_alloc_ratio") <= 0 {
			t.Errorf("%s: %v", s, r)
		}
	}
	// Every waiter was answered 200 with the new value (the scenario fails
	// otherwise); the figures must be those of 50 waiters.
	lp := got.of(t, scenarioLongPoll)
	for _, side := range []string{"processor", "noop"} {
		min, p50, p99, max := lp.num(t, side+"_wake_min_ms"), lp.num(t, side+"_wake_p50_ms"), lp.num(t, side+"_wake_p99_ms"), lp.num(t, side+"_wake_max_ms")
		if lp.num(t, side+"_waiters") != 50 || max <= 0 || min > p50 || p50 > p99 || p99 > max ||
			lp.num(t, side+"_all_goroutines_per_waiter") < 1 || lp.num(t, side+"_all_bytes_per_waiter") <= 0 {
			t.Errorf("longpoll %s: %v", side, lp)
		}
		// Each held stream holds memory in the server process. Not
		// necessarily a goroutine of its own: its handler may run on one of
		// the server's gRPC stream workers, started before the first waiter.
		if split != lp.has(side+"_server_bytes_per_waiter") || split && lp.num(t, side+"_server_bytes_per_waiter") <= 0 {
			t.Errorf("longpoll %s (split %v): server share of %v", side, split, lp)
		}
	}
	if lp.num(t, "wake_ratio") <= 0 || lp.num(t, "mem_ratio") <= 0 || split && (lp.num(t, "server_mem_ratio") <= 0 || lp.num(t, "server_heap_ratio") <= 0) {
		t.Errorf("longpoll: %v", lp)
	}
	// Every answer was 201 with the responder's reply (the scenario fails
	// otherwise).
	rr := got.of(t, scenarioRequestReply)
	checkRRFigures(t, rr, false)
	if rr.num(t, "latency_ratio") <= 0 || rr.num(t, "rate_ratio") <= 0 || rr.num(t, "hop_rate_ratio") <= 0 || rr.num(t, "hop_ceiling_ratio") <= 0 ||
		rr.num(t, "reply_bytes") <= rr.num(t, "body_bytes") ||
		rr.num(t, "machinery_own_ratio") <= 0 || rr.num(t, "machinery_ceiling_ratio") <= 0 ||
		rr.num(t, "machinery_own_cpu_ratio") <= 0 || rr.num(t, "machinery_ceiling_cpu_ratio") <= 0 {
		t.Errorf("request-reply: %v", rr)
	}
	// Its own five headers, or the processor's: the request headers the
	// emulator sends (more than five) with reply-to and the correlation id.
	if h := rr.num(t, "raw_headers"); !split && h != 5 || split && h <= 5 {
		t.Errorf("request-reply (split %v): the raw loop's records carry %v headers", split, h)
	}
	// Every answer was 204 (the scenario fails otherwise).
	ow := got.of(t, scenarioOneway)
	checkRRFigures(t, ow, true)
	if ow.num(t, "hop_rate_ratio") <= 0 || ow.num(t, "hop_ceiling_ratio") <= 0 || ow.num(t, "rate_ratio") <= 0 || ow.num(t, "latency_ratio") <= 0 ||
		ow.num(t, "hop_cpu_ratio") <= 0 ||
		ow.num(t, "machinery_own_ratio") <= 0 || ow.num(t, "machinery_ceiling_ratio") <= 0 ||
		ow.num(t, "machinery_own_cpu_ratio") <= 0 || ow.num(t, "machinery_ceiling_cpu_ratio") <= 0 ||
		ow.num(t, "concurrency") != replyConcurrency || ow.num(t, "body_bytes") <= 0 || ow.num(t, "raw_headers") != 1 {
		t.Errorf("produce-oneway: %v", ow)
	}
	// Every record reached every stream once (the scenario fails
	// otherwise): 20 streams × 100 records.
	fo := got.of(t, scenarioFanout)
	if fo.num(t, "streams") != 20 || fo.num(t, "written") != 100 || fo.num(t, "delivered_min_per_stream") != 100 ||
		fo.num(t, "streams_complete") != 20 || fo.num(t, "delivered") != 2000 ||
		fo.num(t, "lag_samples") != 2000 || fo.num(t, "raw_lag_samples") != 100 || fo.num(t, "lag_p50_ms") <= 0 ||
		fo.num(t, "lag_p99_ms") > fo.num(t, "lag_max_ms") || fo.num(t, "lag_p99_ratio") <= 0 ||
		fo.num(t, "client_cores") <= 0 || split != fo.has("server_per_record_allocs_per_req") || split && fo.num(t, "server_cores") <= 0 {
		t.Errorf("grpc-fanout: %v", fo)
	}
	checkMedians(t, raw, split)
}

// checkRRFigures checks the figures of every target of the request-reply
// or oneway scenario at both concurrencies (the oneway's CPU too).
func checkRRFigures(t *testing.T, r output, cpu bool) {
	t.Helper()
	for _, target := range []string{"gateway", "raw", "hop", "machinery"} {
		for _, level := range []string{"1", "n"} {
			f := target + "_" + level + "_"
			p50, p99, max := r.num(t, f+"latency_p50_ms"), r.num(t, f+"latency_p99_ms"), r.num(t, f+"latency_max_ms")
			if r.num(t, f+"requests") <= 0 || r.num(t, f+"errors") != 0 || r.num(t, f+"req_per_s") <= 0 || len(r.list(t, f+"round_req_per_s")) != 2 ||
				cpu && r.num(t, f+"all_cpu_us_per_req") <= 0 ||
				r.num(t, f+"latency_samples") != r.num(t, f+"requests") || p50 <= 0 || p50 > p99 || p99 > max {
				t.Errorf("%s %s%s: %v", r["scenario"], target, level, r)
			}
		}
	}
}

// TestViewScale runs the view-scale scenario small, as a user would.
// Heap figures are only checked as reported: a collection between the two
// samples can make a delta of a small view negative.
func TestViewScale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"-scenario", "view-scale", "-json", "-view-keys", "3000", "-keys", "50",
		"-clients", "4", "-conns", "2", "-duration", "100ms", "-warmup", "20ms", "-rounds", "2", "-timeout", "90s"}
	stdout := runOK(ctx, t, args)
	r := parseOutputs(t, stdout).of(t, scenarioViewScale)
	if r.num(t, "keys") != 3000 || r.num(t, "small_keys") != 50 || r.num(t, "partitions") != 4 || r.num(t, "raw_seconds") <= 0 ||
		r.num(t, "ready_seconds") <= 0 || r.num(t, "load_ratio") <= 0 ||
		r.num(t, "live_bytes") != 3000*float64(len("k1500"))+3000*r.num(t, "value_bytes") || r.num(t, "heap_bytes_per_key") == 0 || r.num(t, "mem_ratio") == 0 ||
		r.num(t, "map_seconds") <= 0 || r.num(t, "map_load_ratio") <= 0 || r.num(t, "map_overhead_bytes_per_key") == 0 {
		t.Errorf("view-scale: %v", r)
	}
	// Every GET was answered 200 with the key's value (the scenario fails
	// otherwise).
	for _, g := range []string{"big_get", "small_get"} {
		if r.num(t, g+"_requests") <= 0 || r.num(t, g+"_errors") != 0 || len(r.list(t, g+"_round_req_per_s")) != 2 {
			t.Errorf("view-scale %s: %v", g, r)
		}
	}
	// Every waiter was answered 200 with the new value (the scenario fails
	// otherwise).
	if r.num(t, "get_ratio") <= 0 || r.num(t, "big_wake_ms") <= 0 || r.num(t, "small_wake_ms") <= 0 || r.num(t, "wake_ratio") <= 0 {
		t.Errorf("view-scale: %v", r)
	}
	// The views on disk, in this process: no resident memory of their own.
	checkViewDisk(t, r, 3000, true)
	if r["disk_processor"] != "this process" || r.has("disk_peak_rss_mib") || r.has("disk_rss_mib") || r.has("disk_heap_mib") {
		t.Errorf("view-scale: the disk processor in this process: %v", r)
	}
}

// TestViewScaleDiskOnly runs view-scale with the views on disk alone, their
// processor in a child process (-split): it reports the child's resident
// memory, and nothing of views in memory; its profiles are that child's.
func TestViewScaleDiskOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	allocs, trace := filepath.Join(dir, "allocs.pprof"), filepath.Join(dir, "run.trace")
	args := []string{"-scenario", "view-scale", "-json", "-view-disk-only", "-split", "-view-keys", "12000", "-keys", "50",
		"-clients", "4", "-conns", "2", "-duration", "100ms", "-warmup", "20ms", "-rounds", "2", "-timeout", "90s",
		"-allocprofile", allocs, "-trace", trace}
	stdout := runOK(ctx, t, args)
	r := parseOutputs(t, stdout).of(t, scenarioViewScale)
	if r["disk_only"] != true || r.num(t, "raw_seconds") <= 0 || r.num(t, "raw_default_seconds") <= 0 {
		t.Errorf("view-scale: %v", r)
	}
	// The allocation profile is of the processor with its views on disk:
	// it alone writes store files, each through a buffer of a megabyte
	// (an allocation the profile always samples).
	if !profileNames(t, allocs, "kafkaio/views.(*bufferedFile).Write") {
		t.Errorf("the allocation profile of view-scale -split is not of the processor with its views on disk")
	}
	// The execution trace, of the same process: Go's trace format opens
	// with its version.
	if b, err := os.ReadFile(trace); err != nil || !bytes.HasPrefix(b, []byte("go 1.")) || len(b) < 1<<10 {
		t.Errorf("the execution trace of view-scale -split: %d bytes, %v", len(b), err)
	}
	// Read back, the trace gives the big view's catch-up: its reader's life
	// within the first load, the apply and the reader running in it, and
	// at most the two Ps of the machine held.
	catchUp, load := r.num(t, "disk_trace_catchup_seconds"), r.num(t, "disk_first_load_seconds")
	if catchUp <= 0 || catchUp > load || r.num(t, "disk_trace_reader_running_s") <= 0 || r.num(t, "disk_trace_apply_running_s") <= 0 ||
		r.num(t, "disk_trace_goroutines_running") <= 0 || r.num(t, "disk_trace_procs_held") > 2.001 {
		t.Errorf("view-scale: the catch-up read from the trace: %v", r)
	}
	for _, kind := range catchUpKinds {
		var sum float64
		for _, state := range []string{"running", "runnable", "syscall", "waiting"} {
			sum += r.num(t, "disk_trace_"+kind+"_"+state+"_s")
		}
		if kind != "flush" && (sum < catchUp*0.99 || sum > catchUp*1.01) {
			t.Errorf("view-scale: the catch-up's %s spent %.3f s in its states over a %.3f s catch-up", kind, sum, catchUp)
		}
	}
	for _, name := range []string{"ready_seconds", "heap_bytes", "map_seconds", "big_get_req_per_s", "big_wake_ms", "disk_get_ratio", "disk_restart_ratio"} {
		if r.has(name) {
			t.Errorf("view-scale -view-disk-only measured %s: %v", name, r)
		}
	}
	checkViewDisk(t, r, 10000, false)
	// The child's resident set: at its peak, after serving (the Go heap
	// within it), and the restarted one's; the peak is held to the issue's
	// bound.
	peak, rss, restart := r.num(t, "disk_peak_rss_mib"), r.num(t, "disk_rss_mib"), r.num(t, "disk_restart_peak_rss_mib")
	heap, held := r.num(t, "disk_heap_mib"), r.num(t, "disk_go_held_mib")
	if r["disk_processor"] != "child process" || rss <= 0 || peak < rss || heap <= 0 || held < heap || restart <= 0 || r.num(t, "disk_restart_rss_mib") > restart ||
		r.obj(t, "targets")["disk_peak_rss_mib"] != "≤ 768" {
		t.Errorf("view-scale: the disk processor in a child process: %v", r)
	}
}

// profileNames tells whether the profile in file names function fn.
func profileNames(t *testing.T, file, fn string) bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("reading the profile %s: %v", file, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("reading the profile %s: %v", file, err)
	}
	return bytes.Contains(b, []byte(fn))
}

// checkViewDisk checks the figures of the views on disk: the load, the
// restart and the GETs of one key, of a hot set of hot keys, and of
// uniform keys cold and warm, beside those in memory when withMem.
// Every GET was answered 200 with its key's value (the scenario fails
// otherwise).
func checkViewDisk(t *testing.T, r output, hot float64, withMem bool) {
	t.Helper()
	if r.num(t, "disk_first_load_seconds") <= 0 || r.num(t, "disk_load_ratio") <= 0 ||
		r.num(t, "disk_settle_seconds") < 0 ||
		r.num(t, "disk_restart_seconds") <= 0 || r.num(t, "hot_keys") != hot ||
		r["page_cache_drop"] != "drop_caches" && r["page_cache_drop"] != "fadvise" || r.num(t, "disk_uniform_cold_p99_ratio") <= 0 {
		t.Errorf("view-scale on disk: %v", r)
	}
	legs := []string{"disk_one_get", "disk_hot_get", "disk_uniform_get", "disk_uniform_cold_get"}
	if withMem {
		legs = append(legs, "mem_one_get", "mem_hot_get", "mem_uniform_get")
	}
	for _, leg := range legs {
		p50, p99, max := r.num(t, leg+"_latency_p50_ms"), r.num(t, leg+"_latency_p99_ms"), r.num(t, leg+"_latency_max_ms")
		rounds := 2
		if leg == "disk_uniform_cold_get" {
			rounds = 0 // one window
		}
		if r.num(t, leg+"_requests") <= 0 || r.num(t, leg+"_req_per_s") <= 0 || r.num(t, leg+"_latency_samples") != r.num(t, leg+"_requests") ||
			p50 <= 0 || p50 > p99 || p99 > max || rounds > 0 && len(r.list(t, leg+"_round_req_per_s")) != rounds || rounds == 0 && r.has(leg+"_round_req_per_s") {
			t.Errorf("view-scale %s: %v", leg, r)
		}
	}
	for _, q := range []string{"disk_get_ratio", "disk_hot_get_ratio", "disk_uniform_get_ratio", "disk_restart_ratio"} {
		if withMem != r.has(q) || withMem && r.num(t, q) <= 0 {
			t.Errorf("view-scale %s (views in memory %v): %v", q, withMem, r)
		}
	}
	if withMem && (r.obj(t, "targets")["disk_hot_get_ratio"] != "≥ 0.8" || r.obj(t, "targets")["disk_get_ratio"] != "≥ 0.8") {
		t.Errorf("view-scale: targets %v", r["targets"])
	}
}

// TestIdleRoutes runs the idle-routes scenario small, as a user would. The
// idle CPU and memory deltas are only checked as reported: neither has a
// sign a small run can promise.
func TestIdleRoutes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	prof, routeProf := filepath.Join(dir, "idle.pprof"), filepath.Join(dir, "rp")
	args := []string{"-scenario", "idle-routes", "-json", "-routes", "20", "-idle", "200ms", "-clients", "4", "-timeout", "90s", "-idleprofile", prof, "-fetch-wait", "2s",
		"-route-rounds", "2", "-routeprofile", routeProf}
	stdout := runOK(ctx, t, args)
	r := parseOutputs(t, stdout).of(t, scenarioIdleRoutes)
	// Every GET was answered 200 with the route's record (the scenario
	// fails otherwise).
	for _, name := range []string{"ready_seconds", "baseline_cores", "with_processor_cores",
		"all_routes_req_per_s", "one_route_req_per_s", "route_ratio", "again_routes_req_per_s", "again_route_ratio",
		"all_routes_cpu_us_per_req", "one_route_cpu_us_per_req", "route_cpu_ratio", "again_route_cpu_ratio",
		"noop_one_route_cpu_us_per_req", "noop_again_routes_cpu_us_per_req", "noop_again_route_cpu_ratio",
		"one_route_noop_cpu_ratio", "each_route_noop_cpu_ratio", "again_route_vs_noop_ratio",
		"one_route_allocs_per_req", "again_routes_allocs_per_req", "noop_one_route_allocs_per_req", "noop_again_routes_allocs_per_req"} {
		if r.num(t, name) <= 0 {
			t.Errorf("idle-routes: %s %v, want > 0", name, r[name])
		}
	}
	if r.num(t, "routes") != 20 || r.num(t, "fetch_wait_ms") != 2000 || r.num(t, "heap_bytes_per_route") == 0 || r.num(t, "idle_ratio") == 0 {
		t.Errorf("idle-routes: %v", r)
	}
	// The librdkafka share is read from /proc: where there is one, the
	// processor's clients have live rdk: threads throughout the window.
	if _, err := os.Stat("/proc/self/task"); err == nil {
		if c := r.num(t, "librdkafka_cores"); c < 0 || c > r.num(t, "with_processor_cores") {
			t.Errorf("librdkafka_cores %v, want 0..%v", c, r.num(t, "with_processor_cores"))
		}
		// The baseline consumer's threads ran throughout its window too
		// (in 200 ms they may not reach the /proc clock's 10 ms tick).
		if c := r.num(t, "raw_librdkafka_cores"); c < 0 {
			t.Errorf("raw_librdkafka_cores %v, want ≥ 0", c)
		}
		// The counts leave out the clients that lived before (the shared
		// servers'): the baseline is one client, the processor at least one.
		if n := r.obj(t, "raw_librdkafka_thread_counts")["rdk:main"]; n != 1.0 {
			t.Errorf("raw_librdkafka_thread_counts %v: %v rdk:main, want 1", r["raw_librdkafka_thread_counts"], n)
		}
		if n, _ := r.obj(t, "librdkafka_thread_counts")["rdk:main"].(float64); n < 1 {
			t.Errorf("librdkafka_thread_counts %v: %v rdk:main, want at least 1", r["librdkafka_thread_counts"], n)
		}
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("-idleprofile wrote no profile: %v", err)
	}
	for _, name := range []string{"one", "each", "noop-one", "noop-each"} {
		if fi, err := os.Stat(routeProf + "-" + name + ".pprof"); err != nil || fi.Size() == 0 {
			t.Errorf("-routeprofile wrote no %s profile: %v", name, err)
		}
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
	// Some of the figures BENCHMARKS.md reads, in each mode.
	want := map[string][]string{
		scenarioSingle:       {"ratio", "alloc_ratio", "net_cpu_ratio", "processor_all_allocs_per_req", "noop_req_per_s", "background_cpu_ms_per_s"},
		scenarioMerged:       {"ratio", "cpu_ratio", "processor_req_per_s"},
		scenarioLongPoll:     {"wake_ratio", "mem_ratio", "processor_wake_max_ms", "noop_wake_max_ms", "processor_all_bytes_per_waiter", "ack_ms"},
		scenarioRequestReply: {"latency_ratio", "rate_ratio", "hop_rate_ratio", "machinery_own_ratio", "gateway_1_latency_p50_ms", "raw_n_req_per_s", "raw_headers"},
		scenarioOneway:       {"hop_rate_ratio", "hop_cpu_ratio", "machinery_ceiling_cpu_ratio", "hop_n_all_cpu_us_per_req"},
		scenarioFanout:       {"lag_p99_ratio", "lag_p99_ms", "raw_lag_p99_ms", "worst_stream_p99_ms", "delivered_min_per_stream", "all_per_record_cpu_us_per_req"},
	}
	if split {
		want[scenarioSingle] = append(want[scenarioSingle], "server_alloc_ratio", "processor_server_cpu_us_per_req")
		want[scenarioLongPoll] = append(want[scenarioLongPoll], "server_mem_ratio", "processor_server_bytes_per_waiter")
		want[scenarioFanout] = append(want[scenarioFanout], "server_cores", "server_per_record_allocs_per_req")
	}
	for _, m := range med {
		for k, v := range m {
			if v == nil {
				t.Errorf("medians.jq: %s %s is null", m["scenario"], k)
			}
		}
		s, _ := m["scenario"].(string)
		for _, k := range want[s] {
			if _, ok := m[k]; !ok {
				t.Errorf("medians.jq: %s has no %s", s, k)
			}
		}
		delete(want, s)
	}
	if len(want) > 0 {
		t.Errorf("medians.jq: no medians of %v", want)
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

// The text report names every value the -json object has, with its
// target; a measurement not taken in the run is in neither.
func TestReport(t *testing.T) {
	r := newResult(scenarioSingle, true)
	r.param("clients", 1)
	r.param("duration_per_round", "1s")
	r.figures("processor", rate{Requests: 6, PerSecond: 6, RoundPerSecond: []float64{6, 5.5}, Server: &perRequest{Allocs: 7}})
	r.figures("noop", rate{Requests: 10, PerSecond: 10, RoundPerSecond: []float64{10}})
	r.figure("broker_requests", map[string]int64{"Fetch": 3, "Metadata": 1})
	r.target("processor_req_per_s", "≥ 5")
	r.ratio("ratio", 0.6, "requests per second, processor ÷ no-op", "≥ 0.6")
	var text, js bytes.Buffer
	if err := report(&text, false, r); err != nil {
		t.Fatal(err)
	}
	if err := report(&js, true, r); err != nil {
		t.Fatal(err)
	}
	obj := parseOutputs(t, js.Bytes()).of(t, scenarioSingle)
	if len(obj) < 10 {
		t.Fatalf("-json has %d values: %s", len(obj), js.String())
	}
	for name := range obj {
		// The header line says the scenario and where the servers ran.
		if name != "targets" && name != "scenario" && name != "split" && !strings.Contains(text.String(), name) {
			t.Errorf("the text report lacks %s:\n%s", name, text.String())
		}
	}
	if obj.num(t, "processor_server_allocs_per_req") != 7 || obj.has("noop_server_allocs_per_req") || strings.Contains(text.String(), "noop_server") {
		t.Errorf("the processor's server share, and none of the no-op's: %s\n%s", js.String(), text.String())
	}
	if tg := obj.obj(t, "targets"); len(tg) != 2 || tg["ratio"] != "≥ 0.6" || tg["processor_req_per_s"] != "≥ 5" {
		t.Errorf("targets %v", tg)
	}
	for _, want := range []string{"fetch-single (servers in a child process): clients 1, duration_per_round 1s\n",
		"processor_round_req_per_s  ", "6.00 / 5.50\n", "broker_requests  ", "Fetch 3, Metadata 1\n",
		"0.60 ×  requests per second, processor ÷ no-op (target ≥ 0.6)\n", "6.00 (target ≥ 5)\n"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, text.String())
		}
	}

	// Two values of one name, or a target of nothing, are refused.
	r.figure("ratio", 1.0)
	if err := report(&bytes.Buffer{}, true, r); err == nil {
		t.Error("two values named ratio: no error")
	}
	r = newResult(scenarioSingle, false)
	r.target("nothing", "1")
	if err := report(&bytes.Buffer{}, false, r); err == nil {
		t.Error("a target of nothing: no error")
	}
}

// output is one scenario's -json object.
type output map[string]any

// outputs are the -json objects of a run, by scenario.
type outputs map[string]output

func parseOutputs(t *testing.T, b []byte) outputs {
	t.Helper()
	got := outputs{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var o output
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		name, _ := o["scenario"].(string)
		got[name] = o
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func (g outputs) of(t *testing.T, scenario string) output {
	t.Helper()
	o, ok := g[scenario]
	if !ok {
		t.Fatalf("no output of %s", scenario)
	}
	return o
}

func (o output) has(name string) bool { _, ok := o[name]; return ok }

// num is the number named name; a missing value or another type fails the
// test, and is NaN, which no comparison holds for.
func (o output) num(t *testing.T, name string) float64 {
	t.Helper()
	v, ok := o[name].(float64)
	if !ok {
		t.Errorf("%v: %s is %v, want a number", o["scenario"], name, o[name])
		return math.NaN()
	}
	return v
}

func (o output) list(t *testing.T, name string) []any {
	t.Helper()
	v, ok := o[name].([]any)
	if !ok {
		t.Errorf("%v: %s is %v, want a list", o["scenario"], name, o[name])
	}
	return v
}

func (o output) obj(t *testing.T, name string) map[string]any {
	t.Helper()
	v, ok := o[name].(map[string]any)
	if !ok {
		t.Errorf("%v: %s is %v, want an object", o["scenario"], name, o[name])
	}
	return v
}

// TestReplySoak runs the reply soak tiny, in one process and split: a
// 64 KiB bound that small bodies fill within the first second, so most
// replays ask for evicted replies and are read back.
func TestReplySoak(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-process", true: "split"}[split], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := []string{"-scenario", "reply-soak", "-json", "-duration", "3s", "-clients", "4", "-soak-body", "200",
				"-replay-every", "4", "-sample-every", "250ms", "-limits", "reply-index-bytes: 64KiB", "-timeout", "90s"}
			if split {
				args = append(args, "-split")
			}
			stdout := runOK(ctx, t, args)
			r := parseOutputs(t, stdout).of(t, scenarioReplySoak)
			// Every answer was checked (the scenario fails otherwise); the
			// figures say so too.
			if r.num(t, "failures") != 0 || r.num(t, "mismatches") != 0 {
				t.Errorf("reply-soak: failures %v, mismatches %v", r["failures"], r["mismatches"])
			}
			for _, name := range []string{"orders", "replays", "req_per_s", "replays_read_back", "read_back_mean_ms", "read_back_p99_ms_le",
				"evicted", "locations", "location_bytes", "index_bytes", "order_p50_ms", "replay_p99_ms",
				"bound_reached_s", "bound_heap_mib", "end_heap_mib", "heap_ratio"} {
				if r.num(t, name) <= 0 {
					t.Errorf("reply-soak: %s %v, want > 0", name, r[name])
				}
			}
			if rb := r.obj(t, "read_backs"); rb["found"] != r["replays_read_back"] || rb["expired"] != 0.0 || rb["failed"] != 0.0 {
				t.Errorf("reply-soak: read_backs %v, replays_read_back %v", rb, r["replays_read_back"])
			}
			// The bound holds: the index's bytes stay within it.
			if b := r.num(t, "index_bytes"); b > 64<<10 {
				t.Errorf("reply-soak: index_bytes %v over the 64 KiB bound", b)
			}
			if r.num(t, "replays_from_memory")+r.num(t, "replays_read_back") != r.num(t, "replays") {
				t.Errorf("reply-soak: replays %v ≠ from memory %v + read back %v", r["replays"], r["replays_from_memory"], r["replays_read_back"])
			}
			if n := len(r.list(t, "heap_mib_samples")); n < 2 || n != len(r.list(t, "rss_mib_samples")) {
				t.Errorf("reply-soak: %d heap samples, %d RSS samples", n, len(r.list(t, "rss_mib_samples")))
			}
			if tg := r.obj(t, "targets"); tg["mismatches"] != "0" || tg["heap_ratio"] != "≤ 1.1" {
				t.Errorf("reply-soak: targets %v", tg)
			}
		})
	}
}

// TestReplySoakWindow runs the soak with windows short enough to turn over
// within it: the processor is given them (its limits say so), every replay
// is within them and answered, and memory is reported from when they have
// turned over.
func TestReplySoakWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"-scenario", "reply-soak", "-json", "-duration", "4s", "-clients", "4", "-soak-body", "200",
		"-replay-every", "4", "-sample-every", "250ms", "-limits", "reply-index-bytes: 64KiB", "-replay-window", "1s", "-timeout", "90s"}
	stdout := runOK(ctx, t, args)
	r := parseOutputs(t, stdout).of(t, scenarioReplySoak)
	if r.num(t, "failures") != 0 || r.num(t, "replays") <= 0 {
		t.Errorf("reply-soak: failures %v, replays %v", r["failures"], r["replays"])
	}
	if r["replay_window"] != "1s" || r["limits"] != "reply-index-bytes: 64KiB, reply-retention: 1s, idempotency-window: 1s" {
		t.Errorf("reply-soak: replay_window %v, limits %v", r["replay_window"], r["limits"])
	}
	if from := r.num(t, "steady_from_s"); from < 2 {
		t.Errorf("reply-soak: steady from %vs, before twice the 1s window", from)
	}
	for _, name := range []string{"steady_heap_mib", "steady_heap_ratio"} {
		if r.num(t, name) <= 0 {
			t.Errorf("reply-soak: %s %v, want > 0", name, r[name])
		}
	}
	if n := len(r.list(t, "steady_heap_min_max_mib")); n != 2 {
		t.Errorf("reply-soak: steady_heap_min_max_mib has %d values", n)
	}
}

func TestFlagsRefuseOutOfBounds(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "nope"},
		{"-waiters", "100001"},
		{"-raw-headers", "some"},
		{"-view-keys", "4000001"},
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
		{"-soak-body", "8"},
		{"-replay-every", "1"},
		{"-sample-every", "1ms"},
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
	args := []string{"-scenario", "longpoll", "-json", "-split", "-waiters", "50", "-register-timeout", "20s", "-timeout", "90s", "-wakeprofile", prefix}
	stdout := runOK(ctx, t, args)
	for _, s := range []string{"noop", "processor"} {
		if fi, err := os.Stat(prefix + "-" + s + "-wake.pprof"); err != nil || fi.Size() == 0 {
			t.Errorf("wake profile of %s: %v", s, err)
		}
	}
	lp := parseOutputs(t, stdout).of(t, scenarioLongPoll)
	// Every answer allocates in the server (its answer at least).
	if p, n := lp.num(t, "processor_server_wake_allocs_per_waiter"), lp.num(t, "noop_server_wake_allocs_per_waiter"); p < 1 || n < 1 {
		t.Errorf("wake-up allocations per waiter: processor %.1f, no-op %.1f", p, n)
	}
}

// runOK runs the load generator with args and returns what it wrote to
// standard output; a non-zero exit fails the test.
func runOK(ctx context.Context, t *testing.T, args []string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	return out.Bytes()
}
