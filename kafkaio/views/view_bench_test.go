package views

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// Benchmarks of the view's read paths, without Kafka: the view is filled
// through apply, as the live consumer fills it. Sizes are those of the fetch targets (BENCHMARKS.md):
// 1,000 and 100,000 keys of 200-byte JSON values, on 12 partitions.

var viewSizes = []int{1_000, 100_000}

const (
	benchPartitions = 12
)

func benchKey(i int) string { return fmt.Sprintf("item-%06d", i) }

// benchView is a ready view of n keys, each written once.
func benchView(tb testing.TB, n int) *View {
	tb.Helper()
	v := newView("items", [16]byte{1, 2, 3, 4, 5, 6, 7, 8}, benchPartitions, 2*time.Millisecond)
	ts := time.UnixMilli(1_760_000_000_000)
	hs := []client.Header{{Key: "content-type", Value: []byte("application/json")}}
	for i := range n {
		p := int32(i % benchPartitions)
		v.apply(&client.Record{Topic: "items", Partition: p, Offset: int64(i / benchPartitions), Timestamp: ts,
			Key: []byte(benchKey(i)), Value: kafkatest.BenchValue(i), Headers: hs})
	}
	v.markReady()
	if st := v.Stats(); st.Keys != n {
		tb.Fatalf("view holds %d keys, want %d", st.Keys, n)
	}
	return v
}

// benchKeys are the keys a loop cycles through (a prime count, so parallel
// goroutines spread over the map rather than repeat one key).
func benchKeys(n int) []string {
	keys := make([]string, 0, 1009)
	for i := range 1009 {
		keys = append(keys, benchKey(i*7919%n))
	}
	return keys
}

// BenchmarkViewGet is the single-key look-up of a fetch (read lock + map).
func BenchmarkViewGet(b *testing.B) {
	for _, n := range viewSizes {
		v := benchView(b, n)
		keys := benchKeys(n)
		if e, ok := v.Get(keys[1]); !ok || e.Key != keys[1] || len(e.Value) != kafkatest.BenchValueSize {
			b.Fatalf("Get(%q) = %v, %v", keys[1], e, ok)
		}
		if _, ok := v.Get("absent"); ok {
			b.Fatal("Get of an absent key found it")
		}
		b.Run("keys="+strconv.Itoa(n)+"/hit", func(b *testing.B) {
			b.ReportAllocs()
			i, found := 0, 0
			for b.Loop() {
				if _, ok := v.Get(keys[i]); ok {
					found++
				}
				if i++; i == len(keys) {
					i = 0
				}
			}
			if found == 0 {
				b.Fatal("nothing found")
			}
		})
		b.Run("keys="+strconv.Itoa(n)+"/miss", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := v.Get("absent"); ok {
					b.Fatal("found")
				}
			}
		})
		b.Run("keys="+strconv.Itoa(n)+"/hit/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, ok := v.Get(keys[i]); !ok {
						panic("key not found") // b.Fatal must not be called from RunParallel's goroutines
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
			})
		})
	}
}

// BenchmarkViewScan walks every entry, as a merged or header-filtered fetch
// does when its rendered answer is not cached (after each write).
func BenchmarkViewScan(b *testing.B) {
	for _, n := range viewSizes {
		v := benchView(b, n)
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			var bytes int
			count := 0
			for b.Loop() {
				count = 0
				v.Scan(func(e Entry) bool {
					count++
					bytes += len(e.Value)
					return true
				})
			}
			if count != n {
				b.Fatalf("scanned %d entries, want %d", count, n)
			}
		})
	}
}

// BenchmarkViewWatchKey registers a key watch and stops it: what a long poll
// does per wait (write lock twice, a channel when nobody waits on the key).
func BenchmarkViewWatchKey(b *testing.B) {
	v := benchView(b, 1_000)
	keys := benchKeys(1_000)
	w := v.WatchKey(keys[0])
	w.Stop()
	select {
	case <-w.C:
		b.Fatal("the watch fired without a write")
	default:
	}
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v.WatchKey(keys[0]).Stop()
		}
	})
	b.Run("shared", func(b *testing.B) {
		// Another waiter holds the key: the channel exists already.
		hold := v.WatchKey(keys[0])
		defer hold.Stop()
		b.ReportAllocs()
		for b.Loop() {
			v.WatchKey(keys[0]).Stop()
		}
	})
	b.Run("fresh/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				v.WatchKey(keys[i]).Stop()
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	})
}

// BenchmarkHoldView takes and releases the hold every fetch takes
// (Client.HoldView of an open, caught-up view, then View.Release).
func BenchmarkHoldView(b *testing.B) {
	v := benchView(b, 1_000)
	c := &Views{views: map[string]*viewSlot{"items": {done: make(chan struct{}), view: v, pinned: true}}}
	close(c.views["items"].done)
	ctx := context.Background()
	got, err := c.HoldView(ctx, "items", time.Second)
	if err != nil || got != v {
		b.Fatalf("HoldView = %v, %v", got, err)
	}
	if _, held := v.idleSince(); !held {
		b.Fatal("not held")
	}
	v.Release()
	if _, held := v.idleSince(); held {
		b.Fatal("still held")
	}
	hold := func() {
		view, _ := c.HoldView(ctx, "items", time.Second)
		view.Release()
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hold()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				hold()
			}
		})
	})
}

