package views

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/faultfs"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// diskViews opens Views keeping every view on disk under dir, logging to
// sink (optional); a first load is in bulk from bulk records on (0: the
// default's).
func diskViews(t *testing.T, addr, dir string, sink *kafkatest.LogSink, fs vfs.FS, bulk ...int64) *Views {
	t.Helper()
	opts := Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": addr}, KafkaTimeout: 5 * time.Second,
		DiskStore: func(string) bool { return true }, StoreDir: dir, StoreFS: fs,
	}
	if len(bulk) > 0 {
		opts.BulkLoadRecords = bulk[0]
	}
	if sink != nil {
		opts.Logger = slog.New(sink)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// model is what a view must hold: the latest value per key, "" none.
type model map[string]string

// produceModel writes n records over keys k0..k(keys-1) of two partitions,
// every seventh a tombstone, and folds them into m.
func produceModel(t *testing.T, addr, topic string, from, n, keys int, m model) {
	t.Helper()
	recs := make([]kafkatest.Rec, 0, n)
	for i := from; i < from+n; i++ {
		k := fmt.Sprintf("k%d", i%keys)
		r := kafkatest.Rec{Key: []byte(k), Partition: int32(i % keys % 2)}
		if i%7 == 3 {
			delete(m, k)
		} else {
			r.Value = fmt.Appendf(nil, "%s-%d", k, i)
			m[k] = string(r.Value)
		}
		recs = append(recs, r)
	}
	kafkatest.Produce(t, addr, topic, recs...)
}

// holds checks that v holds exactly m.
func holds(t *testing.T, v *View, m model) {
	t.Helper()
	got := model{}
	v.Scan(func(e Entry) bool { got[e.Key] = string(e.Value); return true })
	if len(got) != len(m) {
		t.Errorf("the view holds %d keys, want %d", len(got), len(m))
	}
	for k, want := range m {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
		if e, ok := v.Get(k); !ok || string(e.Value) != want {
			t.Errorf("Get(%s) = %q, %v; want %q", k, e.Value, ok, want)
		}
	}
	if st := v.Stats(); st.Keys != len(m) {
		t.Errorf("stats count %d keys, want %d", st.Keys, len(m))
	}
}

// A view on disk opened again (a restart) resumes from the offsets it
// stored: it reads only what was written since, and holds what a view read
// from the start would.
func TestDiskViewResumesFromItsOffsets(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Partitions: 2, Compact: true})
	dir := t.TempDir()
	m := model{}
	produceModel(t, b.Addr(), "items", 0, 200, 50, m)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	c := diskViews(t, b.Addr(), dir, nil, nil)
	v, err := c.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	holds(t, v, m)
	if v.caughtUp != 200 {
		t.Fatalf("the first catch-up applied %d records, want 200", v.caughtUp)
	}
	c.Close()

	produceModel(t, b.Addr(), "items", 200, 30, 50, m)
	sink := &kafkatest.LogSink{}
	c2 := diskViews(t, b.Addr(), dir, sink, nil)
	v2, err := c2.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	if v2.caughtUp != 30 {
		t.Errorf("the catch-up after the restart applied %d records, want the 30 written since", v2.caughtUp)
	}
	if !sink.Has("a view resumes from its store on disk") {
		t.Errorf("no log line of the resumption: %v", sink.Messages())
	}
	holds(t, v2, m)
	// And it follows the topic live, as any view does.
	followsLive(ctx, t, b.Addr(), v2, m, "a live write")
}

// followsLive writes k1 to the view's topic and checks it wakes the key's
// waiter and the view then holds m.
func followsLive(ctx context.Context, t *testing.T, addr string, v *View, m model, what string) {
	t.Helper()
	w := v.WatchKey("k1")
	defer w.Stop()
	produceModel(t, addr, v.Topic(), 1001, 1, 1000, m) // k1
	select {
	case <-w.C:
	case <-ctx.Done():
		t.Fatalf("%s did not wake the key's waiter", what)
	}
	holds(t, v, m)
}

