package views

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/maypok86/otter/v2"
)

// entryCache keeps the decoded entries the disk stores of one Views
// answered most, so that a hot key is answered from the heap as a view in
// memory answers it: a store's look-up costs 7 – 25 µs (pebble's read path,
// a block decoded, the entry copied out), a hit here well under one.
// Bounded by bytes, shared by every disk view of the cluster, as pebble's
// block cache is.
//
// Who owns what: the cache is filled by look-ups only, under the view's
// read lock, and only while the store has no write pending (a catch-up's
// batch not yet committed is not what a look-up reads, so an entry cached
// then could be older than the batch it would outlive). Every write of a key
// (under the view's write lock) removes the key first. A store emptied or
// reopened takes a new generation, which no cached key has: its old
// entries are never found again and age out.
type entryCache struct {
	c    *otter.Cache[cacheKey, Entry]
	gens atomic.Uint64
	// missed is a doorkeeper: a bit per hash of the keys looked up and
	// not found here since it was last cleared. A key is cached on its
	// second miss, not its first: keys read once (uniform reads over a
	// view far larger than the cache) would otherwise each cost an
	// insertion and an eviction, and made a look-up that reads the store
	// 25 → 41 µs (BenchmarkDiskViewGet). Cleared every len(missed)*16
	// misses, so "second" means "recently".
	missed [doorkeeperWords]atomic.Uint64
	misses atomic.Uint64
	seed   maphash.Seed
}

// doorkeeperWords is the doorkeeper's size: 2^20 bits, 128 KiB.
const doorkeeperWords = 1 << 14

type cacheKey struct {
	gen uint64
	key string
}

// entryCacheBytes bounds the cache; maxCachedEntry keeps one large value
// from taking the room of many small ones.
const (
	entryCacheBytes = 32 << 20
	maxCachedEntry  = 64 << 10
)

func newEntryCache() *entryCache {
	return &entryCache{c: otter.Must(&otter.Options[cacheKey, Entry]{
		MaximumWeight: entryCacheBytes,
		Weigher:       func(k cacheKey, e Entry) uint32 { return uint32(entryWeight(k.key, e)) },
	}), seed: maphash.MakeSeed()}
}

// entryWeight is what an entry takes in the cache: its bytes and the
// cache's own per-entry cost (its node, the key's header), about 100 bytes.
func entryWeight(key string, e Entry) int {
	return 2*len(key) + len(e.Value) + len(e.headers) + 100
}

// gen returns a generation no store has had.
func (c *entryCache) gen() uint64 {
	if c == nil {
		return 0
	}
	return c.gens.Add(1)
}

func (c *entryCache) get(gen uint64, key string) (Entry, bool) {
	if c == nil {
		return Entry{}, false
	}
	return c.c.GetIfPresent(cacheKey{gen, key})
}

// put caches e, the entry of key a look-up read from the store, if it was
// missed recently before.
func (c *entryCache) put(gen uint64, key string, e Entry) {
	if c == nil || entryWeight(key, e) > maxCachedEntry || !c.missedBefore(gen, key) {
		return
	}
	c.c.Set(cacheKey{gen, key}, e)
}

// missedBefore records a miss of key and tells whether the doorkeeper had
// one already.
func (c *entryCache) missedBefore(gen uint64, key string) bool {
	if c.misses.Add(1)%(doorkeeperWords*16) == 0 {
		for i := range c.missed {
			c.missed[i].Store(0)
		}
	}
	h := maphash.String(c.seed, key) ^ gen*0x9e3779b97f4a7c15
	w, bit := &c.missed[(h>>6)%doorkeeperWords], uint64(1)<<(h&63)
	return w.Or(bit)&bit != 0
}

func (c *entryCache) drop(gen uint64, key string) {
	if c == nil {
		return
	}
	c.c.Invalidate(cacheKey{gen, key})
}
