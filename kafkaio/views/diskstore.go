package views

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cockroachdb/pebble/v2"
	pebblebloom "github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// diskStore keeps a view's entries in an embedded LSM store (pebble) in a
// directory of its own, so that a view is bounded by the disk, not the
// heap, and survives a restart. Beside the entries it keeps, in the same
// atomic batches, the next offset of every partition the view has applied,
// the topic id and the key count: after a crash the store is some prefix of
// what was applied, and its offsets say exactly which, so the view resumes
// from them without serving a record they do not cover or missing one.
//
// Keys of the store:
//
//	'm'                  meta: format, topic id
//	'n'                  the view's key count
//	'p' partition (BE32) the partition's next offset
//	'e' key              an entry: partition, offset, timestamp, headers, value
//
// Entries read from the store own their bytes (a copy from pebble's
// buffers), unlike the memory store's, which alias its chunks.
//
// The caller (View) holds the lock: the store has none. A batch is durable
// once flushed (see openPebble: no write-ahead log). During a catch-up
// writes gather in a batch (the heads of its keys kept beside it, for the
// look-ups a write makes), handed every diskBatchBytes to a goroutine that
// commits it while the next gathers, and committed when the catch-up ends;
// a first load into an empty store is written in bulk (see bulkOptions).
// Afterwards every record is committed on its own, so a reader sees it as
// soon as its waiters are woken.
type diskStore struct {
	db *pebble.DB
	so storeOptions
	// bulk: the database is open for a first load (see bulkOptions) until
	// the load's end settles it.
	bulk       bool
	bulkLoaded bool // the store's first load went in bulk
	// settling is held by a first load's final compaction, which runs
	// outside the view's lock; close and reopen cancel it (cancelSettle,
	// set under the view's lock) and wait for it before closing the
	// database.
	settling     sync.Mutex
	cancelSettle context.CancelFunc
	dir          string
	count        int64
	batch        *pebble.Batch // pending writes of a catch-up; nil: commit each
	// pending are the heads of the keys the batch writes (absent: a
	// tombstone) and pendingPos the partitions' next offsets: the count
	// and the offsets are written once, as the batch is committed.
	pending    map[string]pendingHead
	pendingPos map[int32]int64
	// inflight is the catch-up's previous batch while it commits in a
	// goroutine of its own (the next gathers meanwhile), inflightPending
	// its keys' heads, which head reads until it is committed, and
	// committed gets the commit's error. spare and sparePending are the
	// batch and map it leaves, for the batch after next.
	inflight        *pebble.Batch
	inflightPending map[string]pendingHead
	committed       chan error
	spare           *pebble.Batch
	sparePending    map[string]pendingHead
	// seen is, during a catch-up into a store that was empty when it
	// began (a first load, a rebuild), a filter of every key written
	// since: a key it has not seen is in neither the store nor the batch,
	// so its write skips the read of its head. That read was 30 – 40 %
	// of a first load's CPU, and a compacted topic's keys are mostly seen
	// once. nil: every write reads its head.
	seen *bloom.BloomFilter
	err  error // the first write that failed; the store takes no more
	buf  []byte
	// gen is the store's generation in the entry cache (so.entries, the
	// hot entries decoded; see entryCache).
	gen uint64
	// written and checked pace the free-space check (see minFreeBytes).
	written int64
	checked time.Time
}

// minFreeBytes is the free space a disk store leaves on its disk: pebble
// takes a file it cannot write as fatal (it panics on a log write), so a
// store stops taking writes, and its view goes out of service, before the
// disk is full; what is left lets its memtables flush and compactions run.
// The free space is checked every freeCheckBytes written, and at least
// every freeCheckEvery.
const (
	minFreeBytes   = 256 << 20
	freeCheckBytes = 16 << 20
	freeCheckEvery = time.Second
)

// diskFormat is the layout version in the meta key: a store of another
// version is rebuilt.
const diskFormat = 1

// diskBatchBytes is the size at which a catch-up commits its batch.
const diskBatchBytes = 4 << 20

var (
	metaKey  = []byte{'m'}
	countKey = []byte{'n'}
)

// ErrStoreFailed wraps the error of a view store that cannot take a write
// (a full disk): the view no longer follows its topic and is dropped.
var ErrStoreFailed = errors.New("the view's store failed")