// BenchmarkSingleKeyFetchLocks is the kafkaio part of one single-key fetch
// that is answered at once (processor/httpkafka Fetch.Serve and answer):
// Client.HoldView, View.Version, View.Get, View.Release. It
// shows what the client's and the view's locks cost together, serially and
// under concurrent fetches of the same view.
func BenchmarkSingleKeyFetchLocks(b *testing.B) {
	v := benchView(b, 100_000)
	keys := benchKeys(100_000)
	c := &Views{views: map[string]*viewSlot{"items": {done: make(chan struct{}), view: v, pinned: true}}}
	close(c.views["items"].done)
	ctx := context.Background()
	fetch := func(key string) bool {
		view, err := c.HoldView(ctx, "items", time.Second)
		if err != nil {
			panic(err)
		}
		_ = view.Version()
		_, ok := view.Get(key)
		view.Release()
		return ok
	}
	if !fetch(keys[0]) {
		b.Fatal("key not found")
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			fetch(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				fetch(keys[i])
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	})
}

// BenchmarkClientView is the look-up of an open view by topic (the client's
// mutex), alone.
func BenchmarkClientView(b *testing.B) {
	v := newView("items", [16]byte{1}, 1, time.Millisecond)
	v.markReady()
	c := &Views{views: map[string]*viewSlot{"items": {done: make(chan struct{}), view: v, pinned: true}}}
	close(c.views["items"].done)
	ctx := context.Background()
	if got, err := c.View(ctx, "items"); err != nil || got != v {
		b.Fatalf("View = %v, %v", got, err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = c.View(ctx, "items")
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = c.View(ctx, "items")
			}
		})
	})
}

// BenchmarkViewApply folds one record (an update of an existing key, 200 B,
// one header) into the view: the live consumer's cost per record.
func BenchmarkViewApply(b *testing.B) {
	for _, n := range viewSizes {
		v := benchView(b, n)
		ts := time.UnixMilli(1_760_000_000_000)
		hs := []client.Header{{Key: "content-type", Value: []byte("application/json")}}
		recs := make([]*client.Record, 1009)
		for i := range recs {
			k := i * 7919 % n
			recs[i] = &client.Record{Topic: "items", Partition: int32(k % benchPartitions), Timestamp: ts,
				Key: []byte(benchKey(k)), Value: kafkatest.BenchValue(k), Headers: hs}
		}
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			before := v.Version()
			off := int64(n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := recs[i]
				r.Offset = off
				off++
				v.apply(r)
				if i++; i == len(recs) {
					i = 0
				}
			}
			if v.Version() == before || v.Stats().Keys != n {
				b.Fatalf("version %d → %d, %d keys", before, v.Version(), v.Stats().Keys)
			}
		})
	}
}

// BenchmarkEntryHeader looks up a record header of an entry, as a
// single-key fetch does twice per answer (etag, content-type) and a
// header-filtered fetch once per entry and filter.
func BenchmarkEntryHeader(b *testing.B) {
	v := newView("items", [16]byte{1}, 1, time.Millisecond)
	v.apply(&client.Record{Topic: "items", Key: []byte("k"), Value: kafkatest.BenchValue(0), Timestamp: time.UnixMilli(1), Headers: []client.Header{
		{Key: "content-type", Value: []byte("application/json")},
		{Key: "colour", Value: []byte("red")},
		{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	}})
	e, _ := v.Get("k")
	for _, tc := range []struct{ name, header, want string }{
		{"first", "content-type", "application/json"},
		{"absent", "etag", ""},
	} {
		if got, ok := e.Header(tc.header); string(got) != tc.want || ok != (tc.want != "") {
			b.Fatalf("Header(%q) = %q, %v", tc.header, got, ok)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.Header(tc.header)
			}
		})
	}
}

// BenchmarkFetchAcrossViews is the kafkaio part of a single-key fetch
// (hold, Get, Release) cycling over n views of one key each, as one GET to
// each of n routes does: the view found by topic in the client's map
// (HoldView) or kept by the route's handle (Handle.Hold).
func BenchmarkFetchAcrossViews(b *testing.B) {
	for _, n := range []int{1, 1_000} {
		c := &Views{views: map[string]*viewSlot{}, handles: map[string]*Handle{}}
		topics := make([]string, n)
		handles := make([]*Handle, n)
		for i := range n {
			topics[i] = fmt.Sprintf("topic-%04d", i)
			v := newView(topics[i], [16]byte{1}, 1, time.Millisecond)
			v.apply(&client.Record{Topic: topics[i], Key: []byte("k"), Value: kafkatest.BenchValue(i), Timestamp: time.UnixMilli(1)})
			v.markReady()
			s := &viewSlot{done: make(chan struct{}), view: v, pinned: true}
			close(s.done)
			c.views[topics[i]] = s
			handles[i] = c.Handle(topics[i])
		}
		ctx := context.Background()
		fetch := func(hold func(i int) (*View, error), i int) {
			v, err := hold(i)
			if err != nil {
				panic(err)
			}
			if _, ok := v.Get("k"); !ok {
				panic("key not found")
			}
			v.Release()
		}
		for _, way := range []struct {
			name string
			hold func(i int) (*View, error)
		}{
			{"by-topic", func(i int) (*View, error) { return c.HoldView(ctx, topics[i], time.Second) }},
			{"handle", func(i int) (*View, error) { return handles[i].Hold(ctx, time.Second) }},
		} {
			b.Run("views="+strconv.Itoa(n)+"/"+way.name, func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					fetch(way.hold, i)
					if i++; i == n {
						i = 0
					}
				}
			})
		}
	}
}
