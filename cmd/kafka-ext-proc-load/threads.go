package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/<pid>/task/<tid>/stat:
// USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// threadSample is, by thread name, the CPU time so far of this process's
// threads of that name and how many there are; ids are the threads
// sampled.
type threadSample struct {
	cpu   map[string]time.Duration
	count map[string]int
	ids   map[string]bool
}

// threadsCPUByName samples this process's threads whose name starts with
// prefix, by name ("rdk:main", "rdk:broker0", …: the threads of that name
// of every client summed, and counted), from /proc (Linux only), leaving out
// the threads in skip (ids of an earlier sample: clients that lived before
// the one measured). librdkafka names its threads so: their sum is the C
// side of the Kafka clients, which the Go profiler does not see, and each
// client has one rdk:main, so its count is the number of clients alive.
// Threads that ended are not counted, so take it over a window in which the
// clients live throughout.
func threadsCPUByName(prefix string, skip map[string]bool) (threadSample, error) {
	dirs, err := filepath.Glob("/proc/self/task/*")
	if err != nil || len(dirs) == 0 {
		return threadSample{}, fmt.Errorf("listing this process's threads: %w", os.ErrNotExist)
	}
	ticks := map[string]int64{}
	count := map[string]int{}
	ids := map[string]bool{}
	for _, d := range dirs {
		id := filepath.Base(d)
		if skip[id] {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || !strings.HasPrefix(string(comm), prefix) {
			continue // ended meanwhile, or not one of them
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		t, err := statTicks(stat)
		if err != nil {
			return threadSample{}, fmt.Errorf("%s: %w", d, err)
		}
		name := strings.TrimSpace(string(comm))
		ticks[name] += t
		count[name]++
		ids[id] = true
	}
	out := make(map[string]time.Duration, len(ticks))
	for name, t := range ticks {
		out[name] = time.Duration(t) * time.Second / clockTicks
	}
	return threadSample{cpu: out, count: count, ids: ids}, nil
}

// threadCores is the cores each thread name took between two
// threadsCPUByName samples over d (names only in the second count from 0).
func threadCores(before, after map[string]time.Duration, d time.Duration) map[string]float64 {
	out := make(map[string]float64, len(after))
	for name, t := range after {
		out[name] = (t - before[name]).Seconds() / d.Seconds()
	}
	return out
}

// statTicks is utime + stime of one /proc stat line. The name field may
// hold spaces and parentheses, so the fields are counted after its last ')':
// utime and stime are fields 14 and 15, the 12th and 13th after it.
func statTicks(stat []byte) (int64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no ')' in %q", stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the name, want at least 13", len(f))
	}
	u, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	s, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return u + s, nil
}