// storeOptions are what the disk stores of one Views share.
type storeOptions struct {
	cache   *pebble.Cache
	entries *entryCache // nil: none
	// readFailures counts the look-ups and scans that could not read.
	readFailures *atomic.Uint64
	fs           vfs.FS // nil: the operating system's
	logger       *slog.Logger
	bulkMin      int64 // the smallest first load written in bulk (0: none)
	// bulkSlot is taken by the store loading in bulk, one per cluster at
	// a time, so the bulk's memtables (up to 128 MiB) are paid once
	// however many views load at once; the others load as usual.
	bulkSlot chan struct{}
	// compression is the profile tables are written with (nil: the
	// store's, storeCompression). Tests set pebble's snappy, the builds
	// before storeCompression's, to check stores open across the change.
	compression *sstable.CompressionProfile
}

// files is the file system the stores are on.
func (so storeOptions) files() vfs.FS {
	if so.fs == nil {
		return vfs.Default
	}
	return so.fs
}

// openDiskStore opens (or creates) the store in dir for a view of the
// topic with id; a store of another topic id or format is emptied first,
// and so is one that does not open (corrupt): its log line says why.
// rebuilt tells whether an existing store was emptied, and why.
func openDiskStore(dir string, id [16]byte, so storeOptions) (s *diskStore, rebuilt string, err error) {
	s, err = openPebble(dir, so)
	if err != nil && errors.Is(err, syscall.EAGAIN) {
		// Locked: another process has it open (two processes given one
		// directory). Its store is not this one's to empty.
		return nil, "", fmt.Errorf("opening the view store in %s: another process has it open: %w", dir, err)
	}
	if err != nil {
		rebuilt = "the store does not open: " + err.Error()
		if err := wipe(dir, so); err != nil {
			return nil, "", err
		}
		if s, err = openPebble(dir, so); err != nil {
			return nil, "", fmt.Errorf("opening the view store in %s: %w", dir, err)
		}
	}
	meta, err := s.read(metaKey)
	switch {
	case err != nil:
		_ = s.db.Close()
		return nil, "", fmt.Errorf("reading the view store's meta in %s: %w", dir, err)
	case meta == nil:
		// New (or emptied): write the meta; nothing else is there.
	case len(meta) != 17 || meta[0] != diskFormat:
		rebuilt = "the store is of another format"
	case !bytes.Equal(meta[1:], id[:]):
		rebuilt = "the store holds another generation of the topic (another topic id)"
	}
	if rebuilt != "" && meta != nil {
		if err := s.clear(); err != nil {
			_ = s.db.Close()
			return nil, "", err
		}
	}
	if meta == nil || rebuilt != "" {
		m := append([]byte{diskFormat}, id[:]...)
		if err := s.durably(func() error { return s.db.Set(metaKey, m, pebble.NoSync) }); err != nil {
			_ = s.db.Close()
			return nil, "", fmt.Errorf("writing the view store's meta in %s: %w", dir, err)
		}
	}
	if n, err := s.read(countKey); err != nil {
		_ = s.db.Close()
		return nil, "", fmt.Errorf("reading the view store's key count in %s: %w", dir, err)
	} else if len(n) == 8 {
		s.count = int64(binary.LittleEndian.Uint64(n))
	}
	return s, rebuilt, nil
}

func openPebble(dir string, so storeOptions) (*diskStore, error) {
	db, err := openDB(dir, so, false)
	if err != nil {
		return nil, err
	}
	return &diskStore{db: db, so: so, dir: dir, gen: so.entries.gen()}, nil
}

func openDB(dir string, so storeOptions, bulk bool) (*pebble.DB, error) {
	// No write-ahead log: a store is a copy of its topic, so what a crash
	// loses is read again from the topic. A batch is durable once its
	// memtable (4 MiB) is flushed to a table; a flush takes whole batches,
	// the offsets with their records, so a killed process leaves a store
	// that is a prefix of what it applied, and the view resumes from its
	// offsets, reading at most a memtable's worth again. Every record is
	// written once to a table instead of twice (the log, then a table): a
	// first load went from 38,000 to 45,000 – 81,000 records of 1 KiB a
	// second (BenchmarkDiskViewGet, on a loaded machine).
	//
	// Values are kept apart from their keys (blob files): a compaction
	// rewrites the keys and the values' handles, not the values, which
	// are written once at the flush. Compactions took 51 % of a first
	// load's CPU (1 KiB values, BenchmarkDiskViewLoad's profile), 25 %
	// with the values apart.
	//
	// A first load is bound by the flush (one at a time); four memtables
	// may wait for it instead of pebble's two, so a load stalls less
	// (350 → 220 ms of stalls in a 2.2 s load of 200,000 keys), at up to
	// 10 MiB more while a view loads (a catch-up's batch is a memtable).
	opts := &pebble.Options{Cache: so.cache, FS: bufferedFS{so.files()}, Logger: pebbleLogger{so.logger}, DisableWAL: true,
		FormatMajorVersion: pebble.FormatValueSeparation, MemTableStopWritesThreshold: 4}
	opts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{Enabled: true, MinimumSize: 256, MaxBlobReferenceDepth: 10,
			RewriteMinimumAge: 5 * time.Minute, TargetGarbageRatio: 0.2}
	}
	// Every write reads its key's current head first (a new key mostly):
	// bloom filters answer most of those reads without a block.
	compression := so.compression
	if compression == nil {
		compression = storeCompression()
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = pebblebloom.FilterPolicy(10)
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return compression }
	}
	if bulk {
		bulkOptions(opts)
	}
	return pebble.Open(dir, opts)
}