// A first load into an empty store goes in bulk (no compaction while it
// loads) and, once the view is ready, ends with one compaction: no table
// is then left in level 0 (a store loaded as usual keeps its one flushed
// table there: four are needed before it compacts), the store has its
// usual options again and follows live writes, and a restart resumes from
// its offsets. A first load below the threshold is not in bulk.
func TestDiskViewFirstLoadInBulk(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Partitions: 2, Compact: true},
		embedded.Topic{Name: "small", Partitions: 2, Compact: true})
	dir := t.TempDir()
	m, small := model{}, model{}
	produceModel(t, b.Addr(), "items", 0, 3000, 500, m)
	produceModel(t, b.Addr(), "small", 0, 999, 500, small)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	sink := &kafkatest.LogSink{}
	c := diskViews(t, b.Addr(), dir, sink, nil, 1000)
	level0 := func(v *View) (int64, bool) {
		v.mu.RLock()
		defer v.mu.RUnlock()
		return v.disk.db.Metrics().Levels[0].TablesCount, v.disk.bulk
	}
	v, err := c.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	holds(t, v, m) // ready before its compaction: all there
	if sink.WaitCount(ctx, "a view's first load into its store on disk is compacted", 1) != 1 {
		t.Fatalf("no log line of the first load's compaction: %v", sink.Messages())
	}
	holds(t, v, m)
	if n, bulk := level0(v); n != 0 || bulk {
		t.Errorf("after a first load in bulk: %d tables in level 0 (want 0), still in bulk: %v", n, bulk)
	}
	vs, err := c.View(ctx, "small")
	if err != nil {
		t.Fatal(err)
	}
	holds(t, vs, small)
	vs.mu.RLock()
	if vs.disk.bulkLoaded || !v.disk.bulkLoaded {
		t.Errorf("first loads in bulk: of 999 records (below the bulk's 1,000) %v, want false; of 3,000 %v, want true", vs.disk.bulkLoaded, v.disk.bulkLoaded)
	}
	vs.mu.RUnlock()
	followsLive(ctx, t, b.Addr(), v, m, "a live write after the bulk load")
	c.Close()

	c2 := diskViews(t, b.Addr(), dir, nil, nil, 1000)
	v2, err := c2.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	if v2.caughtUp != 0 {
		t.Errorf("the restart after the bulk load applied %d records, want none", v2.caughtUp)
	}
	holds(t, v2, m)
}

// A store of another generation of its topic (deleted and created again
// while the processor was down) is emptied and read again, never mixed.
func TestDiskViewOfARecreatedTopicIsRebuilt(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "gen", Partitions: 2, Compact: true})
	dir := t.TempDir()
	ctx := kafkatest.Ctx(t, 30*time.Second)
	produceModel(t, b.Addr(), "gen", 0, 100, 40, model{})
	c := diskViews(t, b.Addr(), dir, nil, nil)
	if _, err := c.View(ctx, "gen"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	kafkatest.DeleteTopic(t, b.Addr(), "gen")
	if err := b.CreateTopics(embedded.Topic{Name: "gen", Partitions: 2, Compact: true}); err != nil {
		t.Fatal(err)
	}
	m := model{}
	produceModel(t, b.Addr(), "gen", 1000, 10, 5, m)
	sink := &kafkatest.LogSink{}
	v, err := diskViews(t, b.Addr(), dir, sink, nil).View(ctx, "gen")
	if err != nil {
		t.Fatal(err)
	}
	holds(t, v, m)
	if !sink.Has("a view's store on disk is rebuilt from the topic") {
		t.Errorf("no log line of the rebuild: %v", sink.Messages())
	}
}

