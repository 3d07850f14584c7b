//go:build !unix

package main

import "time"

// cpuTime is unknown here: CPU figures are reported as 0.
func cpuTime() time.Duration { return 0 }
