package logtails_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/faultfs"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// testFramer frames as [0][len u32][value][next offset u64 per partition],
// so tests read back both the value and the position each frame carries.
type testFramer struct{}

func (testFramer) ValueOffset() int { return 5 }

func (testFramer) MaxFrame(valueLen, partitions int) int { return 5 + valueLen + 8*partitions }

func (testFramer) AppendFrame(dst, value []byte, next []int64) []byte {
	var p [5]byte
	binary.BigEndian.PutUint32(p[1:], uint32(len(value)+8*len(next)))
	dst = append(append(dst, p[:]...), value...)
	for _, off := range next {
		dst = binary.BigEndian.AppendUint64(dst, uint64(off))
	}
	return dst
}

// got is one frame a stream sent.
type got struct {
	value string
	next  []int64
}

func decodeFrames(t *testing.T, chunk []byte, partitions int) []got {
	t.Helper()
	var out []got
	for len(chunk) > 0 {
		if len(chunk) < 5 {
			t.Fatalf("truncated frame prefix: % x", chunk)
		}
		n := int(binary.BigEndian.Uint32(chunk[1:5]))
		body := chunk[5 : 5+n]
		chunk = chunk[5+n:]
		vlen := n - 8*partitions
		g := got{value: string(body[:vlen])}
		for p := 0; p < partitions; p++ {
			g.next = append(g.next, int64(binary.BigEndian.Uint64(body[vlen+8*p:])))
		}
		out = append(out, g)
	}
	return out
}

func newLogTails(t *testing.T, addr string, opts logtails.Options) (*logtails.Tails, *views.Views) {
	t.Helper()
	c, err := views.New(views.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": addr}, KafkaTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	opts.KafkaTimeout = 5 * time.Second
	l, err := logtails.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l, c
}

func openStream(t *testing.T, l *logtails.Tails, o logtails.StreamOptions) *logtails.Stream {
	t.Helper()
	if o.Framer == nil {
		o.Framer = testFramer{}
	}
	s, err := l.Open(kafkatest.Ctx(t, 20*time.Second), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// collect reads frames until n arrived.
func collect(t *testing.T, s *logtails.Stream, n int) []got {
	t.Helper()
	ctx := kafkatest.Ctx(t, 20*time.Second)
	var out []got
	for len(out) < n {
		chunk, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("after %d frames: %v", len(out), err)
		}
		out = append(out, decodeFrames(t, chunk, s.Partitions())...)
	}
	if len(out) != n {
		t.Fatalf("%d frames, want %d: %v", len(out), n, out)
	}
	return out
}

// writeSeq writes values v<start>..v<end-1>, alternating partitions, with a
// tombstone (key t) after every fifth record.
func writeSeq(t *testing.T, addr, topic string, partitions int32, from, to int) (values []string) {
	t.Helper()
	var recs []kafkatest.Rec
	for i := from; i < to; i++ {
		v := fmt.Sprintf("v%d", i)
		recs = append(recs, kafkatest.Rec{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(v), Partition: int32(i) % partitions})
		values = append(values, v)
		if i%5 == 4 {
			recs = append(recs, kafkatest.Rec{Key: []byte("t"), Value: nil, Partition: int32(i) % partitions})
		}
	}
	kafkatest.Produce(t, addr, topic, recs...)
	return values
}

// checkOrder checks every value was received once, in write order within
// each partition, and that positions only grow.
func checkOrder(t *testing.T, frames []got, want []string, partitions int) {
	t.Helper()
	seen := map[string]bool{}
	last := make([]int64, partitions)
	for i, f := range frames {
		if seen[f.value] {
			t.Fatalf("frame %d: %s twice", i, f.value)
		}
		seen[f.value] = true
		for p, off := range f.next {
			if off < last[p] {
				t.Fatalf("frame %d (%s): position of partition %d went back from %d to %d", i, f.value, p, last[p], off)
			}
			last[p] = off
		}
	}
	for _, v := range want {
		if !seen[v] {
			t.Fatalf("%s never received (got %d frames)", v, len(frames))
		}
	}
	if len(frames) != len(want) {
		t.Fatalf("%d frames, want %d", len(frames), len(want))
	}
}

// A fresh stream on a topic larger than the ring reads the head of its
// history with a reader, the rest from the ring, then live records; a
// second stream resumes from any frame's position with exactly what follows.
func TestLogStreamHistoryRingLive(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 2})
	want := writeSeq(t, b.Addr(), "log", 2, 0, 40)
	l, _ := newLogTails(t, b.Addr(), logtails.Options{RingRecords: 16, TopicIdle: time.Minute})

	// The ring starts with the last 4 records of each partition; the budget
	// grows it to hold the live burst below.
	s := openStream(t, l, logtails.StreamOptions{Topic: "log", LagBudget: 64})
	hs, err := s.Peek(kafkatest.Ctx(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if hs != nil {
		t.Fatalf("first record headers %v, want none", hs)
	}
	frames := collect(t, s, 40)
	want = append(want, writeSeq(t, b.Addr(), "log", 2, 40, 60)...)
	frames = append(frames, collect(t, s, 20)...)
	checkOrder(t, frames, want, 2)
	if st := l.Stats(); st.Topics != 1 || st.RingRecords != 8+24 || st.Readers != 0 {
		t.Fatalf("stats %+v", st)
	}

	// Resume after every 7th frame: exactly the frames that followed.
	for i := 0; i < len(frames); i += 7 {
		start := map[int32]int64{}
		for p, off := range frames[i].next {
			start[int32(p)] = off
		}
		r := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: start, LagBudget: 64})
		rest := collect(t, r, len(frames)-i-1)
		if !samePartitionOrder(frames[i+1:], rest) {
			t.Fatalf("resume after frame %d: %v\nwant %v", i, rest, frames[i+1:])
		}
		r.Close()
	}
}

