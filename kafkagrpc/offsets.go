package kafkagrpc

import "slices"

// part names a partition of a request topic.
type part struct {
	topic     string
	partition int32
}

// offsets tracks, per partition, the records read and which of them are
// done (answered, their replies acknowledged, or skipped). What may be
// committed is the offset of the first record not done: every record
// below it is done. Calls finish out of order, so a finished call behind
// an unfinished one waits to be committed with it. Owned by the worker's
// loop.
type offsets struct {
	parts map[part]*pending
}

type pending struct {
	read      []int64 // offsets read and not yet committed, ascending
	done      map[int64]bool
	committed int64 // the last offset returned by advance; -1 before any
}

func newOffsets() *offsets { return &offsets{parts: map[part]*pending{}} }

func (o *offsets) get(p part) *pending {
	pp := o.parts[p]
	if pp == nil {
		pp = &pending{done: map[int64]bool{}, committed: -1}
		o.parts[p] = pp
	}
	return pp
}

// read records that offset of p was read (offsets of a partition arrive
// ascending).
func (o *offsets) read(p part, off int64) {
	pp := o.get(p)
	pp.read = append(pp.read, off)
}

// finish marks a read record done.
func (o *offsets) finish(p part, off int64) {
	if pp := o.parts[p]; pp != nil {
		pp.done[off] = true
	}
}

// advance drops the done records at the front of p and returns the offset
// to commit (the next one to read) when it moved.
func (o *offsets) advance(p part) (int64, bool) {
	pp := o.parts[p]
	if pp == nil {
		return 0, false
	}
	n := 0
	for n < len(pp.read) && pp.done[pp.read[n]] {
		delete(pp.done, pp.read[n])
		n++
	}
	if n == 0 {
		return 0, false
	}
	next := pp.read[n-1] + 1
	pp.read = slices.Delete(pp.read, 0, n)
	if len(pp.read) > 0 {
		next = pp.read[0]
	}
	if next <= pp.committed {
		return 0, false
	}
	pp.committed = next
	return next, true
}

// drop forgets p (revoked: its next owner reads from the last commit).
func (o *offsets) drop(p part) { delete(o.parts, p) }

// partitions are the partitions tracked.
func (o *offsets) partitions() []part {
	out := make([]part, 0, len(o.parts))
	for p := range o.parts {
		out = append(out, p)
	}
	return out
}
