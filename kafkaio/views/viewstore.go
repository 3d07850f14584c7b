package views

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"unsafe"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// entryStore holds the entries of a view densely, so that a view of a
// million keys costs little beyond its keys and values and gives the
// collector almost no pointers to mark:
//
//   - each record is one item appended to a byte chunk: its offset,
//     timestamp and partition (varints), key, value and headers (unless
//     shared); chunks are append-only, so the key string and value slice an
//     Entry aliases never change under a reader, and a chunk dropped by
//     compaction stays alive as long as a reader holds a part of it;
//   - each entry has an 8-byte record of where its item is, in fixed-size
//     pages, found by its entry number;
//   - an open-addressing table maps the key's hash to the entry number
//     (8 bytes a slot), with the key itself compared in its chunk.
//
// The caller (View) holds the lock: the store has none.
type entryStore struct {
	// What a look-up reads comes first (80 bytes).
	seed   maphash.Seed
	table  []uint64 // 0 = empty; else hash<<32 | number+1
	pages  [][]entryRec
	chunks []chunk

	count    int      // entries
	next     uint32   // entry numbers handed out (free ones included)
	freeNums []uint32 // numbers of removed entries, for reuse

	cur        int      // chunk items are appended to; -1 none yet
	lastCap    int      // capacity of the last chunk opened for appending
	freeChunks []uint32 // indexes of dropped chunks, for reuse

	shared headerTable

	live, dead int64 // item bytes in use and left behind by overwrites
	mem        int64 // bytes the store holds: chunks, pages, table, headers
}

// entryRec is where an entry's item is.
type entryRec struct {
	chunk uint32 // noChunk: the number is free
	pos   uint32 // of the item in its chunk
}

// item is an item decoded: the record and where its bytes are in b.
type item struct {
	b           []byte
	num         uint32
	offset, ts  int64
	partition   int32
	headers     uint32 // 0: in the item (possibly none); else shared index + 1
	key, kl, vl int
	val         int
	hl, end     int
}

type chunk struct {
	b    []byte // len: bytes written; never reallocated or overwritten
	live int64  // bytes of items still in use
}

const (
	noChunk = ^uint32(0)
	// pageRecs is the entries of a full record page (16 KiB); the first
	// page grows to it, so a small view costs little.
	pageRecs = 2048
	// Chunks double from minChunk up to maxChunk; an item over bigItem
	// gets a chunk of its own.
	minChunk = 256
	maxChunk = 1 << 20
	bigItem  = maxChunk / 8
	// compactMinDead is the dead bytes below which nothing is compacted;
	// above it, one chunk is compacted per write while the dead bytes
	// exceed a quarter of the live ones.
	compactMinDead = 64 << 10
	// itemNumBytes is the entry number at the start of every item, so
	// compaction can tell which items of a chunk are still in use.
	itemNumBytes = 4
)

// init makes s an empty store. A store lives inside its View, so that a
// look-up reads on from the view's own cache lines instead of following a
// pointer to another object.
func (s *entryStore) init() {
	*s = entryStore{seed: maphash.MakeSeed(), cur: -1, table: make([]uint64, 8)}
	s.mem = int64(len(s.table) * 8)
}

func (s *entryStore) rec(num uint32) *entryRec {
	return &s.pages[num/pageRecs][num%pageRecs]
}

func (s *entryStore) hash(key []byte) uint32 { return uint32(maphash.Bytes(s.seed, key)) }

// find returns the table slot and entry number of key.
func (s *entryStore) find(key []byte, h uint32) (slot int, num uint32, ok bool) {
	mask := len(s.table) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := s.table[i]
		if sl == 0 {
			return i, 0, false
		}
		if uint32(sl>>32) == h {
			n := uint32(sl) - 1
			if s.keyOf(n) == string(key) { // compared, not converted
				return i, n, true
			}
		}
	}
}

// get returns the entry of key. The key's slot, record and item are read
// once each: the entry is decoded from the item whose key was compared.
func (s *entryStore) get(key string) (Entry, bool) {
	h := uint32(maphash.String(s.seed, key))
	mask := len(s.table) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := s.table[i]
		if sl == 0 {
			return Entry{}, false
		}
		if uint32(sl>>32) != h {
			continue
		}
		if r := s.rec(uint32(sl) - 1); s.keyAt(r.chunk, r.pos) == key {
			it := s.item(r.chunk, r.pos)
			return s.entryOf(&it), true
		}
	}
}

