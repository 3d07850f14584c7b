package views

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// diskBenchView is a ready view on disk (in dir) of n keys of 1 KiB values,
// loaded as a catch-up loads it (gathered batches); it reports the load.
func diskBenchView(tb testing.TB, dir string, n int, value func(int) []byte) (*View, time.Duration) {
	tb.Helper()
	v := newView("items", [16]byte{1}, benchPartitions, 2*time.Millisecond)
	cache := pebble.NewCache(storeCacheBytes)
	defer cache.Unref()
	s, _, err := openDiskStore(filepath.Join(dir, "items"), v.topicID, storeOptions{cache: cache, entries: newEntryCache(), logger: slog.Default(), bulkMin: bulkMinRecords, bulkSlot: make(chan struct{}, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	v.disk = s
	start := time.Now()
	v.gatherStore(int64(n))
	loadBench(v, n, value)
	if _, err := v.flushStore(); err != nil {
		tb.Fatal(err)
	}
	took := time.Since(start)
	v.markReady()
	if err := v.settleStore(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if st := v.Stats(); st.Keys != n {
		tb.Fatalf("view holds %d keys, want %d", st.Keys, n)
	}
	return v, took
}

func loadBench(v *View, n int, value func(int) []byte) {
	ts := time.UnixMilli(1_760_000_000_000)
	hs := []client.Header{{Key: "content-type", Value: []byte("application/json")}}
	for i := range n {
		v.apply(&client.Record{Topic: "items", Partition: int32(i % benchPartitions), Offset: int64(i / benchPartitions),
			Timestamp: ts, Key: []byte(benchKey(i)), Value: value(i), Headers: hs})
	}
}

// BenchmarkDiskViewGet compares single-key look-ups of a view of 1 KiB
// values in memory and on disk, over a hot set of 10,000 keys and over
// every key uniformly, and reports each store's load rate.
func BenchmarkDiskViewGet(b *testing.B) {
	const n = 200_000
	value := benchValues()
	mem := newView("items", [16]byte{1}, benchPartitions, 2*time.Millisecond)
	start := time.Now()
	loadBench(mem, n, value)
	memLoad := time.Since(start)
	disk, diskLoad := diskBenchView(b, b.TempDir(), n, value)
	defer disk.closeStore()
	b.Logf("load of %d keys × 1 KiB: memory %v (%.0f records/s), disk %v (%.0f records/s)",
		n, memLoad, n/memLoad.Seconds(), diskLoad, n/diskLoad.Seconds())
	for _, c := range []struct {
		name string
		v    *View
	}{{"memory", mem}, {"disk", disk}} {
		for _, set := range []int{10_000, n} {
			b.Run(c.name+"/keys="+strconv.Itoa(set), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				for b.Loop() {
					if _, ok := c.v.Get(benchKey(rng.IntN(set))); !ok {
						b.Fatal("not found")
					}
				}
			})
		}
	}
}

// BenchmarkDiskViewLoad is a first load into an empty store: 200,000 keys
// of 1 KiB applied as a catch-up applies them, in records a second, and
// the process's CPU per record until the store's compactions are done too
// (what the load costs the machine, the figure other work on it moves
// least).
func BenchmarkDiskViewLoad(b *testing.B) {
	n := benchLoadKeys()
	value := benchValues()
	for b.Loop() {
		cpu0 := processCPU(b)
		v, took := diskBenchView(b, b.TempDir(), n, value)
		// Done: no flush or compaction for 300 ms (the debt estimate need
		// never reach 0).
		for idle := 0; idle < 30; idle++ {
			if m := v.disk.db.Metrics(); m.Compact.NumInProgress > 0 || m.Flush.NumInProgress > 0 {
				idle = 0
			}
			time.Sleep(10 * time.Millisecond) // a benchmark's own wait, not a test's
		}
		cpu := processCPU(b) - cpu0
		v.closeStore()
		b.ReportMetric(float64(n)/took.Seconds(), "records/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/record")
	}
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchValues are the 1 KiB values of the benchmarks' views, by record:
// by default one value of the alphabet repeated, which compresses to a
// tenth; with BENCH_VALUES=random each record's value is its own window
// of a 64 MiB random buffer, which does not compress (snappy finds no
// match within a block of values).
func benchValues() func(int) []byte {
	if os.Getenv("BENCH_VALUES") != "random" {
		value := make([]byte, 1024)
		for i := range value {
			value[i] = byte('a' + i%26)
		}
		return func(int) []byte { return value }
	}
	const size = 64 << 20
	buf := make([]byte, size+1024)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], rng.Uint64())
	}
	return func(i int) []byte {
		at := (i * 1031) % size
		return buf[at : at+1024]
	}
}

// benchLoadKeys is the keys BenchmarkDiskViewLoad loads: BENCH_LOAD_KEYS,
// 200,000 by default.
func benchLoadKeys() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_LOAD_KEYS")); err == nil {
		return n
	}
	return 200_000
}
