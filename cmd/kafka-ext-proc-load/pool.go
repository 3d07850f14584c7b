package main

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// dirtyPool is a gRPC buffer pool (mem.BufferPool) for the fan-out's client
// connections: one sync.Pool per power of two up to 1 MiB, buffers handed
// out as they were left. gRPC's default pool zeroes every buffer it hands
// out to its full capacity, and its tiers jump from 32 KiB to 1 MiB, so
// each received fan-out chunk between the two (the processor batches up to
// 64 KiB per stream) cleared 1 MiB: a fifth of the client process's CPU in
// a 1,000-stream run, a cost of the Go gRPC client that Envoy, which this
// client stands in for, does not have. gRPC fills a receive buffer before
// reading it, so stale bytes are never seen.
type dirtyPool struct {
	tiers [dirtyMaxExp + 1]sync.Pool
}

const dirtyMaxExp = 20 // 1 MiB; larger buffers are allocated and dropped

var _ mem.BufferPool = (*dirtyPool)(nil)

func (p *dirtyPool) Get(size int) *[]byte {
	exp := bits.Len(uint(max(size, 1) - 1)) // smallest 2^exp ≥ size
	if exp > dirtyMaxExp {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.tiers[exp].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<exp)
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 {
		return // not one of ours
	}
	exp := bits.Len(uint(c)) - 1
	if exp > dirtyMaxExp {
		return
	}
	*b = (*b)[:0]
	p.tiers[exp].Put(b)
}
