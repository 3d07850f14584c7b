// Package bufpool is a gRPC buffer pool (mem.BufferPool) that hands buffers
// out as they were left, for callers that write every byte they ask for.
//
// gRPC's default pool clears each buffer to its full capacity, and its tiers
// jump from 32 KiB to 1 MiB: every message between the two clears 1 MiB. A
// gRPC fetch stream's batches (up to 64 KiB) and the chunks a client receives
// for them sit exactly there.
package bufpool

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// maxExp bounds the pooled sizes: 1 MiB. Larger buffers are allocated and
// dropped.
const maxExp = 20

// Pool has one sync.Pool per power of two up to 1 MiB. The zero value is
// ready to use.
type Pool struct {
	tiers [maxExp + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// Get returns a buffer of length size; its bytes are whatever they were.
func (p *Pool) Get(size int) *[]byte {
	exp := bits.Len(uint(max(size, 1) - 1)) // smallest 2^exp ≥ size
	if exp > maxExp {
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

// Put takes back a buffer from Get; any other is dropped.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 {
		return // not one of ours
	}
	exp := bits.Len(uint(c)) - 1
	if exp > maxExp {
		return
	}
	*b = (*b)[:0]
	p.tiers[exp].Put(b)
}