// item decodes the item at pos of chunk c. An item is its entry number
// (4 bytes), the key's length and the key (first: a look-up compares it and
// decodes nothing else), then the value's and headers' lengths, the offset,
// timestamp, partition and shared headers ref (varints), the value and the
// headers.
func (s *entryStore) item(c, pos uint32) item {
	it := item{b: s.chunks[c].b}
	b := it.b
	p := int(pos)
	it.num = binary.LittleEndian.Uint32(b[p:])
	var x uint64
	x, p = uvarint(b, p+itemNumBytes)
	it.kl, it.key = int(x), p
	x, p = uvarint(b, p+it.kl)
	it.vl = int(x)
	x, p = uvarint(b, p)
	it.hl = int(x)
	x, p = uvarint(b, p)
	it.offset = zigzag(x)
	x, p = uvarint(b, p)
	it.ts = zigzag(x)
	x, p = uvarint(b, p)
	it.partition = int32(x)
	x, p = uvarint(b, p)
	it.headers = uint32(x)
	it.val = p
	it.end = p + it.vl + it.hl
	return it
}

// uvarint decodes the varint at b[p:] and returns it and the position after
// it; the one-byte case, most lengths and refs, is inlined.
func uvarint(b []byte, p int) (uint64, int) {
	if c := b[p]; c < 0x80 {
		return uint64(c), p + 1
	}
	x, w := binary.Uvarint(b[p:])
	return x, p + w
}

func zigzag(x uint64) int64 { return int64(x>>1) ^ -int64(x&1) }

// at decodes the current item of entry num.
func (s *entryStore) at(num uint32) item {
	r := s.rec(num)
	return s.item(r.chunk, r.pos)
}

// keyOf returns the key of entry num, aliasing its chunk.
func (s *entryStore) keyOf(num uint32) string {
	r := s.rec(num)
	return s.keyAt(r.chunk, r.pos)
}

// keyAt returns the key of the item at pos of chunk c, aliasing the chunk.
func (s *entryStore) keyAt(c, pos uint32) string {
	b := s.chunks[c].b
	kl, p := uvarint(b, int(pos)+itemNumBytes)
	if kl == 0 {
		return ""
	}
	return unsafe.String(&b[p], int(kl))
}

// entry returns entry num; its key, value and headers alias the store's
// read-only bytes.
func (s *entryStore) entry(num uint32) Entry {
	it := s.at(num)
	return s.entryOf(&it)
}

// entryOf is the entry of a decoded item.
func (s *entryStore) entryOf(it *item) Entry {
	e := Entry{Partition: it.partition, Offset: it.offset, Timestamp: it.ts}
	b := it.b
	if it.kl > 0 {
		e.Key = unsafe.String(&b[it.key], it.kl)
	}
	v := it.val
	e.Value = b[v : v+it.vl : v+it.vl]
	switch {
	case it.headers != 0:
		e.headers = s.shared.enc[it.headers-1]
	case it.hl > 0:
		h := v + it.vl
		e.headers = b[h : h+it.hl : h+it.hl]
	}
	return e
}

// put stores r as the entry of its key: a new entry (ok false from find,
// slot where find stopped) or a new record of entry num. hdr is the
// record's header encoding.
func (s *entryStore) put(r *client.Record, h uint32, slot int, num uint32, had bool, hdr []byte) {
	ref := s.shared.ref(hdr, &s.mem)
	inline := hdr
	if ref != 0 {
		inline = nil
	}
	if had {
		s.forget(num)
	} else {
		num = s.newNum()
		s.table[slot] = uint64(h)<<32 | uint64(num+1)
		s.count++
	}
	c, pos := s.append(num, r, ref, inline)
	*s.rec(num) = entryRec{chunk: c, pos: pos}
	if !had && (s.count+1)*4 > len(s.table)*3 {
		s.grow()
	}
	s.compactStep()
}

// remove deletes entry num, found at slot.
func (s *entryStore) remove(slot int, num uint32) {
	s.forget(num)
	s.rec(num).chunk = noChunk
	s.freeNums = append(s.freeNums, num)
	s.deleteSlot(slot)
	s.count--
	s.compactStep()
}

// forget marks the current item of entry num dead and lets go of its
// shared headers.
func (s *entryStore) forget(num uint32) {
	r := s.rec(num)
	it := s.item(r.chunk, r.pos)
	n := int64(it.end - int(r.pos))
	c := &s.chunks[r.chunk]
	c.live -= n
	s.live -= n
	s.dead += n
	if it.headers != 0 {
		s.shared.release(it.headers, &s.mem)
	}
	if c.live == 0 && int(r.chunk) != s.cur {
		s.dropChunk(r.chunk)
	}
}

