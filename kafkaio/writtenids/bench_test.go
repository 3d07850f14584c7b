package writtenids

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/cputime"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// Benchmarks of the key index. Apply and the memory per id need no broker
// (the index is filled through apply, as its poll loop fills it); Sync and
// the read-back run against the embedded broker.

// benchKeyIndex is an index of topic "requests" without a consumer.
func benchIndex(maxKeys int) (*Index, *string) {
	topic := "requests"
	x := &Index{
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		now:    time.Now,
		topics: map[string]*keyTopic{},
		opts:   Options{Window: time.Hour, MaxKeys: maxKeys},
	}
	x.topics[topic] = &keyTopic{name: topic, headers: []string{cidHeader}, fpHeaders: []string{fpHeader}, entries: map[string]*keyEntry{}, keys: map[useKey]*keyEntry{}, started: true}
	return x, &topic
}

// BenchmarkKeyIndexApply is the index's CPU per request record read back
// (librdkafka's fetch and decoding excluded): "new-id" remembers a new id
// (at the MaxKeys bound, so the oldest is evicted), "same-id" counts one
// more record of a known id (a streamed call's next message).
func BenchmarkKeyIndexApply(b *testing.B) {
	const n = 100_000
	for _, same := range []bool{false, true} {
		name := "new-id"
		if same {
			name = "same-id"
		}
		b.Run(name, func(b *testing.B) {
			x, topic := benchIndex(n)
			msgs := make([]*kafka.Message, 1024)
			for i := range msgs {
				msgs[i] = kafkatest.BenchReply(topic, i, 0)
			}
			for i := range n {
				x.apply(kafkatest.BenchReply(topic, n+i, int64(i)))
			}
			if st := x.Stats(); st.Keys != n {
				b.Fatalf("%d ids, want %d", st.Keys, n)
			}
			if !same {
				// Every op a new id: the messages are made before the
				// timer starts.
				msgs = make([]*kafka.Message, b.N)
				for i := range msgs {
					msgs[i] = kafkatest.BenchReply(topic, 2*n+i, int64(n+i))
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				x.apply(msgs[i%len(msgs)])
			}
		})
	}
}

// BenchmarkKeyIndexMemoryPerID is the Go heap the index holds per
// remembered id (ids as the processor issues them: a 36-character key, a
// dash and 32 hex digits), measured after a GC with 100,000 ids: "keyed"
// records carry the fingerprint header as every keyed request's records do
// (the key's use and the fingerprint, 32 hex digits each), "no-fingerprint"
// records written before it existed.
func BenchmarkKeyIndexMemoryPerID(b *testing.B) {
	for _, keyed := range []bool{true, false} {
		name := "keyed"
		if !keyed {
			name = "no-fingerprint"
		}
		b.Run(name, func(b *testing.B) { memoryPerID(b, keyed) })
	}
}

func memoryPerID(b *testing.B, keyed bool) {
	const n = 100_000
	topic := "requests"
	msgs := make([]*kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafkatest.BenchReply(&topic, i, int64(i))
		if keyed {
			fp := fmt.Sprintf("%032x.%032x", uint64(i)*0x9e3779b97f4a7c15, uint64(i)*0xbf58476d1ce4e5b9)
			msgs[i].Headers = append(msgs[i].Headers, kafka.Header{Key: fpHeader, Value: []byte(fp)})
		}
	}
	var perID float64
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x, _ := benchIndex(2 * n)
		for _, m := range msgs {
			x.apply(m)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if st := x.Stats(); st.Keys != n {
			b.Fatalf("%d ids, want %d", st.Keys, n)
		}
		perID = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(x)
	}
	b.ReportMetric(perID, "B/id")
}

// BenchmarkKeyIndexSync is the cost a keyed write adds before it writes:
// one Sync of a topic the index is caught up with (one ListOffsets round
// trip to the broker, then nothing to read), on 1 and 12 partitions;
// "parallel" runs Syncs from every goroutine at once, which share look-ups
// (look-ups/op says how many ran per Sync).
func BenchmarkKeyIndexSync(b *testing.B) {
	for _, parts := range []int32{1, 12} {
		br := kafkatest.BrokerWith(b, []embedded.Topic{{Name: "requests", Partitions: parts}})
		x := testIndex(b, br.Addr(), Options{}, nil)
		ctx := kafkatest.Ctx(b, 10*time.Minute)
		if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
			b.Fatal(err)
		}
		name := "partitions=" + strconv.Itoa(int(parts))
		b.Run(name, func(b *testing.B) {
			for range b.N {
				if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			before := x.Stats().Syncs
			var failed atomic.Value
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
						failed.Store(err)
					}
				}
			})
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(x.Stats().Syncs-before)/float64(b.N), "look-ups/op")
		})
	}
}

// BenchmarkKeyIndexReadBack is the whole read-back of a request topic by a
// new index (a replica starting): 20,000 records of distinct ids on 3
// partitions, read by its consumer until Sync returns. ns/record is the
// wall time per record; cpu-ns/record the process's CPU time (user +
// system) per record, librdkafka's fetch and decoding included, and the
// embedded broker's serving too (an upper bound of the index's own).
func BenchmarkKeyIndexReadBack(b *testing.B) {
	const n = 20_000
	br := kafkatest.BrokerWith(b, []embedded.Topic{{Name: "requests", Partitions: 3}})
	rs := make([]testReply, n)
	for i := range rs {
		rs[i] = testReply{ID: kafkatest.BenchCID(i), Value: kafkatest.BenchValue(i), Partition: int32(i % 3)}
	}
	kafkatest.WriteReplies(b, br.Addr(), "requests", rs...)
	ctx := kafkatest.Ctx(b, 10*time.Minute)
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		before := cputime.Process()
		x := testIndex(b, br.Addr(), Options{}, nil)
		if err := x.Sync(ctx, "requests", cidHeader, fpHeader); err != nil {
			b.Fatal(err)
		}
		cpu += cputime.Process() - before
		if st := x.Stats(); st.Keys != n {
			b.Fatalf("%d ids read back, want %d", st.Keys, n)
		}
		b.StopTimer()
		x.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/n, "cpu-ns/record")
}
