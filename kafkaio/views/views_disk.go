package views

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// storeCacheBytes is the block cache the disk stores of one cluster share:
// the hot blocks of every disk view, beside the kernel's page cache.
const storeCacheBytes = 64 << 20

// openStore opens the disk store of a new view and takes the offsets it
// stored as the view's positions: the catch-up resumes from them.
func (c *Views) openStore(v *View) error {
	dir, err := storeDir(c.opts.StoreDir, v.topic)
	if err != nil {
		return err
	}
	s, rebuilt, err := openDiskStore(dir, v.topicID, c.stores)
	if err != nil {
		return err
	}
	if rebuilt != "" {
		c.logger.Warn("a view's store on disk is rebuilt from the topic", "topic", v.topic, "dir", dir, "reason", rebuilt)
	}
	pos, err := s.positions(len(v.positions))
	if err == nil && len(pos) > len(v.positions) {
		err = fmt.Errorf("the store has offsets of %d partitions, the topic %d", len(pos), len(v.positions))
	}
	if err != nil {
		c.logger.Warn("a view's store on disk is rebuilt from the topic", "topic", v.topic, "dir", dir, "reason", err.Error())
		if err := s.clear(); err != nil {
			s.close()
			return err
		}
		pos = make([]int64, len(v.positions))
	}
	v.positions = pos
	v.disk = s
	if s.count > 0 {
		c.logger.Info("a view resumes from its store on disk", "topic", v.topic, "keys", s.count, "dir", dir)
	}
	return nil
}

// watermarks reads the log start and end of every partition of topic.
func (c *Views) watermarks(cons *kafka.Consumer, topic string, n int) (lo, hi []int64, err error) {
	lo, hi = make([]int64, n), make([]int64, n)
	for p := range n {
		lo[p], hi[p], err = cons.QueryWatermarkOffsets(topic, int32(p), int(c.opts.KafkaTimeout.Milliseconds()))
		if err != nil {
			return nil, nil, fmt.Errorf("reading the watermarks of %s[%d]: %w", topic, p, err)
		}
	}
	return lo, hi, nil
}

// resumeStore checks the offsets a view kept on disk resumes from against
// the log: below its start (records removed that the store may still
// hold, or whose tombstones it missed) or beyond its end (the topic is
// another log now), the store is emptied and the view read from the start,
// never mixed. It also restores a store whose last catch-up failed to what
// it holds.
func (c *Views) resumeStore(v *View, lo, hi []int64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.disk
	if s == nil {
		return nil
	}
	if err := v.resyncLocked(); err != nil {
		return err
	}
	for p, pos := range v.positions {
		if pos == 0 || (pos >= lo[p] && pos <= hi[p]) {
			continue
		}
		c.logger.Warn("a view's store on disk is rebuilt from the topic", "topic", v.topic, "dir", s.dir,
			"reason", fmt.Sprintf("partition %d: the store read up to offset %d, the log is now %d to %d", p, pos, lo[p], hi[p]))
		if err := s.clear(); err != nil {
			return err
		}
		clear(v.positions)
		return nil
	}
	return nil
}

// resyncLocked drops a disk view's uncommitted writes and takes its
// positions and key count from the store again (after a catch-up that
// failed part way).
func (v *View) resyncLocked() error {
	s := v.disk
	if s.batch == nil && s.err == nil {
		return nil
	}
	s.dropGathered()
	s.seen = nil
	s.err = nil
	if s.bulk {
		// A first load failed part way: what it stored stays, and the
		// catch-up goes on into a store with its usual options.
		if err := s.reopen(false); err != nil {
			return err
		}
	}
	pos, err := s.positions(len(v.positions))
	if err != nil {
		return err
	}
	n, err := s.read(countKey)
	if err != nil {
		return fmt.Errorf("reading the view store's key count in %s: %w", s.dir, err)
	}
	s.count = 0
	if len(n) == 8 {
		s.count = int64(binary.LittleEndian.Uint64(n))
	}
	copy(v.positions, pos)
	return nil
}

// storeFailed drops a view whose store failed a write: it no longer
// follows its topic, so it answers nothing more; the topic's next view
// resumes from what the store holds.
func (c *Views) storeFailed(v *View, err error) {
	c.storeFailures.Add(1)
	c.logger.Error("a view's store on disk failed; the view is dropped and opened again", "topic", v.topic, "err", err)
	c.drop(v.topic, v, err)
}

// gatherStore makes a disk view's writes gather in batches (a catch-up
// of about records records).
func (v *View) gatherStore(records int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.disk != nil {
		v.disk.gather(records)
	}
}

// flushStore commits a disk view's gathered writes; a failed write fails
// it. It reports whether the store took a first load in bulk, which
// settleStore settles once the view is ready.
func (v *View) flushStore() (bulk bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.disk == nil {
		return false, nil
	}
	err = v.disk.flush()
	return err == nil && v.disk.bulk, err
}

// settleStore compacts a first load in bulk and reopens its store as
// usual (see diskStore.beginSettle), without the view's lock while it
// compacts; a failure fails the store (ErrStoreFailed).
func (v *View) settleStore(ctx context.Context) error {
	v.mu.Lock()
	s := v.disk
	sctx, ok := s.beginSettle(ctx)
	v.mu.Unlock()
	if !ok {
		return nil
	}
	took, err := s.settle(sctx)
	v.mu.Lock()
	defer v.mu.Unlock()
	return s.endSettle(took, err)
}

// storeErr is the error of a disk view's failed write, nil if none.
func (v *View) storeErr() error {
	if v.disk == nil {
		return nil
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.disk.err
}

// closeStore closes a disk view's store (an evicted or dropped view).
func (v *View) closeStore() {
	if v.disk == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.disk.close()
}

// OnDisk tells whether the view is kept on disk.
func (v *View) OnDisk() bool { return v.disk != nil }
