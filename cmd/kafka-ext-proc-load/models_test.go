package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestModelsScenario runs the models scenario briefly: every request of
// the four routes answered as expected (the scenario fails otherwise) and
// the ratios computed; -split is refused.
func TestModelsScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	args := []string{"-scenario", "models", "-json", "-clients", "2", "-conns", "1", "-duration", "200ms", "-warmup", "50ms", "-rounds", "2", "-timeout", "90s"}
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	r := parseOutputs(t, out.Bytes()).of(t, scenarioModels)
	for _, name := range []string{"produce_plain", "produce_validated", "fetch_plain", "fetch_converted"} {
		if r.num(t, name+"_requests") == 0 || r.num(t, name+"_errors") != 0 || r.num(t, name+"_all_cpu_us_per_req") <= 0 {
			t.Errorf("%s: %v, want requests answered and CPU measured", name, r)
		}
	}
	if p, f := r.num(t, "produce_cpu_ratio"), r.num(t, "fetch_cpu_ratio"); p <= 0 || f <= 0 {
		t.Errorf("ratios %v %v, want both computed", p, f)
	}
	errOut.Reset()
	if code := run(ctx, append(args, "-split"), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "leave -split out") {
		t.Errorf("-split: exit %d %q, want 1 saying to leave it out", code, errOut.String())
	}
}
