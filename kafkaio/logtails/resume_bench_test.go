package logtails_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/cputime"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// BenchmarkResume is one client's resume, the path both an SSE stream's
// last-event-id and a gRPC fetch stream's last-message-id take: a stream
// opened 10 records before the topic's end, read until it has them, and
// closed, while another stream keeps the topic's tail open (as the other
// clients do). The records are in the topic's ring, or behind it (a
// leased history reader fetches them from the broker). Besides -benchmem's
// figures it reports the process's CPU time per resume (librdkafka's
// threads and the embedded broker included), the wall time per resume
// (ns/op: broker round trips included) and the part of it Open takes (the
// position's check against the log's bounds).
func BenchmarkResume(b *testing.B) {
	const records, missed = 1000, 10
	for _, c := range []struct {
		name string
		ring int
	}{{"ring", 10000}, {"history", 100}} {
		b.Run(c.name, func(b *testing.B) {
			br := kafkatest.Broker(b, embedded.Topic{Name: "log", Partitions: 1})
			recs := make([]kafkatest.Rec, records)
			for i := range recs {
				recs[i] = kafkatest.Rec{Key: fmt.Appendf(nil, "k%d", i), Value: kafkatest.BenchValue(i)}
			}
			kafkatest.Produce(b, br.Addr(), "log", recs...)
			vs, err := views.New(views.Options{Name: "kafka0", Properties: map[string]string{"bootstrap.servers": br.Addr()}, KafkaTimeout: 5 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(vs.Close)
			l, err := logtails.New(vs, logtails.Options{RingRecords: c.ring, TopicIdle: time.Minute, KafkaTimeout: 5 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(l.Close)
			ctx := kafkatest.Ctx(b, 5*time.Minute)
			live := openAt(ctx, b, l, nil)
			defer live.Close()
			readFrames(ctx, b, live, records)
			start := map[int32]int64{0: records - missed}
			var opening time.Duration
			resume := func() {
				t0 := time.Now()
				s := openAt(ctx, b, l, start)
				opening += time.Since(t0)
				readFrames(ctx, b, s, missed)
				s.Close()
			}
			resume() // the history reader's consumer is created once, then leased
			b.ReportAllocs()
			b.ResetTimer()
			opening = 0
			cpu0 := cputime.Process()
			for range b.N {
				resume()
			}
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(opening.Nanoseconds())/float64(b.N), "open-ns/op")
		})
	}
}

func openAt(ctx context.Context, b *testing.B, l *logtails.Tails, start map[int32]int64) *logtails.Stream {
	s, err := l.Open(ctx, logtails.StreamOptions{Topic: "log", Framer: testFramer{}, Start: start, LagBudget: 100000})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// readFrames reads until n frames arrived (testFramer: 5-byte prefixes).
func readFrames(ctx context.Context, b *testing.B, s *logtails.Stream, n int) {
	for got := 0; got < n; {
		chunk, err := s.Next(ctx)
		if err != nil {
			b.Fatalf("after %d of %d frames: %v", got, n, err)
		}
		for len(chunk) >= 5 {
			got++
			chunk = chunk[5+int(uint32(chunk[1])<<24|uint32(chunk[2])<<16|uint32(chunk[3])<<8|uint32(chunk[4])):]
		}
	}
}
