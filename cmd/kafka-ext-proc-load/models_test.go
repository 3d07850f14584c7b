package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	var r modelsResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	for name, x := range map[string]rate{"produce": r.Produce, "validated produce": r.ProduceModel, "fetch": r.Fetch, "converted fetch": r.FetchModel} {
		if x.Requests == 0 || x.Errors != 0 || x.All.CPUus <= 0 {
			t.Errorf("%s: %+v, want requests answered and CPU measured", name, x)
		}
	}
	if r.ProduceRatio <= 0 || r.FetchRatio <= 0 {
		t.Errorf("ratios %v %v, want both computed", r.ProduceRatio, r.FetchRatio)
	}
	errOut.Reset()
	if code := run(ctx, append(args, "-split"), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "leave -split out") {
		t.Errorf("-split: exit %d %q, want 1 saying to leave it out", code, errOut.String())
	}
}
