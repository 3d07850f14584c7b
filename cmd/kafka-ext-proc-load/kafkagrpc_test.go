package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestKafkaGRPCScenario runs the kafka-grpc scenario briefly, as a user
// would: every call of both legs at every level was answered with its
// message echoed, or for Expand its words (the scenario fails otherwise),
// the echo service saw every one of them, and the ratios are computed;
// -split is refused.
func TestKafkaGRPCScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	args := []string{"-scenario", "kafka-grpc", "-json", "-conns", "1", "-duration", "200ms", "-warmup", "50ms", "-rounds", "2",
		"-value-size", "100", "-timeout", "90s"}
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	r := parseOutputs(t, out.Bytes()).of(t, scenarioKafkaGRPC)
	if r.num(t, "message_bytes") != 100 {
		t.Errorf("message_bytes %v, want -value-size's 100", r["message_bytes"])
	}
	var answered float64
	for _, n := range kgLevels() {
		for _, leg := range []string{"worker", "raw"} {
			f := fmt.Sprintf("%s_%d_", leg, n)
			p50, p99, max := r.num(t, f+"latency_p50_ms"), r.num(t, f+"latency_p99_ms"), r.num(t, f+"latency_max_ms")
			if r.num(t, f+"requests") <= 0 || r.num(t, f+"errors") != 0 || r.num(t, f+"req_per_s") <= 0 ||
				len(r.list(t, f+"round_req_per_s")) != 2 || r.num(t, f+"latency_samples") != r.num(t, f+"requests") ||
				r.num(t, f+"all_cpu_us_per_req") <= 0 || p50 <= 0 || p50 > p99 || p99 > max {
				t.Errorf("%s%d: %v", leg, n, r)
			}
			answered += r.num(t, f+"requests")
		}
		if r.num(t, fmt.Sprintf("rate_ratio_%d", n)) <= 0 || r.num(t, fmt.Sprintf("latency_ratio_%d", n)) <= 0 || !r.has(fmt.Sprintf("added_p50_ms_%d", n)) {
			t.Errorf("ratios at %d in flight: %v", n, r)
		}
	}
	// Expand: four words answered as four messages (the scenario fails
	// otherwise), at 1 and 64 in flight.
	if r.num(t, "expand_messages") != 4 {
		t.Errorf("expand_messages %v, want 4", r["expand_messages"])
	}
	for _, n := range kgStreamLevels() {
		for _, leg := range []string{"worker", "raw"} {
			f := fmt.Sprintf("expand_%s_%d_", leg, n)
			if r.num(t, f+"requests") <= 0 || r.num(t, f+"errors") != 0 || r.num(t, f+"latency_p50_ms") <= 0 {
				t.Errorf("expand %s %d: %v", leg, n, r)
			}
			answered += r.num(t, f+"requests")
		}
		if r.num(t, fmt.Sprintf("expand_rate_ratio_%d", n)) <= 0 || !r.has(fmt.Sprintf("expand_added_p50_ms_%d", n)) {
			t.Errorf("expand ratios at %d in flight: %v", n, r)
		}
	}
	// The service answered every measured call, and those of the warm-ups
	// and of the first answer of each leg besides.
	if calls := r.num(t, "echo_calls"); calls < answered {
		t.Errorf("the echo service saw %v calls, fewer than the %v answered", calls, answered)
	}
	if r.num(t, "cpu_ratio") <= 0 {
		t.Errorf("cpu_ratio: %v", r)
	}
	// Where /proc tells, the C side of the Kafka clients: each level's
	// figure is within the process's, and each leg kept librdkafka's threads
	// busy over its levels together (a single short window of a small run
	// may stay under the 10 ms clock tick, so no one level must show it).
	if _, err := os.Stat("/proc/self/task"); err == nil {
		for _, leg := range []string{"worker", "raw"} {
			sum := 0.0
			for _, n := range []int{1, 16, 64} {
				k := fmt.Sprintf("%s_%d_", leg, n)
				c := r.num(t, k+"librdkafka_cpu_us_per_req")
				if c < 0 || c > r.num(t, k+"all_cpu_us_per_req") {
					t.Errorf("%s at %d in flight: librdkafka CPU per round trip %v µs, want within the process's %v", leg, n, c, r[k+"all_cpu_us_per_req"])
				}
				sum += c
			}
			if sum <= 0 {
				t.Errorf("%s: librdkafka's threads used no CPU at any level: %v", leg, r)
			}
		}
		if r.num(t, "worker_64_librdkafka_cpu_us_per_req") > 0 && r.num(t, "raw_64_librdkafka_cpu_us_per_req") > 0 && r.num(t, "librdkafka_cpu_ratio") <= 0 {
			t.Errorf("librdkafka_cpu_ratio: %v", r)
		}
	}
	errOut.Reset()
	if code := run(ctx, append(args, "-split"), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "leave -split out") {
		t.Errorf("-split: exit %d %q, want 1 saying to leave it out", code, errOut.String())
	}
}