// samePartitionOrder: the same frames, in the same order within each
// partition (streams may interleave partitions differently).
func samePartitionOrder(a, b []got) bool {
	if len(a) != len(b) {
		return false
	}
	var pa, pb [2][]string
	for i := range a {
		pa[partitionOf(a[i].value)] = append(pa[partitionOf(a[i].value)], a[i].value)
		pb[partitionOf(b[i].value)] = append(pb[partitionOf(b[i].value)], b[i].value)
	}
	return fmt.Sprint(pa) == fmt.Sprint(pb)
}

func partitionOf(v string) int {
	var i int
	fmt.Sscanf(v, "v%d", &i)
	return i % 2
}

// Streams at the tail send the ring's frames themselves: the same bytes,
// several frames per chunk.
func TestLogStreamsShareTailFrames(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	l, _ := newLogTails(t, b.Addr(), logtails.Options{})
	s1 := openStream(t, l, logtails.StreamOptions{Topic: "log"})
	s2 := openStream(t, l, logtails.StreamOptions{Topic: "log"})
	for _, s := range []*logtails.Stream{s1, s2} {
		if _, err := s.Peek(kafkatest.Ctx(t, 20*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	writeSeq(t, b.Addr(), "log", 1, 0, 4) // one batch of the tail, most likely
	ctx := kafkatest.Ctx(t, 20*time.Second)
	c1, err := s1.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := s2.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if &c1[0] != &c2[0] {
		t.Fatal("two streams at the tail sent different copies of the same frame")
	}
	if f := decodeFrames(t, c1, 1); f[0].value != "v0" || f[0].next[0] != 1 {
		t.Fatalf("first frame %+v", f[0])
	}
}

// Behind tells a stream at the tail whether records it has not taken are
// waiting: not before a write, yes while a batch left one in the ring, not
// once it took everything.
func TestLogStreamBehind(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	l, _ := newLogTails(t, b.Addr(), logtails.Options{BatchBytes: 1}) // one frame per Next
	s := openStream(t, l, logtails.StreamOptions{Topic: "log"})
	if _, err := s.Peek(kafkatest.Ctx(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if s.Behind() {
		t.Fatal("behind before any write")
	}
	writeSeq(t, b.Addr(), "log", 1, 0, 2)
	ctx := kafkatest.Ctx(t, 20*time.Second)
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	for !s.Behind() { // the second record reaches the ring
		select {
		case <-ctx.Done():
			t.Fatal("never behind with a record not taken")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Behind() {
		t.Fatal("behind after taking every record")
	}
}

// A stream that stops reading is told once it is more than its budget
// behind, and Next fails with ErrLagged; the client resumes by position.
func TestLogStreamLagBudget(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	l, _ := newLogTails(t, b.Addr(), logtails.Options{RingRecords: 100})
	s := openStream(t, l, logtails.StreamOptions{Topic: "log", LagBudget: 5})
	if _, err := s.Peek(kafkatest.Ctx(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	first := writeSeq(t, b.Addr(), "log", 1, 0, 3)
	frames := collect(t, s, 3)
	checkOrder(t, frames, first, 1)
	// 9 values and 2 tombstones: over 5. Lag is judged when the next records
	// come (a burst alone does not fail streams that keep up).
	writeSeq(t, b.Addr(), "log", 1, 3, 12)
	kafkatest.Produce(t, b.Addr(), "log", kafkatest.Rec{Key: []byte("k12"), Value: []byte("v12")})
	select {
	case <-s.Lagged():
	case <-kafkatest.Ctx(t, 20*time.Second).Done():
		t.Fatal("not told it lagged")
	}
	if _, err := s.Next(kafkatest.Ctx(t, 20*time.Second)); !errors.Is(err, logtails.ErrLagged) {
		t.Fatalf("Next: %v, want ErrLagged", err)
	}
	r := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: map[int32]int64{0: frames[2].next[0]}})
	rest := collect(t, r, 10)
	if rest[0].value != "v3" || rest[9].value != "v12" {
		t.Fatalf("resumed: %v", rest)
	}
}

// A compacted topic's history is its view (current values, in partition and
// offset order), then the log's live records; filters select among both.
func TestLogStreamCompactedHistoryIsTheView(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "snap", Partitions: 1, Compact: true})
	kafkatest.Produce(t, b.Addr(), "snap",
		kafkatest.Rec{Key: []byte("a"), Value: []byte("a1")},
		kafkatest.Rec{Key: []byte("b"), Value: []byte("b1"), Headers: []kafka.Header{{Key: "meta:x", Value: []byte("1")}}},
		kafkatest.Rec{Key: []byte("a"), Value: []byte("a2")},
		kafkatest.Rec{Key: []byte("c"), Value: []byte("c1")},
		kafkatest.Rec{Key: []byte("c"), Value: nil},
	)
	l, _ := newLogTails(t, b.Addr(), logtails.Options{})
	s := openStream(t, l, logtails.StreamOptions{Topic: "snap", Compacted: true})
	hs, err := s.Peek(kafkatest.Ctx(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Key != "meta:x" {
		t.Fatalf("first headers %v", hs)
	}
	h := collect(t, s, 2)
	if h[0].value != "b1" || h[1].value != "a2" || h[1].next[0] != 3 {
		t.Fatalf("history %+v", h)
	}
	kafkatest.Produce(t, b.Addr(), "snap", kafkatest.Rec{Key: []byte("b"), Value: []byte("b2")})
	if live := collect(t, s, 1); live[0].value != "b2" || live[0].next[0] != 6 {
		t.Fatalf("live %+v", live)
	}

	key := "a"
	f := openStream(t, l, logtails.StreamOptions{Topic: "snap", Compacted: true, Filters: []logtails.Filter{{Key: &key}}})
	if got := collect(t, f, 1); got[0].value != "a2" {
		t.Fatalf("filtered %+v", got)
	}
	kafkatest.Produce(t, b.Addr(), "snap", kafkatest.Rec{Key: []byte("b"), Value: []byte("b3")}, kafkatest.Rec{Key: []byte("a"), Value: []byte("a3")})
	if got := collect(t, f, 1); got[0].value != "a3" || got[0].next[0] != 8 {
		t.Fatalf("filtered live %+v", got)
	}
}

// A position beyond the end of the log (an id of a deleted generation), or
// naming a partition the topic lacks, is refused with a *GapError BeyondEnd
// that says where and resumes from the start; a position at the end is
// taken.
func TestLogStreamBeyondTheEndIsAGap(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	want := writeSeq(t, b.Addr(), "log", 1, 0, 3)
	l, _ := newLogTails(t, b.Addr(), logtails.Options{})
	for _, c := range []struct {
		start map[int32]int64
		gaps  []logtails.Gap
	}{
		{map[int32]int64{0: 99}, []logtails.Gap{{Partition: 0, Asked: 99, LogStart: 0, LogEnd: 3}}},
		{map[int32]int64{0: 1, 7: 1}, []logtails.Gap{{Partition: 7, Asked: 1, LogStart: -1, LogEnd: -1}}},
	} {
		_, err := l.Open(kafkatest.Ctx(t, 20*time.Second), logtails.StreamOptions{Topic: "log", Framer: testFramer{}, Start: c.start})
		var gap *logtails.GapError
		if !errors.As(err, &gap) || !errors.Is(err, logtails.ErrGap) {
			t.Fatalf("%v: %v, want a *GapError", c.start, err)
		}
		if gap.Cause != logtails.BeyondEnd || !slices.Equal(gap.Gaps, c.gaps) || len(gap.Resume) != 0 {
			t.Fatalf("%v: %+v, want BeyondEnd %+v resuming from the start", c.start, gap, c.gaps)
		}
		s := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: gap.Resume})
		checkOrder(t, collect(t, s, 3), want, 1)
	}
	s := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: map[int32]int64{0: 3}})
	kafkatest.Produce(t, b.Addr(), "log", kafkatest.Rec{Key: []byte("x"), Value: []byte("x")})
	if got := collect(t, s, 1); got[0].value != "x" {
		t.Fatalf("%+v", got)
	}
}

// Records removed below a resume position (DeleteRecords, as retention
// does): the stream is refused with a *GapError Truncated naming the
// partition, the offset asked and the log start, and its Resume continues
// at the log start. A stream opened before the removal and still reading
// its history from below the new log start ends with the gap once it sent
// what it read; one that asked for the log from its start (no position)
// moves with the log start, as it asked for the log's first record.
func TestLogStreamBelowTheLogStartIsAGap(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	want := writeSeq(t, b.Addr(), "log", 1, 0, 10) // 12 records with two tombstones
	// A small ring: offsets below 8 are history, read by history readers.
	l, _ := newLogTails(t, b.Addr(), logtails.Options{RingRecords: 4})
	resumed := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: map[int32]int64{0: 1}})
	fresh := openStream(t, l, logtails.StreamOptions{Topic: "log"})
	kafkatest.DeleteRecords(t, b.Addr(), "log", 0, 6)

	_, err := l.Open(kafkatest.Ctx(t, 20*time.Second), logtails.StreamOptions{Topic: "log", Framer: testFramer{}, Start: map[int32]int64{0: 2}})
	var gap *logtails.GapError
	if !errors.As(err, &gap) || gap.Cause != logtails.Truncated ||
		!slices.Equal(gap.Gaps, []logtails.Gap{{Partition: 0, Asked: 2, LogStart: 6, LogEnd: -1}}) || gap.Resume[0] != 6 {
		t.Fatalf("resume below the log start: %+v (%v), want Truncated partition 0 asked 2 log start 6", gap, err)
	}
	if msg := gap.Error(); !strings.Contains(msg, "partition 0 asked offset 2, the log starts at 6") {
		t.Errorf("the gap's message %q names neither the partition, the offset asked nor the log start", msg)
	}
	// Offsets 6..11 hold v5..v9 and a tombstone: the resume reads v5 on.
	s := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: gap.Resume})
	checkOrder(t, collect(t, s, 5), want[5:], 1)

	ctx := kafkatest.Ctx(t, 20*time.Second)
	var frames []got
	for {
		chunk, err := resumed.Next(ctx)
		if err != nil {
			if !errors.As(err, &gap) || gap.Cause != logtails.Truncated || len(gap.Gaps) != 1 || gap.Gaps[0].LogStart != 6 {
				t.Fatalf("a stream reading history from below the new log start: %v, want a Truncated gap up to 6", err)
			}
			break
		}
		frames = append(frames, decodeFrames(t, chunk, 1)...)
	}
	// What it sent before the gap is the log from where it asked, in order;
	// the gap begins right after it.
	checkOrder(t, frames, want[1:1+len(frames)], 1)
	if asked := gap.Gaps[0].Asked; len(frames) > 0 && frames[len(frames)-1].next[0] != asked {
		t.Errorf("the gap starts at %d, the last frame sent ends at %d", asked, frames[len(frames)-1].next[0])
	}
	checkOrder(t, collect(t, fresh, 5), want[5:], 1)
}

