package logtails_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
)

// tombstoneFramer frames as testFramer does, and a tombstone as the value
// "deleted:<key>".
type tombstoneFramer struct{ testFramer }

func (f tombstoneFramer) AppendTombstone(dst, key []byte, next []int64) []byte {
	return f.AppendFrame(dst, append([]byte("deleted:"), key...), next)
}

// A stream whose framer frames tombstones gets them where they are in the
// log, from the history reader and from the ring alike; a stream on the
// same topic whose framer does not leaves them out.
func TestLogStreamTombstones(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 2})
	values := writeSeq(t, b.Addr(), "log", 2, 0, 40) // 40 values, a tombstone after every fifth
	l, _ := newLogTails(t, b.Addr(), logtails.Options{RingRecords: 16, TopicIdle: time.Minute})

	plain := openStream(t, l, logtails.StreamOptions{Topic: "log", LagBudget: 64})
	checkOrder(t, collect(t, plain, 40), values, 2)

	withTombstones := openStream(t, l, logtails.StreamOptions{Topic: "log", Framer: tombstoneFramer{}, LagBudget: 64})
	frames := collect(t, withTombstones, 48)
	deleted, last := 0, make([]int64, 2)
	var rest []got
	for _, f := range frames {
		for p, off := range f.next {
			if off < last[p] {
				t.Fatalf("position of partition %d went back at %s", p, f.value)
			}
			last[p] = off
		}
		if strings.HasPrefix(f.value, "deleted:") {
			if f.value != "deleted:t" {
				t.Fatalf("tombstone frame %q, want deleted:t", f.value)
			}
			deleted++
			continue
		}
		rest = append(rest, f)
	}
	if deleted != 8 {
		t.Fatalf("%d tombstones, want 8", deleted)
	}
	checkOrder(t, rest, values, 2)

	// Live: a tombstone written now comes from the ring.
	writeSeq(t, b.Addr(), "log", 2, 40, 45) // v40..v44 and a tombstone after v44
	live := collect(t, withTombstones, 6)
	var v44, tomb *got
	for i := range live {
		switch live[i].value {
		case "v44":
			v44 = &live[i]
		case "deleted:t":
			tomb = &live[i]
		}
	}
	// v44 and the tombstone are partition 0's: the tombstone right after it.
	if v44 == nil || tomb == nil || tomb.next[0] != v44.next[0]+1 {
		t.Fatalf("live frames %v: want the tombstone right after v44 in partition 0", live)
	}
	more := collect(t, plain, 5)
	checkOrder(t, more, []string{"v40", "v41", "v42", "v43", "v44"}, 2)
}