// storeCompression is pebble's snappy, tried on one block in ten once a
// file's blocks stop compressing. Snappy saves nothing on values already
// compressed or encrypted (a block that shrinks by less than 12 % is kept
// as it is), yet every block paid for the try: 0.74 s of a first load's
// 19 s of CPU at 1,000,000 values of 1 KiB. Pebble's adaptive compressor
// samples one block in ten with snappy and stores the others uncompressed
// while the samples save less than that 12 %; values that compress are
// compressed as before. In the same first load's profile snappy then took
// 0.11 s.
//
// The profile keeps snappy's name, the one written in the store's OPTIONS
// file: pebble does not read it back on opening (each block records its
// own compression), but its own tools parse that file and refuse a name
// they do not know, and a store is then one they cannot open.
func storeCompression() *sstable.CompressionProfile {
	p := *sstable.SnappyCompression
	p.OtherBlocks = sstable.NoCompression.OtherBlocks // the fallback: none
	p.AdaptiveReductionCutoffPercent = p.MinReductionPercent
	return &p
}

// bulkOptions are a first load's: no compaction until the load ends, then
// one. A compacted topic's keys come in no order, so every table a flush
// writes overlaps every other: compacted as they come, each compaction
// into the base level rewrote all of it, a cost that grows with the square
// of the view (the compactions of keys were half a first load's CPU at
// 1,000,000 keys). Merged once at the end, each key is rewritten once.
//   - The tables pile up in level 0 meanwhile, so level 0 stops no write.
//   - 64 MiB memtables, two at most (up to 128 MiB of memory while a view
//     loads): fewer, larger tables and blob files to merge.
//   - A flush writes one table and one blob file, not one of each for
//     every 2 MiB (level 0's usual target size): 1,000,000 values of 1 KiB
//     made 533 blob files and as many syncs, and the load went from
//     150,000 to 215,000 – 234,000 records a second. The other levels
//     keep pebble's sizes, so the load's final compaction writes tables
//     of the usual size.
//   - A table may reference up to 1,024 blob files (a first load of up to
//     64 GiB of values): the final compaction moves the values' handles,
//     not the values. The store reopened after the load takes the usual
//     10 again, so later compactions of those tables write their values
//     anew, spread over the view's life rather than in its first load.
func bulkOptions(opts *pebble.Options) {
	opts.DisableAutomaticCompactions = true
	opts.L0CompactionThreshold = 1 << 20
	opts.L0CompactionFileThreshold = 1 << 20
	opts.L0StopWritesThreshold = 1 << 20
	opts.MemTableSize = 64 << 20
	opts.MemTableStopWritesThreshold = 2
	opts.TargetFileSizes[0] = 128 << 20
	for i := 1; i < len(opts.TargetFileSizes); i++ {
		opts.TargetFileSizes[i] = 2 << 20 << i // pebble's defaults
	}
	policy := opts.Experimental.ValueSeparationPolicy()
	policy.MaxBlobReferenceDepth = 1024
	opts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy { return policy }
}

// bulkMinRecords is the smallest first load that opens its store for bulk
// by default: below it the reopening and the memtables cost more than the
// compactions saved.
const bulkMinRecords = 50_000

