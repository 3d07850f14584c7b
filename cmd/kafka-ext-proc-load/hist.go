package main

import (
	"math/bits"
	"time"
)

// hist is a latency histogram in microseconds, log-linear: exact below
// histSub µs, then histSub buckets per power of two (each within 1/histSub,
// under 1 %, of its values). It is fixed-size and allocation-free to add
// to, so the fan-out's 1,000 streams can each keep one and merge them at
// the end instead of keeping every sample. Not safe for concurrent use.
type hist struct {
	counts [histBuckets]uint32
	n      uint64
	max    uint64 // µs, exact
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	// Powers of two above histSub up to 2^40 µs (12 days): nothing real
	// falls off the end, and anything that would is clamped to the last
	// bucket.
	histBuckets = histSub + (40-histSubBits)*histSub
)

func histIndex(us uint64) int {
	if us < histSub {
		return int(us)
	}
	shift := bits.Len64(us) - histSubBits - 1 // us>>shift is in [histSub, 2·histSub)
	i := histSub + shift*histSub + int(us>>shift) - histSub
	return min(i, histBuckets-1)
}

// histValue is the middle of bucket i, in µs.
func histValue(i int) float64 {
	if i < histSub {
		return float64(i)
	}
	shift := (i - histSub) / histSub
	low := uint64(histSub+(i-histSub)%histSub) << shift
	return float64(low) + float64(uint64(1)<<shift-1)/2
}

func (h *hist) add(d time.Duration) {
	us := uint64(max(d, 0) / time.Microsecond)
	h.counts[histIndex(us)]++
	h.n++
	h.max = max(h.max, us)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantileMs is the nearest-rank p-th percentile (0 < p ≤ 100) in ms:
// the middle of its bucket, never above the exact maximum.
func (h *hist) quantileMs(p float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(float64(h.n)*p/100 + 0.999999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += uint64(c)
		if seen >= rank {
			return min(histValue(i), float64(h.max)) / 1000
		}
	}
	return float64(h.max) / 1000
}

func (h *hist) maxMs() float64 { return float64(h.max) / 1000 }

// latency is the summary of a hist in JSON.
type latency struct {
	Samples uint64  `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

func (h *hist) summary() latency {
	return latency{Samples: h.n, P50Ms: h.quantileMs(50), P99Ms: h.quantileMs(99), MaxMs: h.maxMs()}
}
