package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// replyIndexSample is the processor's reply index as its
// kafka_ext_proc_reply_index_* metrics say (summed over clusters; the load
// generator has one): what it holds, what it evicted, and the read-backs
// of evicted replies; and the idempotency keys it remembers.
type replyIndexSample struct {
	Entries       int64 `json:"entries"`
	Bytes         int64 `json:"bytes"`
	Evicted       int64 `json:"evicted"`
	Locations     int64 `json:"locations"`
	LocationBytes int64 `json:"location_bytes"`
	// Read-backs by outcome: found, expired (410), failed (503).
	Found, Expired, Failed int64
	// ReadBackBuckets is the read-back latency histogram: cumulative
	// counts by upper bound in seconds, ascending.
	ReadBackBuckets []bucket `json:"read_back_buckets"`
	ReadBackSum     float64  `json:"read_back_sum"` // seconds
	// Keys is the idempotency key index's correlation ids
	// (kafka_ext_proc_idempotency_keys): every keyed order adds one, and
	// they are held, as the evicted replies' locations are, whatever the
	// reply index's bound.
	Keys int64 `json:"keys"`
}

type bucket struct {
	Le    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// readBacks is every read-back of an evicted reply, whatever its outcome.
func (s replyIndexSample) readBacks() int64 { return s.Found + s.Expired + s.Failed }

// readBackQuantileMs is the upper bound, in ms, of the histogram bucket
// holding the p-th percentile (0 < p ≤ 100) of the read-backs after base:
// the processor keeps buckets, not samples, so this is as fine as they are.
func (s replyIndexSample) readBackQuantileMs(base replyIndexSample, p float64) float64 {
	n := s.readBacks() - base.readBacks()
	if n <= 0 {
		return 0
	}
	rank := uint64(float64(n)*p/100 + 0.999999999)
	for i, b := range s.ReadBackBuckets {
		c := b.Count
		if i < len(base.ReadBackBuckets) {
			c -= base.ReadBackBuckets[i].Count
		}
		if c >= rank {
			return b.Le * 1000
		}
	}
	return 0 // beyond the last bound
}

// replyIndexOf reads the reply index's metrics from the processor's
// registry.
func replyIndexOf(g prometheus.Gatherer) (replyIndexSample, error) {
	mfs, err := g.Gather()
	if err != nil {
		return replyIndexSample{}, fmt.Errorf("reading the processor's metrics: %w", err)
	}
	var s replyIndexSample
	found := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			switch mf.GetName() {
			case "kafka_ext_proc_idempotency_keys":
				s.Keys += int64(v)
			case "kafka_ext_proc_reply_index_entries":
				s.Entries += int64(v)
			case "kafka_ext_proc_reply_index_bytes":
				s.Bytes += int64(v)
				found = true
			case "kafka_ext_proc_reply_index_evicted_total":
				s.Evicted += int64(v)
			case "kafka_ext_proc_reply_index_locations":
				s.Locations += int64(v)
			case "kafka_ext_proc_reply_index_location_bytes":
				s.LocationBytes += int64(v)
			case "kafka_ext_proc_reply_index_read_backs_total":
				for _, l := range m.GetLabel() {
					if l.GetName() != "result" {
						continue
					}
					switch l.GetValue() {
					case "found":
						s.Found += int64(v)
					case "expired":
						s.Expired += int64(v)
					case "failed":
						s.Failed += int64(v)
					}
				}
			case "kafka_ext_proc_reply_index_read_back_seconds":
				h := m.GetHistogram()
				s.ReadBackSum += h.GetSampleSum()
				for _, b := range h.GetBucket() {
					i := slices.IndexFunc(s.ReadBackBuckets, func(x bucket) bool { return x.Le == b.GetUpperBound() })
					if i < 0 {
						s.ReadBackBuckets = append(s.ReadBackBuckets, bucket{Le: b.GetUpperBound()})
						i = len(s.ReadBackBuckets) - 1
					}
					s.ReadBackBuckets[i].Count += b.GetCumulativeCount()
				}
			}
		}
	}
	if !found {
		return s, fmt.Errorf("the processor's metrics have no reply index (no route with reply-to?)")
	}
	slices.SortFunc(s.ReadBackBuckets, func(a, b bucket) int {
		switch {
		case a.Le < b.Le:
			return -1
		case a.Le > b.Le:
			return 1
		}
		return 0
	})
	return s, nil
}

// residentBytes is this process's resident set (VmRSS), or 0 where
// /proc does not say: what the operating system holds for the process,
// the Go heap, its free spans not yet returned and librdkafka's buffers
// alike.
func residentBytes() uint64 { return statusBytes("VmRSS:") }

// statusBytes is a size field of this process's /proc/self/status
// ("VmRSS:", "VmHWM:"), or 0 where /proc does not say.
func statusBytes(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte(field))
		if !ok {
			continue
		}
		f := bytes.Fields(rest) // "123456 kB"
		if len(f) == 2 && string(f[1]) == "kB" {
			if kb, err := strconv.ParseUint(string(f[0]), 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
