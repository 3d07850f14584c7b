package replies

import (
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// Benchmarks of the reply index by correlation id, without Kafka: the index
// is built without its consumer and filled through apply, as the consumer's
// poll loop fills it.

var replySizes = []int{1_000, 100_000}

// benchReplyIndex is an index of topic "replies" holding one reply for each
// of n correlation ids, bounded to about n ids by MaxBytes.
func benchReplyIndex(tb testing.TB, n int) (*Index, *string) {
	tb.Helper()
	topic := "replies"
	x := &Index{
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		now:    time.Now,
		topics: map[string]*replyTopic{},
		opts:   Options{MaxBytes: 1 << 40, Retention: time.Hour},
		store:  store{maxBytes: 1 << 40, retention: time.Hour},
	}
	x.topics[topic] = &replyTopic{name: topic, headers: []string{cidHeader}, entries: map[string]*replyEntry{}}
	for i := range n {
		x.apply(kafkatest.BenchReply(&topic, i, int64(i/kafkatest.BenchPartitions)))
	}
	x.store.maxBytes = x.store.bytes // from now on an added id evicts the oldest
	if st := x.Stats(); st.Entries != n {
		tb.Fatalf("%d ids indexed, want %d", st.Entries, n)
	}
	return x, &topic
}

// BenchmarkReplyWatch is the request side of request-reply by correlation
// id: Watch (pin the id), State, Close. "answered" finds the id's reply (a
// replay or a follow-up GET), "pending" registers a new id that has none yet
// (every new request: the id is created, then removed by Close).
func BenchmarkReplyWatch(b *testing.B) {
	for _, n := range replySizes {
		x, topic := benchReplyIndex(b, n)
		cids := make([]string, 1009)
		for i := range cids {
			cids[i] = kafkatest.BenchCID(i * 7919 % n)
		}
		w := x.Watch(*topic, cids[3])
		if recs, _, _ := w.State(); len(recs) != 1 || string(recs[0].Key) != cids[3] {
			b.Fatalf("%d records for %s", len(recs), cids[3])
		}
		w.Close()
		name := "ids=" + strconv.Itoa(n)
		b.Run(name+"/answered", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				w := x.Watch(*topic, cids[i])
				w.State()
				w.Close()
				if i++; i == len(cids) {
					i = 0
				}
			}
		})
		b.Run(name+"/pending", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := x.Watch(*topic, "absent-0123456789abcdef0123456789abcdef")
				w.State()
				w.Close()
			}
			if x.Stats().Entries != n {
				b.Fatal("a pending watch left its id behind")
			}
		})
		b.Run(name+"/answered/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					w := x.Watch(*topic, cids[i])
					w.State()
					w.Close()
					if i++; i == len(cids) {
						i = 0
					}
				}
			})
		})
	}
}

// BenchmarkReplyApply indexes one reply of a new correlation id in a full
// index (which evicts the oldest id, keeping its location): the reply
// consumer's cost per record.
func BenchmarkReplyApply(b *testing.B) {
	for _, n := range replySizes {
		x, topic := benchReplyIndex(b, n)
		// Ids are used again only after more than n others were added, when
		// the index has evicted them: every apply indexes a new id.
		cids := make([][]byte, n+1009)
		for i := range cids {
			cids[i] = []byte(kafkatest.BenchCID(n + i))
		}
		m := kafkatest.BenchReply(topic, n, 0)
		b.Run("ids="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				m.Key, m.Headers[0].Value = cids[i], cids[i]
				x.apply(m)
				if i++; i == len(cids) {
					// The ids come again: forget their locations, so each
					// is new again (an evicted id's record would join its
					// location instead).
					b.StopTimer()
					x.topics[*topic].located = locatedReplies{}
					b.StartTimer()
					i = 0
				}
			}
			if st := x.Stats(); st.Entries > n || st.Evicted == 0 {
				b.Fatalf("%d ids, %d evicted", st.Entries, st.Evicted)
			}
		})
	}
}
