package logtails

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// fanoutFramer is a minimal framer: prefix, value, one varint per partition.
type fanoutFramer struct{}

func (fanoutFramer) ValueOffset() int                      { return 5 }
func (fanoutFramer) MaxFrame(valueLen, partitions int) int { return 5 + valueLen + 10*partitions }
func (fanoutFramer) AppendFrame(dst, value []byte, next []int64) []byte {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst = append(dst, value...)
	for _, off := range next {
		dst = binary.AppendUvarint(dst, uint64(off))
	}
	binary.BigEndian.PutUint32(dst[at+1:], uint32(len(dst)-at-5))
	return dst
}

// fanout is a ring with streams at its tail, without Kafka: the tail's
// append and the streams' reads are what a burst costs in the processor.
type fanout struct {
	l       *Tails
	r       *ring
	streams []*Stream
	msgs    []*kafka.Message
	sink    int
}

func newFanout(streams, records, partitions int, filters []Filter) *fanout {
	l := &Tails{opts: Options{BatchBytes: 64 << 10, RingRecords: 2 * records}, ctx: context.Background()}
	l.bufs.New = func() any { b := make([]byte, 0, 16<<10); return &b }
	f := &fanout{l: l, r: newRing(fanoutFramer{}, partitions, 2*records, 1<<30, make([]int64, partitions), make([]int64, partitions))}
	topic := "fanout"
	for i := 0; i < records; i++ {
		f.msgs = append(f.msgs, &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: int32(i % partitions), Offset: kafka.Offset(i / partitions)},
			Key:            []byte(fmt.Sprintf("k%d", i%10)),
			Value:          []byte(fmt.Sprintf("value-%04d-of-a-typical-event", i)),
		})
	}
	t := &logTopic{name: topic, retired: make(chan struct{})}
	for i := 0; i < streams; i++ {
		s := &Stream{l: l, t: t, r: f.r, opts: StreamOptions{Framer: fanoutFramer{}, Filters: filters}, shared: true,
			next: make([]int64, partitions), phase: phaseHistory}
		s.cur = &cursor{budget: uint64(2 * records), lagged: make(chan struct{})}
		f.streams = append(f.streams, s)
	}
	return f
}

// burst appends the records in batches of 100 and lets every stream read
// after each batch, as the tail wakes them; it returns the frames delivered.
func (f *fanout) burst(t testing.TB) int {
	ctx := context.Background()
	frames := 0
	for i := 0; i < len(f.msgs); i += 100 {
		f.r.append(f.msgs[i:min(i+100, len(f.msgs))])
		for _, s := range f.streams {
			for {
				chunk, err := s.fill(ctx, false)
				if err != nil {
					t.Fatal(err)
				}
				if len(chunk) == 0 {
					break
				}
				f.sink += len(chunk)
				for len(chunk) > 0 {
					n := int(binary.BigEndian.Uint32(chunk[1:5]))
					chunk = chunk[5+n:]
					frames++
				}
			}
		}
	}
	return frames
}

// reset empties the ring and puts every stream back at its start.
func (f *fanout) reset() {
	partitions := f.r.partitions
	f.r = newRing(fanoutFramer{}, partitions, len(f.r.entries), 1<<30, make([]int64, partitions), make([]int64, partitions))
	for _, s := range f.streams {
		s.r, s.phase, s.closed = f.r, phaseHistory, false
		s.next = make([]int64, partitions)
		s.cur = &cursor{budget: s.cur.budget, lagged: make(chan struct{})}
	}
}

// Allocations per delivered record per stream when 1,000 streams at the
// tail receive a burst of 1,000 records: the shared-frame path (no filter),
// and the copying path (a filter keeps every other key).
func TestFanoutAllocationsPerRecordPerStream(t *testing.T) {
	if testing.Short() {
		t.Skip("measures")
	}
	const streams, records = 1000, 1000
	key := "k1"
	for _, tc := range []struct {
		name    string
		filters []Filter
		want    int
		max     float64
	}{
		{"shared frames", nil, records, 0.01},
		{"filtered (copied)", []Filter{{Key: &key}}, records / 10, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFanout(streams, records, 1, tc.filters)
			f.burst(t) // warm the buffer pool
			var allocs float64
			delivered := 0
			const runs = 3
			for i := 0; i < runs; i++ {
				f.reset()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				delivered = f.burst(t)
				runtime.ReadMemStats(&after)
				allocs += float64(after.Mallocs-before.Mallocs) / runs
			}
			if delivered != streams*tc.want {
				t.Fatalf("%d frames delivered, want %d", delivered, streams*tc.want)
			}
			per := allocs / float64(delivered)
			t.Logf("%s: %.0f allocations per burst, %.5f per delivered record per stream", tc.name, allocs, per)
			if per > tc.max {
				t.Fatalf("%.5f allocations per delivered record per stream, want at most %v", per, tc.max)
			}
		})
	}
}

func BenchmarkFanout1000Streams(b *testing.B) {
	f := newFanout(1000, 1000, 4, nil)
	b.ReportAllocs()
	var delivered int
	start := time.Now()
	for i := 0; i < b.N; i++ {
		f.reset()
		delivered += f.burst(b)
	}
	b.ReportMetric(float64(delivered)/time.Since(start).Seconds(), "frames/s")
}
