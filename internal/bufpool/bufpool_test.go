package bufpool

import "testing"

// Buffers come in the asked length from power-of-two tiers, and only the
// pool's own are taken back.
func TestPool(t *testing.T) {
	p := &Pool{}
	for _, size := range []int{0, 1, 255, 256, 257, 40 << 10, 64<<10 + 100, 1 << 20, 1<<20 + 1} {
		b := p.Get(size)
		if len(*b) != size || cap(*b) < size || size <= 1<<20 && cap(*b)&(cap(*b)-1) != 0 {
			t.Errorf("Get(%d): len %d cap %d", size, len(*b), cap(*b))
		}
		p.Put(b)
	}
	odd := make([]byte, 3)
	p.Put(&odd) // not a tier's: dropped, no panic
	b := p.Get(300)
	(*b)[0] = 7
	p.Put(b)
	if again := p.Get(260); cap(*again) != 512 || len(*again) != 260 {
		t.Errorf("Get(260) after a 512-byte buffer came back: len %d cap %d", len(*again), cap(*again))
	}
}