// reopen closes the store's database (flushed) and opens it again, bulk
// or not. The view's lock is held: no reader has the database; a first
// load's compaction still running is stopped first.
func (s *diskStore) reopen(bulk bool) error {
	s.stopSettling()
	if s.db == nil {
		return s.closedErr()
	}
	if err := s.db.Flush(); err != nil {
		return err
	}
	err := s.db.Close()
	s.db = nil
	s.leaveBulk()
	if err != nil {
		return err
	}
	db, err := openDB(s.dir, s.so, bulk)
	if err != nil {
		s.db = nil
		return fmt.Errorf("opening the view store in %s again: %w", s.dir, err)
	}
	s.db, s.bulk = db, bulk
	return nil
}

// enterBulk takes the cluster's bulk slot, if free, and reopens the store
// for a first load in bulk; it reports whether it did.
func (s *diskStore) enterBulk() (bool, error) {
	select {
	case s.so.bulkSlot <- struct{}{}:
	default:
		return false, nil
	}
	if err := s.reopen(true); err != nil {
		<-s.so.bulkSlot
		return false, err
	}
	s.bulkLoaded = true
	return true, nil
}

// leaveBulk gives the bulk slot back once the store is no longer open in
// bulk.
func (s *diskStore) leaveBulk() {
	if s.bulk {
		s.bulk = false
		<-s.so.bulkSlot
	}
}

// A first load in bulk is settled once its view is ready: its last
// memtable flushed, its tables compacted into one sorted run, and the store
// reopened with its usual options. Until then a look-up may consult every
// table of level 0 (their bloom filters mostly answer it), and live writes
// go on into the bulk store, whose level 0 stops none of them. The view is
// ready before: what the load wrote is all there, and a compaction of
// 4,000,000 keys takes some six seconds.
//
// beginSettle starts it, with the view's lock held: false when the store
// has nothing to settle. settle then runs without the lock and endSettle
// with it.
func (s *diskStore) beginSettle(ctx context.Context) (context.Context, bool) {
	if !s.bulk || s.err != nil || s.db == nil {
		return nil, false
	}
	s.settling.Lock()
	ctx, s.cancelSettle = context.WithCancel(ctx)
	return ctx, true
}

// settle flushes and compacts the store. It touches nothing but the
// database, which close and reopen do not close while settling is held.
func (s *diskStore) settle(ctx context.Context) (time.Duration, error) {
	defer s.settling.Unlock()
	start := time.Now()
	if err := s.db.Flush(); err != nil {
		return 0, err
	}
	err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true)
	return time.Since(start), err
}

// stopSettling cancels a first load's compaction, if one runs, and waits
// for it to return.
func (s *diskStore) stopSettling() {
	if s.cancelSettle != nil {
		s.cancelSettle()
	}
	s.settling.Lock()
	s.settling.Unlock() //nolint:staticcheck // a wait: nothing is guarded here
}

// endSettle reopens the settled store with its usual options, with the
// view's lock held. A store closed or reopened meanwhile (closing, or a
// catch-up that started over) is left as it is, and so is one whose
// compaction was cancelled by the views closing: close flushes it.
func (s *diskStore) endSettle(took time.Duration, err error) error {
	if s.cancelSettle != nil {
		s.cancelSettle()
		s.cancelSettle = nil
	}
	switch {
	case s.db == nil || !s.bulk || errors.Is(err, context.Canceled):
		return nil
	case err != nil:
		s.fail(fmt.Errorf("compacting the view store in %s after its first load: %w", s.dir, err))
		return s.err
	}
	if err := s.reopen(false); err != nil {
		s.fail(err)
		return s.err
	}
	s.so.logger.Info("a view's first load into its store on disk is compacted", "dir", s.dir, "keys", s.count,
		"took", took.Round(time.Millisecond))
	return nil
}

// wipe removes a store's directory.
func wipe(dir string, so storeOptions) error {
	if err := so.files().RemoveAll(dir); err != nil {
		return fmt.Errorf("removing the view store in %s: %w", dir, err)
	}
	return nil
}

// pebbleLogger passes pebble's lines to the views' log: its informational
// ones at debug level.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("view store: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Warn("view store: " + fmt.Sprintf(format, args...))
}

// Fatalf is what pebble calls when it cannot go on (its own files
// inconsistent): it must not return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("view store: " + msg)
	panic("view store: " + msg)
}

// read returns a copy of the value of k, nil if absent.
func (s *diskStore) read(k []byte) ([]byte, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(v)
	_ = closer.Close()
	return out, nil
}

// clear removes every key of the store (a rebuild), durably.
func (s *diskStore) clear() error {
	if err := s.durably(func() error { return s.db.DeleteRange([]byte{0}, []byte{0xff}, pebble.NoSync) }); err != nil {
		return fmt.Errorf("emptying the view store in %s: %w", s.dir, err)
	}
	s.count = 0
	s.gen = s.so.entries.gen()
	return nil
}

