package kafkagrpc

import "testing"

// A call that finishes behind an unfinished one is committed only with it:
// the commit never passes a record whose call has not been answered.
func TestOffsetsCommitOnlyBelowTheFirstUnfinishedRecord(t *testing.T) {
	o := newOffsets()
	p := part{"requests", 0}
	for _, off := range []int64{10, 11, 12, 13} {
		o.read(p, off)
	}
	if _, ok := o.advance(p); ok {
		t.Fatal("advanced with nothing done")
	}
	o.finish(p, 12)
	o.finish(p, 13)
	if _, ok := o.advance(p); ok {
		t.Fatal("advanced past unfinished 10 and 11")
	}
	o.finish(p, 10)
	if next, ok := o.advance(p); !ok || next != 11 {
		t.Fatalf("advance = %d, %v; want 11 (11 is not done)", next, ok)
	}
	o.finish(p, 11)
	if next, ok := o.advance(p); !ok || next != 14 {
		t.Fatalf("advance = %d, %v; want 14, past the last record", next, ok)
	}
	if _, ok := o.advance(p); ok {
		t.Fatal("advanced twice to the same offset")
	}
	o.drop(p)
	if len(o.partitions()) != 0 {
		t.Fatal("a dropped partition is still tracked")
	}
}
