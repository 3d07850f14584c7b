package logtails

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A stream never skips records silently. A message id is a position (the
// next offset per partition) and nothing else: it names no generation of
// the topic, so that ids stay those Zilla issues and reads, byte for byte.
// What a position can be checked against is the log as it is now, and a
// stream is refused (Open fails) or ended (Next fails, Retired closes) with
// a *GapError when the records it would continue with are not there:
//
//   - Truncated: the position is below the log start of a partition
//     (retention or DeleteRecords removed the records in between). Checked
//     when the stream opens (the broker's log starts and ends, two
//     requests, unless the position is at the end the tail saw in every
//     partition), and when a history read finds its offset out of range.
//   - BeyondEnd: the position is past the end of the log, or names a
//     partition the topic does not have: the topic was deleted and created
//     again since the id was issued (a fresh log is shorter), or the id is
//     another topic's.
//   - Recreated: the topic of a running stream was deleted and created
//     again (another topic id, or the tail read an offset below the ring's
//     position).
//
// The error carries the position to continue from knowingly (Resume): the
// asked position with each truncated partition moved to its log start, or
// nothing (the new generation from its start). A client is told what it
// missed and decides; a position of a deleted generation that happens to
// lie inside the new log cannot be recognised, which the documentation of
// the topic lifecycle says.

// ErrGap is wrapped by every *GapError.
var ErrGap = errors.New("the records the stream would continue with are not in the log")

// GapCause says why records are missing.
type GapCause int

// The causes of a gap.
const (
	Truncated GapCause = iota // below the log start: removed by retention or DeleteRecords
	BeyondEnd                 // past the end of the log: an id of a deleted generation, or of another topic
	Recreated                 // the topic was deleted and created again under a running stream
)

// Gap is one partition's missing records: the stream asked for Asked, the
// log holds [LogStart, LogEnd). LogStart and LogEnd are -1 for a partition
// the topic does not have (and LogEnd when it was not read).
type Gap struct {
	Partition int32
	Asked     int64
	LogStart  int64
	LogEnd    int64
}

// GapError is how a stream is refused or ended when it cannot continue
// without skipping records.
type GapError struct {
	Topic string
	Cause GapCause
	Gaps  []Gap // by partition; none for Recreated
	// Resume is the position to continue from, knowing what was missed:
	// next offset by partition, partitions it does not name from the log
	// start. Empty: the whole topic from its start.
	Resume map[int32]int64
}

func (e *GapError) Error() string {
	var b strings.Builder
	switch e.Cause {
	case Truncated:
		fmt.Fprintf(&b, "topic %s: records were removed from the log (retention or DeleteRecords) below the position to resume at:", e.Topic)
		for _, g := range e.Gaps {
			fmt.Fprintf(&b, " partition %d asked offset %d, the log starts at %d (%d records missed);", g.Partition, g.Asked, g.LogStart, g.LogStart-g.Asked)
		}
	case BeyondEnd:
		fmt.Fprintf(&b, "topic %s: the position to resume at is past the end of the log (the topic was deleted and created again since the id was issued, or the id is of another topic):", e.Topic)
		for _, g := range e.Gaps {
			if g.LogStart < 0 {
				fmt.Fprintf(&b, " partition %d asked offset %d, the topic has no partition %d;", g.Partition, g.Asked, g.Partition)
				continue
			}
			fmt.Fprintf(&b, " partition %d asked offset %d, the log ends at %d;", g.Partition, g.Asked, g.LogEnd)
		}
	case Recreated:
		fmt.Fprintf(&b, "topic %s was deleted and created again while the stream read it: the records after the last message are of the deleted generation and are gone;", e.Topic)
	}
	return strings.TrimSuffix(b.String(), ";")
}

func (e *GapError) Unwrap() error { return ErrGap }

// truncatedGap is the gap of a position some partitions of which are below
// the log start; nil when none is.
func truncatedGap(topic string, start map[int32]int64, lo map[int32]int64) *GapError {
	var gaps []Gap
	for p, off := range start {
		if l, ok := lo[p]; ok && off < l {
			gaps = append(gaps, Gap{Partition: p, Asked: off, LogStart: l, LogEnd: -1})
		}
	}
	if len(gaps) == 0 {
		return nil
	}
	sortGaps(gaps)
	resume := maps.Clone(start)
	for _, g := range gaps {
		resume[g.Partition] = g.LogStart
	}
	return &GapError{Topic: topic, Cause: Truncated, Gaps: gaps, Resume: resume}
}

func sortGaps(gaps []Gap) {
	slices.SortFunc(gaps, func(a, b Gap) int { return cmp.Compare(a.Partition, b.Partition) })
}
