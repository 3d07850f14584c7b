package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// machineTicks reads the first line of /proc/stat (Linux): the machine's
// busy and total CPU time in clock ticks over all cores, whoever used it.
// ok is false where there is no such file. Busy over total between two
// readings, times the core count, is how many cores the whole machine kept
// busy: with the run's own cores beside it, it tells a saturated machine
// (other tenants) from a bottleneck in the run.
func machineTicks() (busy, total uint64, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0, false
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range fields[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// idle and iowait are not busy; guest time is already in user.
		switch i {
		case 3, 4:
		case 8, 9:
			total -= n
		default:
			busy += n
		}
	}
	return busy, total, true
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes
// (Linux; "" elsewhere): the figures of a run on a shared machine need it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
