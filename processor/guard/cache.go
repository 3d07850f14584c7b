package guard

import (
	"slices"
	"sync"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// defaultCacheSize bounds the verified tokens a jwt guard remembers. Only
// tokens that verified are stored, so clients without valid credentials
// cannot fill it; a client reusing its token (the common case: one token per
// session, many requests) skips the signature check.
const defaultCacheSize = 4096

// tokenCache remembers verified tokens by their SHA-256, with the identity
// they established and their validity window, which is checked again on
// every hit. Eviction is first in, first out: simple, and bounded.
type tokenCache struct {
	mu      sync.Mutex
	entries map[[32]byte]*cached
	order   [][32]byte // ring of keys in insertion order
	next    int
}

type cached struct {
	validity
	subject string
	roles   []string
}

// identity returns a copy: callers may keep or change what they get.
func (c *cached) identity() route.Identity {
	return route.Identity{Subject: c.subject, Roles: slices.Clone(c.roles)}
}

func newTokenCache(size int) *tokenCache {
	return &tokenCache{entries: make(map[[32]byte]*cached, size), order: make([][32]byte, 0, size)}
}

func (c *tokenCache) get(k [32]byte) (*cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	return e, ok
}

func (c *tokenCache) put(k [32]byte, id route.Identity, v validity) {
	e := &cached{validity: v, subject: id.Subject, roles: slices.Clone(id.Roles)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cap(c.order) == 0 { // read under the lock: append changes the slice header
		return
	}
	if _, ok := c.entries[k]; ok {
		c.entries[k] = e
		return
	}
	if len(c.order) < cap(c.order) {
		c.order = append(c.order, k)
	} else {
		delete(c.entries, c.order[c.next])
		c.order[c.next] = k
		c.next = (c.next + 1) % len(c.order)
	}
	c.entries[k] = e
}

func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