// durably makes write's writes durable: the store has no WAL, so they are
// flushed to a table.
func (s *diskStore) durably(write func() error) error {
	if err := write(); err != nil {
		return err
	}
	return s.db.Flush()
}

// positions returns the next offset per partition stored, n at least.
func (s *diskStore) positions(n int) ([]int64, error) {
	pos := make([]int64, n)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'p'}, UpperBound: []byte{'q'}})
	if err != nil {
		return nil, fmt.Errorf("reading the view store's offsets in %s: %w", s.dir, err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 5 || len(v) != 8 {
			return nil, fmt.Errorf("the view store in %s has a malformed offset", s.dir)
		}
		p := int(binary.BigEndian.Uint32(k[1:]))
		for p >= len(pos) {
			pos = append(pos, 0)
		}
		pos[p] = int64(binary.LittleEndian.Uint64(v))
	}
	return pos, it.Error()
}

func entryKey(buf []byte, key []byte) []byte {
	return append(append(buf[:0], 'e'), key...)
}

func posKey(p int32) []byte {
	var k [5]byte
	k[0] = 'p'
	binary.BigEndian.PutUint32(k[1:], uint32(p))
	return k[:]
}

// pendingHead is a key's head as the pending batch leaves it.
type pendingHead struct {
	head    diskItem
	present bool
}

// diskItem is the head of a stored entry, what a write compares.
type diskItem struct {
	partition int32
	offset    int64
	ts        int64
}

// decodeDisk reads a stored entry's value (copied: the entry owns its
// bytes).
func decodeDisk(key string, b []byte) (Entry, bool) {
	var h diskItem
	p, ok := h.decode(b)
	if !ok {
		return Entry{}, false
	}
	hl, w := binary.Uvarint(b[p:])
	if w <= 0 || uint64(len(b)-p-w) < hl {
		return Entry{}, false
	}
	p += w
	own := bytes.Clone(b[p:])
	e := Entry{Partition: h.partition, Offset: h.offset, Timestamp: h.ts, Key: key}
	if hl > 0 {
		e.headers = own[:hl:hl]
	}
	e.Value = own[hl:len(own):len(own)]
	return e, true
}

func (h *diskItem) decode(b []byte) (int, bool) {
	p := 0
	x, w := binary.Uvarint(b)
	if w <= 0 {
		return 0, false
	}
	h.partition, p = int32(x), p+w
	y, w := binary.Varint(b[p:])
	if w <= 0 {
		return 0, false
	}
	h.offset, p = y, p+w
	y, w = binary.Varint(b[p:])
	if w <= 0 {
		return 0, false
	}
	h.ts, p = y, p+w
	return p, true
}

// get returns the entry of key. Readers hold the read lock, several at
// once: it uses no buffer of the store. A read that fails is an error, never
// "absent": the client would be told a record it has does not exist.
func (s *diskStore) get(key string) (Entry, bool, error) {
	if s.db == nil {
		return Entry{}, false, s.closedErr()
	}
	if e, ok := s.so.entries.get(s.gen, key); ok {
		return e, true, nil
	}
	k := make([]byte, 0, len(key)+1)
	v, closer, err := s.db.Get(entryKey(k, []byte(key)))
	if errors.Is(err, pebble.ErrNotFound) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, s.readFailed(s.readErr(err))
	}
	defer closer.Close()
	e, ok := decodeDisk(key, v)
	if !ok {
		return Entry{}, false, s.readFailed(s.malformed())
	}
	if s.batch == nil {
		s.so.entries.put(s.gen, key, e)
	}
	return e, true, nil
}

// readFailed counts a look-up or scan that could not read, and returns its
// error.
func (s *diskStore) readFailed(err error) error {
	if s.so.readFailures != nil {
		s.so.readFailures.Add(1)
	}
	return err
}

func (s *diskStore) readErr(err error) error {
	return fmt.Errorf("%w: reading the view store in %s: %w", ErrStoreFailed, s.dir, err)
}

func (s *diskStore) closedErr() error {
	return fmt.Errorf("%w: the view store in %s is closed", ErrStoreFailed, s.dir)
}

func (s *diskStore) malformed() error {
	return fmt.Errorf("%w: the view store in %s has a malformed entry", ErrStoreFailed, s.dir)
}