func (s *entryStore) newNum() uint32 {
	if n := len(s.freeNums); n > 0 {
		num := s.freeNums[n-1]
		s.freeNums = s.freeNums[:n-1]
		return num
	}
	num := s.next
	s.next++
	p := int(num / pageRecs)
	if p == len(s.pages) {
		size := pageRecs
		if p == 0 {
			size = 8
		}
		s.pages = append(s.pages, make([]entryRec, size))
		s.mem += int64(size) * int64(unsafe.Sizeof(entryRec{}))
	} else if i := int(num % pageRecs); i == len(s.pages[p]) {
		// Only the first page grows: records are found by number under
		// the lock, never held, so moving them is safe.
		grown := make([]entryRec, min(2*i, pageRecs))
		copy(grown, s.pages[p])
		s.mem += int64(len(grown)-i) * int64(unsafe.Sizeof(entryRec{}))
		s.pages[p] = grown
	}
	return num
}

// append writes the item of entry num for r, with its shared headers ref
// or its own encoding hdr, and returns where it is.
func (s *entryStore) append(num uint32, r *client.Record, ref uint32, hdr []byte) (uint32, uint32) {
	var head [itemNumBytes + 8*binary.MaxVarintLen64]byte
	h := binary.AppendUvarint(head[:0], uint64(len(r.Value)))
	h = binary.AppendUvarint(h, uint64(len(hdr)))
	h = binary.AppendVarint(h, r.Offset)
	h = binary.AppendVarint(h, r.Timestamp.UnixMilli())
	h = binary.AppendUvarint(h, uint64(uint32(r.Partition)))
	h = binary.AppendUvarint(h, uint64(ref))
	n := itemNumBytes + uvarintLen(len(r.Key)) + len(r.Key) + len(h) + len(r.Value) + len(hdr)
	c := s.room(n)
	ch := &s.chunks[c]
	pos := len(ch.b)
	b := binary.LittleEndian.AppendUint32(ch.b, num)
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	b = append(b, h...)
	b = append(b, r.Value...)
	ch.b = append(b, hdr...)
	ch.live += int64(n)
	s.live += int64(n)
	return uint32(c), uint32(pos)
}

// room returns a chunk with room for an item of n bytes.
func (s *entryStore) room(n int) int {
	if n > bigItem {
		return s.newChunk(n)
	}
	if s.cur >= 0 && len(s.chunks[s.cur].b)+n <= cap(s.chunks[s.cur].b) {
		return s.cur
	}
	if s.cur >= 0 && s.chunks[s.cur].live == 0 {
		s.dropChunk(uint32(s.cur))
	}
	s.lastCap = max(n, min(2*s.lastCap, maxChunk), minChunk)
	s.cur = s.newChunk(s.lastCap)
	return s.cur
}

func uvarintLen(n int) int {
	l := 1
	for n >= 0x80 {
		n >>= 7
		l++
	}
	return l
}

func (s *entryStore) newChunk(size int) int {
	ch := chunk{b: make([]byte, 0, size)}
	s.mem += int64(cap(ch.b))
	if n := len(s.freeChunks); n > 0 {
		c := s.freeChunks[n-1]
		s.freeChunks = s.freeChunks[:n-1]
		s.chunks[c] = ch
		return int(c)
	}
	s.chunks = append(s.chunks, ch)
	return len(s.chunks) - 1
}

// dropChunk lets go of a chunk without live items; readers holding parts
// of it keep them.
func (s *entryStore) dropChunk(c uint32) {
	ch := &s.chunks[c]
	s.dead -= int64(len(ch.b)) - ch.live
	s.mem -= int64(cap(ch.b))
	*ch = chunk{}
	s.freeChunks = append(s.freeChunks, c)
	if int(c) == s.cur {
		s.cur = -1
	}
}

