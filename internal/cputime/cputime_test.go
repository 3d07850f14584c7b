package cputime

import "testing"

// The process's CPU time grows with work done.
func TestProcessGrows(t *testing.T) {
	before := Process()
	if before == 0 {
		t.Skip("no CPU time on this platform")
	}
	x := uint64(1)
	for Process() == before {
		for range 1_000_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	if Process() < before {
		t.Fatalf("CPU time went back: %v after %v (%d)", Process(), before, x)
	}
}