// head reads the head of key's current entry, through the pending batch.
// A key the first load's filter has not seen is absent; it is added to the
// filter as it is tested (one hashing for both), since the write that asks
// mostly writes it (one that does not leaves a false positive: a read).
func (s *diskStore) head(k []byte) (diskItem, bool, error) {
	if s.seen != nil && !s.seen.TestAndAdd(k) {
		return diskItem{}, false, nil
	}
	if p, ok := s.pending[string(k[1:])]; ok {
		return p.head, p.present, nil
	}
	if p, ok := s.inflightPending[string(k[1:])]; ok {
		return p.head, p.present, nil
	}
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return diskItem{}, false, nil
	}
	if err != nil {
		return diskItem{}, false, err
	}
	defer closer.Close()
	var h diskItem
	if _, ok := h.decode(v); !ok {
		return diskItem{}, false, s.malformed()
	}
	return h, true, nil
}

// apply writes r (converted; its key not nil) with its partition's next
// offset (next: a record held for conversion and applied later does not
// take it back) in one batch, hdr its header encoding. It reports whether the
// view changed: a tombstone of an absent key, or a record that loses to the
// key's record of another partition, changes nothing but the offset.
func (s *diskStore) apply(r *client.Record, hdr []byte, next int64) (changed bool) {
	if s.err != nil || s.db == nil {
		return false
	}
	k := entryKey(s.buf[:0], r.Key)
	s.buf = k
	old, had, err := s.head(k)
	if err != nil {
		s.fail(err)
		return false
	}
	switch {
	case had && old.partition != r.Partition && !beats(r, &item{ts: old.ts, partition: old.partition}):
	case r.Value == nil && !had:
	case r.Value == nil:
		s.count--
		changed = true
	default:
		if !had {
			s.count++
		}
		changed = true
	}
	b := s.batch
	if b == nil {
		b = s.db.NewBatch()
	}
	if changed {
		if had {
			// Only a key the store holds can be cached: a new key (every
			// key of a first load) has nothing to drop.
			s.so.entries.drop(s.gen, string(r.Key))
		}
		if r.Value == nil {
			_ = b.Delete(k, nil)
		} else {
			s.set(b, k, r, hdr)
		}
		if s.pending != nil {
			s.pending[string(r.Key)] = pendingHead{
				head:    diskItem{partition: r.Partition, offset: r.Offset, ts: r.Timestamp.UnixMilli()},
				present: r.Value != nil,
			}
		}
	}
	s.setPos(b, r.Partition, next)
	s.commitIf(b)
	return changed
}

// set writes key k's entry for r into b, encoded in place (partition,
// offset, timestamp, header length as varints, then the headers and the
// value): no copy of the value but the batch's.
func (s *diskStore) set(b *pebble.Batch, k []byte, r *client.Record, hdr []byte) {
	var h [4 * binary.MaxVarintLen64]byte
	head := binary.AppendUvarint(h[:0], uint64(uint32(r.Partition)))
	head = binary.AppendVarint(head, r.Offset)
	head = binary.AppendVarint(head, r.Timestamp.UnixMilli())
	head = binary.AppendUvarint(head, uint64(len(hdr)))
	op := b.SetDeferred(len(k), len(head)+len(hdr)+len(r.Value))
	copy(op.Key, k)
	n := copy(op.Value, head)
	n += copy(op.Value[n:], hdr)
	copy(op.Value[n:], r.Value)
	_ = op.Finish()
}

func (s *diskStore) setPos(b *pebble.Batch, p int32, next int64) {
	if b == s.batch {
		s.pendingPos[p] = next
		return
	}
	var v [8]byte
	binary.LittleEndian.PutUint64(v[:], uint64(next))
	_ = b.Set(posKey(p), v[:], nil)
}

// advance stores a partition's next offset without a record.
func (s *diskStore) advance(p int32, next int64) {
	if s.err != nil || s.db == nil {
		return
	}
	b := s.batch
	if b == nil {
		b = s.db.NewBatch()
	}
	s.setPos(b, p, next)
	s.commitIf(b)
}

// commitIf commits b with the key count, unless it is the catch-up's
// batch with room left.
func (s *diskStore) commitIf(b *pebble.Batch) {
	if b != s.batch {
		s.commit(b)
		_ = b.Close()
		return
	}
	if b.Len() >= diskBatchBytes {
		s.commitGathered()
	}
}

// commit writes the key count into b and commits it.
func (s *diskStore) commit(b *pebble.Batch) {
	if err := s.seal(b); err != nil {
		s.fail(err)
	} else if err := b.Commit(pebble.NoSync); err != nil {
		s.fail(err)
	}
}