// compactStep moves the live items of the chunk with the most dead bytes
// to the current chunk and drops it, while the dead bytes exceed a quarter
// of the live ones and that chunk is at least a quarter dead: one chunk (at
// most maxChunk bytes copied) per write, so no write waits long. The dead
// bytes stay under a third of the live ones plus the current chunk's.
func (s *entryStore) compactStep() {
	if s.dead < compactMinDead || s.dead*4 < s.live {
		return
	}
	best, most := -1, int64(0)
	for i := range s.chunks {
		ch := &s.chunks[i]
		if i == s.cur || ch.b == nil {
			continue
		}
		if d := int64(len(ch.b)) - ch.live; d > most {
			best, most = i, d
		}
	}
	if best < 0 || most*4 < int64(len(s.chunks[best].b)) {
		// The dead bytes are in the current chunk, or spread thin:
		// copying a chunk would reclaim little of it.
		return
	}
	src := s.chunks[best].b
	for pos := 0; pos < len(src); {
		it := s.item(uint32(best), uint32(pos))
		num, end := it.num, it.end
		if num < s.next {
			if r := s.rec(num); r.chunk == uint32(best) && r.pos == uint32(pos) {
				c, p := s.appendItem(src[pos:end])
				r.chunk, r.pos = c, p
				// Its old copy is dead now; dropChunk discounts it.
				s.chunks[best].live -= int64(end - pos)
				s.live -= int64(end - pos)
				s.dead += int64(end - pos)
			}
		}
		pos = end
	}
	s.dropChunk(uint32(best))
}

// appendItem copies an encoded item to a chunk with room.
func (s *entryStore) appendItem(it []byte) (uint32, uint32) {
	c := s.room(len(it))
	ch := &s.chunks[c]
	pos := len(ch.b)
	ch.b = append(ch.b, it...)
	ch.live += int64(len(it))
	s.live += int64(len(it))
	return uint32(c), uint32(pos)
}

// grow doubles the table. Slots keep the key's hash, so no key is read.
func (s *entryStore) grow() {
	old := s.table
	s.table = make([]uint64, 2*len(old))
	s.mem += int64(len(old) * 8)
	mask := len(s.table) - 1
	for _, sl := range old {
		if sl == 0 {
			continue
		}
		i := int(uint32(sl>>32)) & mask
		for s.table[i] != 0 {
			i = (i + 1) & mask
		}
		s.table[i] = sl
	}
}

// deleteSlot empties slot i, moving back the slots after it that probing
// would no longer reach (backward-shift deletion: no tombstones).
func (s *entryStore) deleteSlot(i int) {
	mask := len(s.table) - 1
	for j := (i + 1) & mask; s.table[j] != 0; j = (j + 1) & mask {
		home := int(uint32(s.table[j]>>32)) & mask
		if (j-home)&mask >= (j-i)&mask {
			s.table[i] = s.table[j]
			i = j
		}
	}
	s.table[i] = 0
}

// scan calls fn with every entry until it returns false.
func (s *entryStore) scan(fn func(Entry) bool) {
	for num := uint32(0); num < s.next; num++ {
		if s.rec(num).chunk == noChunk {
			continue
		}
		if !fn(s.entry(num)) {
			return
		}
	}
}

// headerTable holds the header encodings entries share, with a count of
// their users: the records of a topic mostly carry the same headers (one
// content-type). Encodings beyond maxShared are kept in the entry's item.
type headerTable struct {
	index map[string]uint32 // encoding → index + 1
	enc   [][]byte          // read-only once set; nil when free
	refs  []int
	free  []uint32
}

// maxShared bounds the distinct shared encodings of a view.
const maxShared = 64

// sharedHeaderOverhead approximates an encoding's map entry and slots.
const sharedHeaderOverhead = 64

// ref returns the index + 1 of hdr, adding it if there is room; 0 for no
// headers or no room.
func (t *headerTable) ref(hdr []byte, mem *int64) uint32 {
	if len(hdr) == 0 {
		return 0
	}
	if i, ok := t.index[string(hdr)]; ok {
		t.refs[i-1]++
		return i
	}
	if len(t.enc)-len(t.free) >= maxShared {
		return 0
	}
	if t.index == nil {
		t.index = map[string]uint32{}
	}
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1] + 1
		t.free = t.free[:n-1]
	} else {
		t.enc = append(t.enc, nil)
		t.refs = append(t.refs, 0)
		i = uint32(len(t.enc))
	}
	t.enc[i-1] = bytes.Clone(hdr) // read-only: entries alias it
	t.refs[i-1] = 1
	t.index[string(hdr)] = i
	*mem += int64(2*len(hdr) + sharedHeaderOverhead)
	return i
}

func (t *headerTable) release(i uint32, mem *int64) {
	t.refs[i-1]--
	if t.refs[i-1] > 0 {
		return
	}
	enc := t.enc[i-1]
	delete(t.index, string(enc))
	*mem -= int64(2*len(enc) + sharedHeaderOverhead)
	t.enc[i-1] = nil
	t.free = append(t.free, i-1)
}
