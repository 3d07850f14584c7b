//go:build unix

// Package cputime reads the CPU time the process has used, for the
// benchmarks and the load generator, which report CPU per request because
// it moves less than wall time on a shared machine.
package cputime

import (
	"syscall"
	"time"
)

// Process is the user + system CPU time of this process so far.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0 // RUSAGE_SELF with a valid pointer does not fail
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