// seal writes the key count into b and checks the disk has room for it.
func (s *diskStore) seal(b *pebble.Batch) error {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(s.count))
	_ = b.Set(countKey, n[:], nil)
	return s.roomFor(b.Len())
}

// commitGathered hands the catch-up's batch, with the offsets it reached
// and the key count, to a goroutine that commits it (the memtable's
// inserts were 40 % of a catch-up's writes), and gathers the next writes
// in the batch the previous commit left: batches are committed one at a
// time, in order, and a buffer is kept rather than grown anew for each.
func (s *diskStore) commitGathered() {
	b := s.batch
	s.batch = nil // setPos writes into b now
	for p, next := range s.pendingPos {
		s.setPos(b, p, next)
	}
	clear(s.pendingPos)
	s.awaitCommit()
	if s.err == nil {
		if err := s.seal(b); err != nil {
			s.fail(err)
		}
	}
	if s.err != nil {
		b.Reset()
		s.batch = b
		clear(s.pending)
		return
	}
	s.inflight, s.inflightPending = b, s.pending
	s.committed = make(chan error, 1)
	go func(b *pebble.Batch, done chan<- error) { done <- b.Commit(pebble.NoSync) }(b, s.committed)
	if s.spare == nil {
		s.spare = s.db.NewBatchWithSize(diskBatchBytes+diskBatchBytes/4, pebble.WithMaxRetainedSizeBytes(2*diskBatchBytes))
		s.sparePending = map[string]pendingHead{}
	}
	s.batch, s.pending = s.spare, s.sparePending
	s.spare, s.sparePending = nil, nil
}

// awaitCommit waits for the batch in flight, if any, to be committed, and
// keeps its batch and map as the spares.
func (s *diskStore) awaitCommit() {
	if s.committed == nil {
		return
	}
	if err := <-s.committed; err != nil {
		s.fail(err)
	}
	s.committed = nil
	s.inflight.Reset()
	clear(s.inflightPending)
	s.spare, s.sparePending = s.inflight, s.inflightPending
	s.inflight, s.inflightPending = nil, nil
}

// dropGathered ends gathering: the batch in flight committed, the batches
// let go of.
func (s *diskStore) dropGathered() {
	s.awaitCommit()
	for _, b := range []*pebble.Batch{s.batch, s.spare} {
		if b != nil {
			_ = b.Close()
		}
	}
	s.batch, s.spare, s.pending, s.sparePending, s.pendingPos = nil, nil, nil, nil, nil
}

// gather makes writes gather in a batch until flush (a catch-up) of
// about records records.
func (s *diskStore) gather(records int64) {
	if s.db == nil || s.batch != nil || s.err != nil {
		return
	}
	if s.count == 0 && s.so.bulkMin > 0 && records >= s.so.bulkMin {
		if _, err := s.enterBulk(); err != nil {
			s.fail(err)
			return
		}
	}
	s.batch = s.db.NewBatchWithSize(diskBatchBytes+diskBatchBytes/4, pebble.WithMaxRetainedSizeBytes(2*diskBatchBytes))
	s.pending = map[string]pendingHead{}
	s.pendingPos = map[int32]int64{}
	if s.count == 0 && records > 0 {
		// Empty: the filter can see every key the store will hold.
		// seenBitsPerKey bits and seenHashes probes a key: about 0.1 % of
		// new keys read their heads for nothing. The filter's usual
		// sizing for 1 % (10 bits, 7 probes) cost more in both ways: its
		// probes, a cache miss each, were half a first load's look-ups,
		// and each false positive is a read through every table the load
		// has flushed (64 for 4 GiB of values in bulk) – the other half.
		// No larger than maxSeenKeys' filter (48 MiB): beyond that more
		// keys read their heads, none is missed.
		s.seen = bloom.New(uint(min(records, maxSeenKeys))*seenBitsPerKey, seenHashes)
	}
}

// The first load's filter of written keys: maxSeenKeys bounds its size,
// seenBitsPerKey and seenHashes set its false positives (see gather).
const (
	maxSeenKeys    = 20_000_000
	seenBitsPerKey = 20
	seenHashes     = 4
)

// flush commits the gathered writes and commits each write from now on.
func (s *diskStore) flush() error {
	if s.batch != nil {
		s.commitGathered()
		s.dropGathered()
	}
	s.seen = nil
	return s.err
}

