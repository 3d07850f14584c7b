package replies

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// BenchmarkReplyEvictedBytes measures what an evicted id costs: an index
// bounded to 64 KiB indexes 100,000 replies (ids as the processor issues
// them, ~500 B values), evicting all but the last ~100 to locations; the
// Go heap it keeps, less the replies it holds, per evicted id (heap-B/id),
// against the index's own accounting (accounted-B/id).
func BenchmarkReplyEvictedBytes(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		b.StopTimer()
		topic := "replies"
		x := &Index{now: time.Now, topics: map[string]*replyTopic{},
			opts:  Options{MaxBytes: 64 << 10, Retention: time.Hour},
			store: store{maxBytes: 64 << 10, retention: time.Hour}}
		x.topics[topic] = &replyTopic{name: topic, headers: []string{cidHeader}, entries: map[string]*replyEntry{}}
		before := heapInUse()
		b.StartTimer()
		for i := range n {
			x.apply(kafkatest.BenchReply(&topic, i, int64(i/kafkatest.BenchPartitions)))
		}
		b.StopTimer()
		after := heapInUse()
		st := x.Stats()
		if st.Located+st.Entries != n {
			b.Fatalf("%d located + %d held, want %d", st.Located, st.Entries, n)
		}
		// The replies held cost their accounting (their records' heap is
		// what reply-index-bytes bounds); the rest is the locations'.
		b.ReportMetric(float64(after-before-uint64(st.Bytes))/float64(st.Located), "heap-B/id")
		b.ReportMetric(float64(st.LocatedBytes)/float64(st.Located), "accounted-B/id")
		b.ReportMetric(float64(st.Bytes), "index-bytes")
		runtime.KeepAlive(x)
		b.StartTimer()
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkReplyAnswer is one answer to a replay whose reply is stored:
// "memory" finds it held (Watch, First, Close); "read-back" finds it
// evicted and waits for it to be read back from the embedded broker (each
// iteration asks for another evicted id). Run with a fixed count, as the
// evicted ids are written first:
//
//	go test ./kafkaio/replies -run '^$' -bench 'ReplyAnswer' -benchtime 300x
func BenchmarkReplyAnswer(b *testing.B) {
	broker := kafkatest.BrokerWith(b, []embedded.Topic{{Name: "replies"}})
	x, err := newIndex(Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": broker.Addr()},
		KafkaTimeout: 5 * time.Second, MaxBytes: 64 << 10,
	}, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	x.Add("replies", cidHeader)
	ctx := kafkatest.Ctx(b, 10*time.Minute)
	if err := x.WaitCaughtUp(ctx, "replies"); err != nil {
		b.Fatal(err)
	}
	const ids = 2000 // ~1.2 MB of replies into 64 KiB: all but the last ~100 evicted
	value := bytes.Repeat([]byte("v"), 500)
	rs := make([]testReply, ids)
	for i := range rs {
		rs[i] = testReply{ID: fmt.Sprint("order-", i), Value: value}
	}
	kafkatest.WriteReplies(b, broker.Addr(), "replies", rs...)
	last := x.Watch("replies", rs[ids-1].ID)
	waitFirst(b, ctx, last)
	last.Close()

	b.Run("memory", func(b *testing.B) {
		for b.Loop() {
			w := x.Watch("replies", rs[ids-1].ID)
			if r, _ := w.First(); r == nil {
				b.Fatal("the newest reply is not held")
			}
			w.Close()
		}
	})
	b.Run("read-back", func(b *testing.B) {
		before := x.Stats().ReadBacksFound
		i := 0
		for b.Loop() {
			if !x.Located("replies", rs[i].ID) {
				b.Fatalf("%s is not evicted: run with -benchtime Nx, N < %d", rs[i].ID, ids-200)
			}
			w := x.Watch("replies", rs[i].ID)
			waitFirst(b, ctx, w)
			w.Close()
			i++
		}
		st := x.Stats()
		b.ReportMetric(float64(st.ReadBacksFound-before), "read-backs")
		if st.Bytes > 64<<10 {
			b.Fatalf("the index holds %d bytes, over its bound", st.Bytes)
		}
	})
}

func waitFirst(b *testing.B, ctx interface{ Done() <-chan struct{} }, w *Watch) {
	b.Helper()
	for {
		r, changed := w.First()
		if r != nil {
			return
		}
		if err := w.Err(); err != nil {
			b.Fatal(err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			b.Fatal("no reply")
		}
	}
}
