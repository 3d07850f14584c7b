package logtails_test

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
)

// Records removed above the log tail's own position before it read them
// (the tail fell behind; DeleteRecords up to past them) are a gap its
// streams are told of, never skipped: a stream at the tail ends with a
// Truncated *GapError from its own position, and resumes at the log start
// knowingly. The tail is held behind by refusing its fetches.
func TestLogStreamTailBehindRemovedRecordsIsAGap(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			kafkatest.Produce(t, b.Addr(), "log", kafkatest.Rec{Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i))})
		}
	}
	produce(0, 3)
	l, _ := newLogTails(t, b.Addr(), logtails.Options{})
	s := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: map[int32]int64{0: 0}})
	if first := collect(t, s, 3); first[2].value != "v2" || first[2].next[0] != 3 {
		t.Fatalf("before the gap: %+v", first)
	}

	var refuse atomic.Bool
	refuse.Store(true)
	cluster := b.Cluster()
	cluster.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if refuse.Load() {
			return nil, errors.New("fetches refused by the test: the tail falls behind"), true
		}
		return nil, nil, false
	})
	produce(3, 8)                                     // offsets 3..7, not read by the tail
	kafkatest.DeleteRecords(t, b.Addr(), "log", 0, 6) // 3..5 removed before the tail read them
	refuse.Store(false)

	chunk, err := s.Next(kafkatest.Ctx(t, 30*time.Second))
	if err == nil {
		t.Fatalf("the stream was sent %q past the removed records: they were skipped silently", chunk)
	}
	var gap *logtails.GapError
	if !errors.As(err, &gap) || gap.Cause != logtails.Truncated ||
		!slices.Equal(gap.Gaps, []logtails.Gap{{Partition: 0, Asked: 3, LogStart: 6, LogEnd: -1}}) || gap.Resume[0] != 6 {
		t.Fatalf("the stream ended with %v (%+v); want a Truncated gap of partition 0 from 3 to 6, resuming at 6", err, gap)
	}
	r := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: map[int32]int64{0: 6}})
	if rest := collect(t, r, 2); rest[0].value != "v6" || rest[1].value != "v7" {
		t.Fatalf("resumed at the log start: %+v", rest)
	}
}