// A store that does not open (its manifest overwritten) is emptied and
// read again from the topic, with a log line.
func TestCorruptDiskStoreIsRebuilt(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Partitions: 2, Compact: true})
	dir := t.TempDir()
	ctx := kafkatest.Ctx(t, 30*time.Second)
	m := model{}
	produceModel(t, b.Addr(), "items", 0, 100, 40, m)
	c := diskViews(t, b.Addr(), dir, nil, nil)
	if _, err := c.View(ctx, "items"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	manifests, err := filepath.Glob(filepath.Join(dir, "items", "MANIFEST-*"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no manifest in the store: %v", err)
	}
	for _, f := range manifests {
		if err := os.WriteFile(f, []byte("not a manifest"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sink := &kafkatest.LogSink{}
	v, err := diskViews(t, b.Addr(), dir, sink, nil).View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	holds(t, v, m)
	if v.caughtUp != 100 {
		t.Errorf("the rebuild applied %d records, want all 100", v.caughtUp)
	}
	if !sink.Has("a view's store on disk is rebuilt from the topic") {
		t.Errorf("no log line of the rebuild: %v", sink.Messages())
	}
}

// readiness records the last report of each condition.
type readinessLog struct{ ch chan string }

func (r readinessLog) Set(name string, ready bool, reason string) {
	r.ch <- fmt.Sprintf("%s ready=%v %s", name, ready, reason)
}

// fillingFS is the operating system's file system, but for the free space
// it reports: none while full is set.
type fillingFS struct {
	vfs.FS
	full atomic.Bool
}

func (f *fillingFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	u, err := f.FS.GetDiskUsage(path)
	if f.full.Load() {
		u.AvailBytes = 0
	}
	return u, err
}

// A full disk takes a view on disk out of service, with the reason on the
// readiness, and answers nothing wrong meanwhile; once the disk has room
// the view catches up again from what its store holds. The full disk is a
// fake: a file system that reports no free space while full is set (the
// store stops writing before the disk is full: pebble takes a write its
// log cannot take as fatal).
func TestFullDiskTakesADiskViewOutOfService(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Partitions: 2, Compact: true})
	fs := &fillingFS{FS: vfs.Default}
	full := &fs.full
	ready := readinessLog{ch: make(chan string, 100)}
	c, err := New(Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()}, KafkaTimeout: 5 * time.Second,
		DiskStore: func(string) bool { return true }, StoreDir: t.TempDir(), StoreFS: fs, Readiness: ready,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := kafkatest.Ctx(t, 60*time.Second)
	m := model{}
	produceModel(t, b.Addr(), "items", 0, 20, 10, m)
	c.Warm("items")
	v, err := c.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	holds(t, v, m)
	w := v.WatchKey("never")
	defer w.Stop()

	full.Store(true)
	// The free space is looked at every second at most: write until the
	// view notices.
	for i := 0; v.Gone() == nil; i++ {
		produceModel(t, b.Addr(), "items", 100+i, 1, 10, m)
		select {
		case <-w.C:
		case <-ctx.Done():
			t.Fatal("the view was not taken out of service on a full disk")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := v.Gone(); !errors.Is(err, ErrStoreFailed) {
		t.Fatalf("the view is gone for %v, want ErrStoreFailed", err)
	}
	if _, ok := v.Get("k1"); ok {
		t.Error("a view taken out of service still answers")
	}
	for {
		select {
		case s := <-ready.ch:
			if s != "kafka kafka0 view items ready=false "+v.Gone().Error() {
				continue
			}
		case <-ctx.Done():
			t.Fatal("the readiness was not told why the view is out of service")
		}
		break
	}
	full.Store(false)
	for {
		select {
		case s := <-ready.ch:
			if s != "kafka kafka0 view items ready=true " {
				continue
			}
		case <-ctx.Done():
			t.Fatal("the view did not come back once the disk had room")
		}
		break
	}
	v2, err := c.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	holds(t, v2, m)
}

// killChildEnv tells this test binary to run as the child of
// TestDiskViewKilledMidCatchUp: a broker address and a store directory.
const killChildEnv = "KAFKA_EXT_PROC_VIEWS_KILL_CHILD"

// A process killed (SIGKILL) in the middle of a catch-up leaves a store
// whose offsets cover exactly what it holds: every entry is the latest
// record of its key below its partition's stored offset, and nothing else
// is there. The next start resumes from those offsets and holds the whole
// topic.
func TestDiskViewKilledMidCatchUp(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Partitions: 2, Compact: true})
	const n, keys = 12000, 3000
	var written []kafkatest.Rec
	m := model{}
	for from := 0; from < n; from += 1000 {
		recs := make([]kafkatest.Rec, 0, 1000)
		for i := from; i < from+1000; i++ {
			k := fmt.Sprintf("k%d", i%keys)
			r := kafkatest.Rec{Key: []byte(k), Partition: int32(i % keys % 2), Value: fmt.Appendf(nil, "%s-%d-%0900d", k, i, 0)}
			if i%7 == 3 {
				r.Value = nil
				delete(m, k)
			} else {
				m[k] = string(r.Value)
			}
			recs = append(recs, r)
		}
		kafkatest.Produce(t, b.Addr(), "items", recs...)
		written = append(written, recs...)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDiskViewKilledChild$", "-test.timeout", "5m")
	cmd.Env = append(os.Environ(), killChildEnv+"="+b.Addr()+" "+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	mid := false
	for !mid && sc.Scan() {
		mid = sc.Text() == "MID CATCH-UP"
	}
	if !mid {
		t.Fatal("the child ended without reaching the middle of its catch-up")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// The store as the killed process left it.
	s, err := openPebble(filepath.Join(dir, "items"), storeOptions{logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if cnt, err := s.read(countKey); err != nil || len(cnt) != 8 {
		t.Fatalf("the store's key count: %v %v", cnt, err)
	} else {
		s.count = int64(binary.LittleEndian.Uint64(cnt))
	}
	pos, err := s.positions(2)
	if err != nil {
		t.Fatal(err)
	}
	if pos[0]+pos[1] == 0 || pos[0]+pos[1] >= n {
		t.Fatalf("the store's offsets are %v: the kill did not fall within the catch-up", pos)
	}
	// What a view holds having read each partition below pos.
	prefix := model{}
	next := make([]int64, 2)
	for _, r := range written {
		off := next[r.Partition]
		next[r.Partition]++
		if off >= pos[r.Partition] {
			continue
		}
		if r.Value == nil {
			delete(prefix, string(r.Key))
		} else {
			prefix[string(r.Key)] = string(r.Value)
		}
	}
	got := model{}
	s.scan(func(e Entry) bool {
		if e.Offset >= pos[e.Partition] {
			t.Errorf("%s at %d@%d is beyond its partition's stored offset %d", e.Key, e.Partition, e.Offset, pos[e.Partition])
		}
		got[e.Key] = string(e.Value)
		return true
	})
	if len(got) != len(prefix) || int(s.count) != len(prefix) {
		t.Errorf("the store holds %d keys (counted %d), want %d", len(got), s.count, len(prefix))
	}
	for k, want := range prefix {
		if got[k] != want {
			t.Errorf("%s: the store holds %.20q, want %.20q", k, got[k], want)
		}
	}
	s.close()
	if t.Failed() {
		return
	}

	ctx := kafkatest.Ctx(t, 60*time.Second)
	v, err := diskViews(t, b.Addr(), dir, nil, nil).View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	if want := n - int(pos[0]+pos[1]); v.caughtUp != want {
		t.Errorf("the restart applied %d records, want the %d its store's offsets did not cover", v.caughtUp, want)
	}
	holds(t, v, m)
}

// TestDiskViewKilledChild is the child process of
// TestDiskViewKilledMidCatchUp: it catches a view on disk up and says so
// once part of it is applied, until killed.
func TestDiskViewKilledChild(t *testing.T) {
	env := os.Getenv(killChildEnv)
	if env == "" {
		t.Skip("run by TestDiskViewKilledMidCatchUp")
	}
	var addr, dir string
	if _, err := fmt.Sscan(env, &addr, &dir); err != nil {
		t.Fatal(err)
	}
	c := diskViews(t, addr, dir, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = c.View(ctx, "items") }()
	for !committed(c.liveView("items")) {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("MID CATCH-UP")
	<-context.Background().Done() // until SIGKILL
}

// committed tells whether v's store has made records of its catch-up
// durable: a memtable of them (4 MiB: some 4,000 records of 1 KiB) flushed
// to a table.
func committed(v *View) bool {
	if v == nil {
		return false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.disk == nil || v.disk.db == nil {
		return false
	}
	// The first flush is the meta's, as the store was created.
	return v.disk.db.Metrics().Flush.Count >= 2
}

// A view on disk whose store cannot read says so (ErrStoreFailed) rather
// than answering "no such record" or a part of the view: a client would
// be told a record it has does not exist, or be given a merged answer
// missing records.
func TestDiskViewReadFailureIsAnErrorNotAnAbsence(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Partitions: 2, Compact: true})
	dir := t.TempDir()
	ctx := kafkatest.Ctx(t, 30*time.Second)
	// Values large enough that the keys span many table blocks: a key's
	// block is then read from the file, not from one cached while the
	// store opened.
	recs := make([]kafkatest.Rec, 400)
	for i := range recs {
		recs[i] = kafkatest.Rec{Key: fmt.Appendf(nil, "k%03d", i), Value: make([]byte, 1024), Partition: int32(i % 2)}
	}
	kafkatest.Produce(t, b.Addr(), "items", recs...)
	first := diskViews(t, b.Addr(), dir, nil, nil)
	if _, err := first.View(ctx, "items"); err != nil {
		t.Fatal(err)
	}
	first.Close() // flushes the store into table files
	fs := faultfs.New()
	c := diskViews(t, b.Addr(), dir, nil, fs)
	v, err := c.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	if e, ok, err := v.Lookup("k000"); err != nil || !ok || len(e.Value) != 1024 {
		t.Fatalf("before the failure: %v, %v", ok, err)
	}
	if n := c.Stats().ReadFailures; n != 0 {
		t.Fatalf("%d read failures counted before any", n)
	}
	fs.Fail.Store(true)
	if _, ok, err := v.Lookup("k399"); !errors.Is(err, ErrStoreFailed) || ok {
		t.Errorf("Lookup of a key whose block cannot be read: found %v, err %v; want ErrStoreFailed", ok, err)
	}
	n := 0
	if err := v.Scan(func(Entry) bool { n++; return true }); !errors.Is(err, ErrStoreFailed) {
		t.Errorf("Scan with unreadable blocks: %v after %d entries; want ErrStoreFailed", err, n)
	}
	if n := c.Stats().ReadFailures; n != 2 {
		t.Errorf("%d read failures counted, want 2 (the look-up and the scan)", n)
	}
	fs.Fail.Store(false)
	if _, ok, err := v.Lookup("k399"); err != nil || !ok {
		t.Errorf("after the failure: %v, %v", ok, err)
	}
}

// A record held aside for conversion (its schema cannot be had yet) lives
// only in the heap: a view on disk stores no position past it, so a
// restart reads it again and serves it once it converts, rather than
// losing it behind a stored position.
func TestDiskViewRestartKeepsHeldRecords(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "items", Partitions: 1, Compact: true})
	dir := t.TempDir()
	ctx := kafkatest.Ctx(t, 30*time.Second)
	var down atomic.Bool
	open := func() *Views {
		c, err := New(Options{
			Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()}, KafkaTimeout: 5 * time.Second,
			DiskStore: func(string) bool { return true }, StoreDir: dir,
			Converters: func(string) Converter {
				return func(r *client.Record) error {
					if down.Load() && string(r.Key) == "held" {
						return fmt.Errorf("%w: the registry is down", ErrLater)
					}
					return nil
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	down.Store(true)
	kafkatest.Produce(t, b.Addr(), "items",
		kafkatest.Rec{Key: []byte("a"), Value: []byte("1")},
		kafkatest.Rec{Key: []byte("held"), Value: []byte("2")},
		kafkatest.Rec{Key: []byte("b"), Value: []byte("3")})
	first := open()
	v, err := first.View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Get("held"); ok || v.Position(0) != 3 {
		t.Fatalf("before the restart: held served %v, position %d (want not served, 3)", ok, v.Position(0))
	}
	first.Close() // the registry still down
	down.Store(false)
	v, err = open().View(ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "1", "held": "2", "b": "3"} {
		if e, ok := v.Get(k); !ok || string(e.Value) != want {
			t.Errorf("after the restart, %s: %q %v, want %q (a held record was lost behind the stored position)", k, e.Value, ok, want)
		}
	}
}

// storeView is a view of a topic of partitions partitions on a disk store
// of its own, written through View.apply with no broker; a first load of
// bulkMin records or more goes in bulk (0: none does).
func storeView(t *testing.T, partitions int, bulkMin int64) *View {
	t.Helper()
	v, _ := storeViewIn(t, filepath.Join(t.TempDir(), "items"), partitions, bulkMin, nil)
	return v
}

// storeViewIn is storeView with its store in dir, written with compression
// (nil: the store's own); rebuilt is openDiskStore's.
func storeViewIn(t *testing.T, dir string, partitions int, bulkMin int64, compression *sstable.CompressionProfile) (v *View, rebuilt string) {
	t.Helper()
	v = newView("items", [16]byte{1}, partitions, 2*time.Millisecond)
	cache := pebble.NewCache(1 << 20)
	t.Cleanup(cache.Unref)
	so := storeOptions{cache: cache, entries: newEntryCache(), logger: slog.Default(), bulkMin: bulkMin, bulkSlot: make(chan struct{}, 1), compression: compression}
	s, rebuilt, err := openDiskStore(dir, v.topicID, so)
	if err != nil {
		t.Fatal(err)
	}
	v.disk = s
	t.Cleanup(v.closeStore) // before the cache's Unref: cleanups run last first
	return v, rebuilt
}

// The entry cache answers a disk view's hot keys from the heap: it must
// never answer an entry the store no longer holds. A write removes its key;
// a look-up while a catch-up's batch is pending reads the store as it was
// before the batch and must not cache that; a store emptied is a new
// generation.
func TestDiskViewEntryCacheFollowsWrites(t *testing.T) {
	v := storeView(t, 1, 0)
	off := int64(0)
	write := func(value string) {
		t.Helper()
		r := &client.Record{Topic: "items", Key: []byte("k"), Offset: off, Timestamp: time.UnixMilli(1)}
		if value != "" {
			r.Value = []byte(value)
		}
		off++
		v.apply(r)
	}
	want := func(step, value string) {
		t.Helper()
		e, ok, err := v.Lookup("k")
		switch {
		case err != nil:
			t.Fatalf("%s: %v", step, err)
		case value == "" && ok:
			t.Fatalf("%s: found %q, want absent", step, e.Value)
		case value != "" && (!ok || string(e.Value) != value):
			t.Fatalf("%s: %q (found %v), want %q", step, e.Value, ok, value)
		}
	}
	write("v1")
	want("first write", "v1")
	want("cached", "v1")
	write("v2")
	want("a live write", "v2")
	v.gatherStore(10)
	write("v3")
	want("v3 pending in a catch-up's batch", "v2")
	if _, err := v.flushStore(); err != nil {
		t.Fatal(err)
	}
	want("the batch committed", "v3")
	write("")
	want("a tombstone", "")
	write("v4")
	want("written again", "v4")
	v.mu.Lock()
	err := v.disk.clear()
	v.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	want("the store emptied", "")
}

// A catch-up's batch commits in a goroutine of its own while the next
// gathers: a key written again right after its batch was handed over
// reads its head from the batch in flight, so it is counted once and a
// record that loses to it (an older timestamp from another partition)
// does not replace it. Whether or not the commit has finished by then,
// the view is the same.
func TestDiskViewBatchInFlightIsReadThrough(t *testing.T) {
	v := storeView(t, 2, 0)
	v.gatherStore(10_000)
	value := make([]byte, 1024)
	var off int64
	for range 4 {
		// Just over a batch each round: the last keys written, k0 first,
		// are in the batch handed over.
		for i := range diskBatchBytes/1024 + 8 {
			v.apply(&client.Record{Topic: "items", Partition: 0, Offset: off, Timestamp: time.UnixMilli(2000),
				Key: []byte(fmt.Sprintf("k%d", i)), Value: value})
			off++
		}
		v.apply(&client.Record{Topic: "items", Partition: 1, Offset: off, Timestamp: time.UnixMilli(1000),
			Key: []byte("k0"), Value: []byte("older")})
	}
	if _, err := v.flushStore(); err != nil {
		t.Fatal(err)
	}
	if n, want := v.Stats().Keys, diskBatchBytes/1024+8; n != want {
		t.Errorf("the view counts %d keys, want %d", n, want)
	}
	if e, ok, err := v.Lookup("k0"); err != nil || !ok || e.Partition != 0 {
		t.Errorf("k0: %+v %v %v, want partition 0's record (the other's is older)", e, ok, err)
	}
}

// The size a view takes on disk counts its values: with 3,000 values of
// 1 KiB that do not compress stored, it is at least their bytes.
func TestDiskViewBytesCountItsValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 3000
	got := storedBytes(t, n, func(int) []byte {
		value := make([]byte, 1024)
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		return value
	})
	if got < n*1024 {
		t.Errorf("the view takes %d bytes on disk, want at least the %d of its values", got, n*1024)
	}
}

// Values that compress are stored compressed: the store tries compression
// on one block in ten only while its blocks stop shrinking, and 3,000
// JSON documents of 1 KiB, alike but for their numbers, shrink.
func TestDiskViewCompressesValuesThatCompress(t *testing.T) {
	const n = 3000
	got := storedBytes(t, n, func(i int) []byte {
		doc := fmt.Sprintf(`{"id":%d,"name":"item %d","status":"in stock","notes":"`, i, i)
		return []byte(doc + strings.Repeat("lorem ipsum ", (1024-len(doc)-2)/12) + `"}`)
	})
	if got > n*1024/4 {
		t.Errorf("the view takes %d bytes on disk for %d bytes of values that compress, want at most a quarter", got, n*1024)
	}
}

// A store written with pebble's snappy on every block, as builds before
// the store's own compression profile wrote it, opens under that profile
// with no rebuild and answers its records; so does a store written under
// the profile and opened with snappy (a rollback). Either way the store's
// OPTIONS file parses with pebble's own parser, which its tools use to
// open a store.
func TestDiskStoreOpensAcrossCompressionProfiles(t *testing.T) {
	const n = 3000
	doc := func(i int) []byte {
		d := fmt.Sprintf(`{"id":%d,"notes":"`, i)
		return []byte(d + strings.Repeat("lorem ipsum ", 80) + `"}`)
	}
	for _, c := range []struct {
		name        string
		write, read *sstable.CompressionProfile
	}{
		{"written with snappy, opened with the store's", sstable.SnappyCompression, nil},
		{"written with the store's, opened with snappy", nil, sstable.SnappyCompression},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "items")
			v, _ := storeViewIn(t, dir, 1, 0, c.write)
			for i := range n {
				v.apply(&client.Record{Topic: "items", Offset: int64(i), Timestamp: time.UnixMilli(1), Key: []byte(fmt.Sprintf("k%d", i)), Value: doc(i)})
			}
			v.mu.Lock()
			err := v.disk.db.Flush()
			if err == nil {
				err = v.disk.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true)
			}
			v.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if got := v.Stats().DiskBytes; got > n*int64(len(doc(0)))/4 {
				t.Fatalf("the store written takes %d bytes: its blocks are not compressed, and the test would read none", got)
			}
			v.closeStore()
			checkOptionsParse(t, dir)

			v2, rebuilt := storeViewIn(t, dir, 1, 0, c.read)
			if rebuilt != "" {
				t.Fatalf("the store was rebuilt on opening: %s", rebuilt)
			}
			if st := v2.Stats(); st.Keys != n {
				t.Errorf("the store opened holds %d keys, want %d", st.Keys, n)
			}
			for _, i := range []int{0, n / 2, n - 1} {
				k := fmt.Sprintf("k%d", i)
				if e, ok, err := v2.Lookup(k); err != nil || !ok || !bytes.Equal(e.Value, doc(i)) {
					t.Errorf("%s read back: found %v, value right %v, %v", k, ok, bytes.Equal(e.Value, doc(i)), err)
				}
			}
		})
	}
}

// checkOptionsParse parses the OPTIONS file of the store in dir as
// pebble's tools do.
func checkOptionsParse(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "OPTIONS-*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the store's OPTIONS file: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var o pebble.Options
		if err := o.Parse(string(data), nil); err != nil {
			t.Errorf("%s does not parse: %v", filepath.Base(f), err)
		}
	}
}

// storedBytes writes n records of value(i) into a view on disk and reports
// the bytes its store takes, flushed, compacted and opened again: the
// values are in blob files pebble found on opening (whose sizes it then
// counts apart).
func storedBytes(t *testing.T, n int, value func(i int) []byte) int64 {
	t.Helper()
	v := storeView(t, 1, 0)
	var last []byte
	for i := range n {
		last = value(i)
		v.apply(&client.Record{Topic: "items", Offset: int64(i), Timestamp: time.UnixMilli(1), Key: []byte(fmt.Sprintf("k%d", i)), Value: last})
	}
	v.mu.Lock()
	err := v.disk.db.Flush()
	if err == nil {
		err = v.disk.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true)
	}
	if err == nil {
		err = v.disk.reopen(false) // as a restart, or a settled bulk load, opens it
	}
	v.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if e, ok, err := v.Lookup(fmt.Sprintf("k%d", n-1)); err != nil || !ok || !bytes.Equal(e.Value, last) {
		t.Fatalf("the last value read back: found %v, equal %v, %v", ok, bytes.Equal(e.Value, last), err)
	}
	return v.Stats().DiskBytes
}

// Until a first load in bulk is settled, the store's compaction backlog
// counts what the load wrote (pebble's own estimate counts none of it, its
// level 0 unbounded meanwhile); once settled, the backlog is pebble's.
func TestDiskViewBulkLoadCountsInTheBacklog(t *testing.T) {
	v := storeView(t, 1, 1)
	v.gatherStore(100)
	for i := range 100 {
		v.apply(&client.Record{Topic: "items", Offset: int64(i), Timestamp: time.UnixMilli(1), Key: []byte(fmt.Sprintf("k%d", i)), Value: make([]byte, 512)})
	}
	if bulk, err := v.flushStore(); err != nil || !bulk {
		t.Fatalf("a first load of 100 records with the bulk from 1: in bulk %v, %v", bulk, err)
	}
	if st := v.Stats(); st.CompactionBytes <= 0 {
		t.Errorf("a bulk load not yet settled: backlog %d, want above zero", st.CompactionBytes)
	}
	if err := v.settleStore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.CompactionBytes != 0 || st.Keys != 100 {
		t.Errorf("settled: backlog %d (want 0), %d keys (want 100)", st.CompactionBytes, st.Keys)
	}
}
