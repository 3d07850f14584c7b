package main

import (
	"strings"
	"testing"
)

// TestVersusMemoryDropsTheTargetAcrossProcesses: a GET ratio of the view on
// disk against the view in memory keeps its target when both processors
// run in this process, and has none, saying why, when the one on disk runs
// in a child process (-split) and the one in memory does not.
func TestVersusMemoryDropsTheTargetAcrossProcesses(t *testing.T) {
	const of = "GETs per second, on disk ÷ in memory"
	if got, target := versusMemory(&options{}, of, "≥ 0.8"); got != of || target != "≥ 0.8" {
		t.Errorf("in this process: %q, target %q; want %q, ≥ 0.8", got, target, of)
	}
	got, target := versusMemory(&options{split: true}, of, "≥ 0.8")
	if target != "" || !strings.HasPrefix(got, of) || !strings.Contains(got, "not like for like") {
		t.Errorf("with -split: %q, target %q; want the description saying why, and no target", got, target)
	}
}
