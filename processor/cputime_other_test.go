//go:build !unix

package processor

import "time"

// processCPU is 0 where getrusage is not: the benchmarks report no CPU time.
func processCPU() time.Duration { return 0 }
