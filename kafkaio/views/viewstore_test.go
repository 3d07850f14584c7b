package views

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
	"unsafe"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// A view driven by random writes, overwrites of every size and tombstones
// holds exactly what a map of the latest records holds; entries taken
// before the writes (and the compactions they cause) still read what they
// read when taken; and the store's byte counts match its chunks.
func TestViewStoreMatchesAMap(t *testing.T) {
	v := newView("items", [16]byte{1}, 2, time.Millisecond)
	rng := rand.New(rand.NewPCG(1, 2))
	type want struct {
		value   []byte
		offset  int64
		headers string
	}
	model := map[string]want{}
	type held struct {
		e     Entry
		value []byte
		hdr   string
	}
	var kept []held
	hdrSets := [][]client.Header{nil, {{Key: "content-type", Value: []byte("application/json")}}}
	for i := range 200 { // more distinct encodings than maxShared: some go inline
		hdrSets = append(hdrSets, []client.Header{{Key: "etag", Value: fmt.Appendf(nil, "e%d", i)}})
	}
	offsets := make([]int64, 2)
	for i := range 60_000 {
		key := fmt.Sprintf("k%d", rng.IntN(3_000))
		if i%7 == 0 {
			key = "" // the empty key is a key
		}
		p := int32(0)
		offsets[p]++
		r := &client.Record{Topic: "items", Partition: p, Offset: offsets[p], Timestamp: time.UnixMilli(int64(i)), Key: []byte(key)}
		switch n := rng.IntN(20); {
		case n == 0:
			// a tombstone
		case n == 1:
			r.Value = bytes.Repeat([]byte{byte(i)}, bigItem+rng.IntN(1000)) // a chunk of its own
		default:
			r.Value = bytes.Repeat([]byte{byte(i)}, rng.IntN(600))
		}
		hs := hdrSets[rng.IntN(len(hdrSets))]
		r.Headers = hs
		v.apply(r)
		if r.Value == nil {
			delete(model, key)
		} else {
			model[key] = want{value: r.Value, offset: r.Offset, headers: string(appendHeaders(nil, hs))}
		}
		if i%500 == 0 {
			if e, ok := v.Get(key); ok {
				kept = append(kept, held{e, bytes.Clone(e.Value), string(e.headers)})
			}
		}
	}
	if st := v.Stats(); st.Keys != len(model) {
		t.Fatalf("%d keys, want %d", st.Keys, len(model))
	}
	for key, w := range model {
		e, ok := v.Get(key)
		if !ok {
			t.Fatalf("key %q missing", key)
		}
		if e.Key != key || e.Offset != w.offset || !bytes.Equal(e.Value, w.value) || string(e.headers) != w.headers {
			t.Fatalf("key %q: got key %q offset %d, %d value bytes, headers %q; want offset %d, %d bytes, headers %q",
				key, e.Key, e.Offset, len(e.Value), e.headers, w.offset, len(w.value), w.headers)
		}
	}
	seen := 0
	v.Scan(func(e Entry) bool {
		seen++
		if w, ok := model[e.Key]; !ok || e.Offset != w.offset {
			t.Errorf("scan: key %q at offset %d is not current", e.Key, e.Offset)
		}
		return true
	})
	if seen != len(model) {
		t.Errorf("scan saw %d entries, want %d", seen, len(model))
	}
	if _, ok := v.Get("absent"); ok {
		t.Error("an absent key was found")
	}
	for _, h := range kept {
		if !bytes.Equal(h.e.Value, h.value) || string(h.e.headers) != h.hdr {
			t.Fatalf("an entry taken earlier (key %q, offset %d) changed under its holder", h.e.Key, h.e.Offset)
		}
	}
	s := &v.entries
	var live, dead, mem int64
	for _, c := range s.chunks {
		live += c.live
		dead += int64(len(c.b)) - c.live
		mem += int64(cap(c.b))
	}
	if live != s.live || dead != s.dead {
		t.Errorf("counted live %d dead %d; the chunks hold live %d dead %d", s.live, s.dead, live, dead)
	}
	if s.dead >= compactMinDead && s.dead*4 > s.live*2 {
		t.Errorf("dead bytes %d against %d live: compaction did not keep up", s.dead, s.live)
	}
	mem += int64(len(s.table)) * 8
	for _, p := range s.pages {
		mem += int64(len(p)) * int64(unsafe.Sizeof(entryRec{}))
	}
	if s.mem < mem {
		t.Errorf("Stats bytes %d, less than the chunks, pages and table hold (%d)", s.mem, mem)
	}
	// Removing every key leaves nothing behind but the table and pages.
	for key := range model {
		offsets[0]++
		v.apply(&client.Record{Topic: "items", Offset: offsets[0], Timestamp: time.UnixMilli(1 << 40), Key: []byte(key)})
	}
	if st := v.Stats(); st.Keys != 0 || s.live != 0 {
		t.Errorf("after removing every key: %d keys, %d live bytes", st.Keys, s.live)
	}
}

// What Stats reports as a view's bytes is what the view holds on the Go
// heap, so max-view-bytes bounds memory, not an estimate of it; and that is
// the keys and values plus at most 55 B a key (docs/deploy.md), with at
// most a third more for overwritten records awaiting compaction.
func TestViewBytesAreItsHeap(t *testing.T) {
	heap := func() int64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(s)
		return int64(s[0].Value.Uint64())
	}
	const keys = 100_000
	hs := []client.Header{{Key: "content-type", Value: []byte("application/json")}}
	value := bytes.Repeat([]byte("x"), 200)
	before := heap()
	v := newView("items", [16]byte{1}, 4, time.Millisecond)
	offset := int64(0)
	write := func(k int) {
		offset++
		v.apply(&client.Record{Topic: "items", Partition: int32(k % 4), Offset: offset, Timestamp: time.UnixMilli(1_760_000_000_000 + offset),
			Key: fmt.Appendf(nil, "k%d", k), Value: value, Headers: hs})
	}
	check := func(when string, maxBytes func(kv int64) int64) {
		t.Helper()
		used := heap() - before
		st := v.Stats()
		if d := float64(st.Bytes-used) / float64(used); d < -0.05 || d > 0.05 {
			t.Errorf("%s: Stats bytes %d, heap grew %d (%+.1f %%); want within 5 %%", when, st.Bytes, used, 100*d)
		}
		var kv int64
		v.Scan(func(e Entry) bool { kv += int64(len(e.Key) + len(e.Value)); return true })
		if st.Keys != keys || st.Bytes > maxBytes(kv) {
			t.Errorf("%s: %d keys, %d bytes for %d of keys and values (%.1f B a key beyond them); want %d keys, at most %d bytes",
				when, st.Keys, st.Bytes, kv, float64(st.Bytes-kv)/keys, keys, maxBytes(kv))
		}
	}
	for k := range keys {
		write(k)
	}
	check("written once", func(kv int64) int64 { return kv + 55*keys })
	for range 3 * keys {
		write(rand.IntN(keys))
	}
	check("overwritten", func(kv int64) int64 { return kv*4/3 + 55*keys + maxChunk })
	runtime.KeepAlive(v)
}