// The topic of running streams is deleted: they end with ErrUnknownTopic
// and ErrTopicDeleted (the partition check finds it unknown).
func TestLogStreamOfADeletedTopic(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	writeSeq(t, b.Addr(), "log", 1, 0, 3)
	l, _ := newLogTails(t, b.Addr(), logtails.Options{PartitionCheck: 50 * time.Millisecond})
	s := openStream(t, l, logtails.StreamOptions{Topic: "log"})
	collect(t, s, 3)
	kafkatest.DeleteTopic(t, b.Addr(), "log")
	if _, err := s.Next(kafkatest.Ctx(t, 20*time.Second)); !errors.Is(err, client.ErrUnknownTopic) || !errors.Is(err, logtails.ErrTopicDeleted) {
		t.Fatalf("a stream of a deleted topic: %v, want ErrUnknownTopic and ErrTopicDeleted", err)
	}
	_, err := l.Open(kafkatest.Ctx(t, 20*time.Second), logtails.StreamOptions{Topic: "log", Framer: testFramer{}})
	if !errors.Is(err, client.ErrUnknownTopic) {
		t.Fatalf("opening a stream of the deleted topic: %v, want ErrUnknownTopic", err)
	}
}

// The topic of a running stream is deleted and created again at once, with
// two partitions, and written to. The partition check is left at its
// default: the tail reads the new generation's first record below its
// position, and the stream ends with a *GapError Recreated. Its Resume
// reads the new generation alone, every partition of it.
func TestLogStreamOfARecreatedTopic(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	writeSeq(t, b.Addr(), "log", 1, 0, 5)
	l, _ := newLogTails(t, b.Addr(), logtails.Options{})
	s := openStream(t, l, logtails.StreamOptions{Topic: "log"})
	collect(t, s, 5)
	kafkatest.DeleteTopic(t, b.Addr(), "log")
	if err := b.CreateTopics(embedded.Topic{Name: "log", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	want := writeSeq(t, b.Addr(), "log", 2, 100, 102)
	var gap *logtails.GapError
	if _, err := s.Next(kafkatest.Ctx(t, 20*time.Second)); !errors.As(err, &gap) || gap.Cause != logtails.Recreated || !errors.Is(err, logtails.ErrGap) {
		t.Fatalf("a stream of a recreated topic: %v, want a Recreated gap", err)
	}
	if !strings.Contains(gap.Error(), "deleted and created again") {
		t.Errorf("the gap's message %q does not say the topic was created again", gap.Error())
	}
	s = openStream(t, l, logtails.StreamOptions{Topic: "log", Start: gap.Resume})
	if s.Partitions() != 2 {
		t.Fatalf("the stream of the new generation reads %d partitions, want 2", s.Partitions())
	}
	checkOrder(t, collect(t, s, 2), want, 2)
}

// A resume checked against the tail of a generation deleted since, before
// the partition check found it (the check is an hour away here): the
// position is refused only after the topic is described, so the refusal
// names the new generation's log ends, not the stale ring's partition
// count. Nothing is written to partition 0, which the stale tail reads, so
// its own went-back check does not retire it first.
func TestLogStreamResumeOnAStaleTailChecksTheTopic(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	writeSeq(t, b.Addr(), "log", 1, 0, 3)
	l, _ := newLogTails(t, b.Addr(), logtails.Options{PartitionCheck: time.Hour})
	s := openStream(t, l, logtails.StreamOptions{Topic: "log"})
	collect(t, s, 3)
	s.Close() // the tail outlives it: TopicIdle
	kafkatest.DeleteTopic(t, b.Addr(), "log")
	if err := b.CreateTopics(embedded.Topic{Name: "log", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	kafkatest.Produce(t, b.Addr(), "log",
		kafkatest.Rec{Key: []byte("a"), Value: []byte("a"), Partition: 1},
		kafkatest.Rec{Key: []byte("b"), Value: []byte("b"), Partition: 2})

	_, err := l.Open(kafkatest.Ctx(t, 20*time.Second), logtails.StreamOptions{
		Topic: "log", Framer: testFramer{}, Start: map[int32]int64{0: 2, 1: 2, 2: 2}})
	want := []logtails.Gap{
		{Partition: 0, Asked: 2, LogStart: 0, LogEnd: 0},
		{Partition: 1, Asked: 2, LogStart: 0, LogEnd: 1},
		{Partition: 2, Asked: 2, LogStart: 0, LogEnd: 1},
	}
	var gap *logtails.GapError
	if !errors.As(err, &gap) || gap.Cause != logtails.BeyondEnd || !slices.Equal(gap.Gaps, want) {
		t.Fatalf("a resume past the new generation's end, on the stale tail: %v, want BeyondEnd %+v", err, want)
	}
	s = openStream(t, l, logtails.StreamOptions{Topic: "log", Start: gap.Resume})
	if s.Partitions() != 3 {
		t.Fatalf("the stream after the refusal reads %d partitions, want 3", s.Partitions())
	}
	checkOrder(t, collect(t, s, 2), []string{"a", "b"}, 3)
}

func TestLogStreamUnknownTopic(t *testing.T) {
	b := kafkatest.Broker(t)
	l, _ := newLogTails(t, b.Addr(), logtails.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Open(ctx, logtails.StreamOptions{Topic: "nope", Framer: testFramer{}}); !errors.Is(err, client.ErrUnknownTopic) {
		t.Fatalf("%v, want ErrUnknownTopic", err)
	}
}

// A topic that gains partitions while streamed: its streams end with
// ErrPartitionsChanged, and a stream resuming from the last id received reads
// the new partitions from their start and the old ones where it was, each
// record once.
func TestLogStreamEndsWhenTopicGainsPartitions(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	l, _ := newLogTails(t, b.Addr(), logtails.Options{PartitionCheck: 50 * time.Millisecond})
	s := openStream(t, l, logtails.StreamOptions{Topic: "log"})
	if _, err := s.Peek(kafkatest.Ctx(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	kafkatest.Produce(t, b.Addr(), "log", kafkatest.Rec{Key: []byte("a"), Value: []byte("a"), Partition: 0})
	first := collect(t, s, 1)
	if first[0].value != "a" || len(first[0].next) != 1 || first[0].next[0] != 1 {
		t.Fatalf("first frame %+v", first[0])
	}

	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	res, err := admin.CreatePartitions(kafkatest.Ctx(t, 20*time.Second), []kafka.PartitionsSpecification{{Topic: "log", IncreaseTo: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("creating partitions: %v", res)
	}

	// The stream waits at the tail: the check ends it.
	_, err = s.Next(kafkatest.Ctx(t, 20*time.Second))
	var pc *logtails.PartitionsChangedError
	if !errors.Is(err, logtails.ErrPartitionsChanged) || !errors.As(err, &pc) || pc.Topic != "log" || pc.Was != 1 || pc.Now != 3 {
		t.Fatalf("Next: %v, want a PartitionsChangedError of log from 1 to 3 partitions", err)
	}
	select {
	case <-s.Retired():
	default:
		t.Fatal("Retired not closed once Next failed with ErrPartitionsChanged")
	}
	if err := s.RetiredErr(); !errors.Is(err, logtails.ErrPartitionsChanged) {
		t.Fatalf("RetiredErr: %v", err)
	}

	kafkatest.Produce(t, b.Addr(), "log",
		kafkatest.Rec{Key: []byte("c"), Value: []byte("c"), Partition: 2},
		kafkatest.Rec{Key: []byte("b"), Value: []byte("b"), Partition: 0})
	r := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: map[int32]int64{0: first[0].next[0]}})
	if r.Partitions() != 3 {
		t.Fatalf("resumed stream: %d partitions, want 3", r.Partitions())
	}
	if _, err := r.Peek(kafkatest.Ctx(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	rest := collect(t, r, 2)
	byValue := map[string][]int64{}
	for _, f := range rest {
		byValue[f.value] = f.next
	}
	if len(byValue) != 2 || byValue["b"] == nil || byValue["c"] == nil {
		t.Fatalf("resumed: %+v, want b and c once each", rest)
	}
	// A record written now is the next one: nothing came between, nothing
	// twice.
	kafkatest.Produce(t, b.Addr(), "log", kafkatest.Rec{Key: []byte("d"), Value: []byte("d"), Partition: 1})
	if got := collect(t, r, 1); got[0].value != "d" || fmt.Sprint(got[0].next) != "[2 1 1]" {
		t.Fatalf("after the resume: %+v, want d at positions [2 1 1]", got)
	}
	if st := l.Stats(); st.Topics != 1 || st.Streams != 1 {
		t.Fatalf("stats %+v: want one topic (the fresh tail) held by the resumed stream", st)
	}
}

// A compacted topic's history read from a view on disk whose store cannot
// read fails to open, as not ready, rather than starting the stream with
// the records it could read: the client would never be sent the others.
func TestLogStreamHistoryFromAnUnreadableDiskViewIsNotReady(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "snap", Partitions: 1, Compact: true})
	recs := make([]kafkatest.Rec, 400) // many table blocks: most are read from the file
	for i := range recs {
		recs[i] = kafkatest.Rec{Key: fmt.Appendf(nil, "k%03d", i), Value: make([]byte, 1024)}
	}
	kafkatest.Produce(t, b.Addr(), "snap", recs...)
	dir := t.TempDir()
	onDisk := func(fs vfs.FS) *views.Views {
		c, err := views.New(views.Options{
			Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()}, KafkaTimeout: 5 * time.Second,
			DiskStore: func(string) bool { return true }, StoreDir: dir, StoreFS: fs,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	first := onDisk(nil)
	if _, err := first.View(kafkatest.Ctx(t, 20*time.Second), "snap"); err != nil {
		t.Fatal(err)
	}
	first.Close() // its store is flushed into table files
	fs := faultfs.New()
	c := onDisk(fs)
	if _, err := c.View(kafkatest.Ctx(t, 20*time.Second), "snap"); err != nil {
		t.Fatal(err)
	}
	l, err := logtails.New(c, logtails.Options{KafkaTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	fs.Fail.Store(true)
	if s, err := l.Open(kafkatest.Ctx(t, 20*time.Second), logtails.StreamOptions{Topic: "snap", Compacted: true, Framer: testFramer{}}); !errors.Is(err, client.ErrNotReady) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("opening with the store unreadable: %v, want ErrNotReady", err)
	}
	fs.Fail.Store(false)
	s := openStream(t, l, logtails.StreamOptions{Topic: "snap", Compacted: true})
	if h := collect(t, s, 400); len(h) != 400 {
		t.Fatalf("once the store reads: %d records of 400", len(h))
	}
}