// roomFor checks, at its pace, that the disk keeps minFreeBytes free once
// n more bytes are written.
func (s *diskStore) roomFor(n int) error {
	s.written += int64(n)
	if s.written < freeCheckBytes && time.Since(s.checked) < freeCheckEvery {
		return nil
	}
	s.written, s.checked = 0, time.Now()
	u, err := s.so.files().GetDiskUsage(s.dir)
	if err != nil {
		return fmt.Errorf("reading the free space of the store's disk: %w", err)
	}
	if u.AvailBytes < minFreeBytes+uint64(n) {
		return fmt.Errorf("the disk is full: %d bytes free, below the %d the store keeps free", u.AvailBytes, minFreeBytes)
	}
	return nil
}

func (s *diskStore) fail(err error) {
	if s.err == nil && errors.Is(err, ErrStoreFailed) {
		s.err = err
	} else if s.err == nil {
		s.err = fmt.Errorf("%w: writing to the view store in %s: %w", ErrStoreFailed, s.dir, err)
	}
}

// remove deletes key (a record below its partition's log start).
func (s *diskStore) remove(key string) {
	if s.err != nil || s.db == nil {
		return
	}
	k := entryKey(s.buf[:0], []byte(key))
	s.buf = k
	s.so.entries.drop(s.gen, key)
	b := s.db.NewBatch()
	_ = b.Delete(k, nil)
	s.count--
	s.commit(b)
	_ = b.Close()
}

// scan calls fn with every entry until it returns false; each entry owns
// its bytes. A read that fails ends the scan with an error: an answer built
// from part of the view would be a wrong one.
func (s *diskStore) scan(fn func(Entry) bool) error {
	if s.db == nil {
		return s.closedErr()
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'e'}, UpperBound: []byte{'f'}})
	if err != nil {
		return s.readFailed(s.readErr(err))
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return s.readFailed(s.readErr(err))
		}
		e, ok := decodeDisk(string(it.Key()[1:]), v)
		if !ok {
			_ = it.Close()
			return s.readFailed(s.malformed())
		}
		if !fn(e) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return s.readFailed(s.readErr(err))
	}
	return nil
}

// diskStats are a disk store's sizes.
type diskStats struct {
	bytes           int64 // on disk
	compactionBytes int64 // estimated debt of compactions
}

func (s *diskStore) stats() diskStats {
	if s.db == nil {
		return diskStats{}
	}
	m := s.db.Metrics()
	// pebble (v2.1.7) leaves the local sizes of the blob files it found
	// on opening at zero, so its DiskSpaceUsage misses the values of a
	// store reopened (a restart, a settled bulk load); their sizes over
	// all storage are kept, and a store's files are all local.
	bf := m.BlobFiles
	used := m.DiskSpaceUsage() - (bf.Local.LiveSize + bf.Local.ObsoleteSize + bf.Local.ZombieSize) +
		bf.LiveSize + bf.ObsoleteSize + bf.ZombieSize
	st := diskStats{bytes: int64(used), compactionBytes: int64(m.Compact.EstimatedDebt)}
	if s.bulk {
		// A first load in bulk compacts what it wrote, level 0 and the
		// memtables, once it ends; pebble's estimate counts none of it
		// (level 0 has no threshold meanwhile). So the backlog is not
		// zero until the store is settled.
		st.compactionBytes = m.Levels[0].TablesSize + int64(m.MemTable.Size)
	}
	return st
}

// close closes the store; it reads nothing afterwards.
func (s *diskStore) close() {
	s.stopSettling()
	if s.db == nil {
		return
	}
	s.dropGathered()
	if s.err == nil {
		// Without a log, what the memtable holds is lost unless flushed:
		// a restart after a clean stop resumes from every record applied.
		_ = s.db.Flush()
	}
	_ = s.db.Close()
	s.db = nil
	s.leaveBulk()
}

// storeDir is the directory of topic's store under root. Topic names are
// letters, digits, '.', '_' and '-', and never "." or "..".
func storeDir(root, topic string) (string, error) {
	if topic == "" || topic == "." || topic == ".." || filepath.Base(topic) != topic {
		return "", fmt.Errorf("topic %q cannot name a view store directory", topic)
	}
	return filepath.Join(root, topic), nil
}

// ensureDir creates the root of the stores.
func ensureDir(root string) error {
	if err := os.MkdirAll(root, 0o750); err != nil {
		return fmt.Errorf("creating the view store directory: %w", err)
	}
	return nil
}
