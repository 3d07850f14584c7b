package logtails_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// testDecoder decodes "vN" to "dN"; values in bad do not match, values in
// later cannot be decoded while down is set. It counts its calls by value.
type testDecoder struct {
	bad, later map[string]bool
	down       atomic.Bool
	mu         sync.Mutex
	calls      map[string]int
}

func (d *testDecoder) decode(_ context.Context, r *client.Record) ([]byte, error) {
	v := string(r.Value)
	d.mu.Lock()
	d.calls[v]++
	d.mu.Unlock()
	switch {
	case d.bad[v]:
		return nil, errors.New("does not match")
	case d.later[v] && d.down.Load():
		return nil, fmt.Errorf("%w: the registry is down", views.ErrLater)
	}
	return []byte("d" + strings.TrimPrefix(v, "v")), nil
}

func (d *testDecoder) callsOf(v string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[v]
}

// nextErr reads chunks until Next fails, and returns the frames and the error.
func nextErr(t *testing.T, s *logtails.Stream) ([]got, error) {
	t.Helper()
	ctx := kafkatest.Ctx(t, 20*time.Second)
	var out []got
	for {
		chunk, err := s.Next(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, decodeFrames(t, chunk, s.Partitions())...)
	}
}

// A topic's decoder: records read from history are decoded by the stream,
// records of the tail once for every stream; records that do not match are
// left out with the positions passing over them; a record that cannot be
// decoded now ends the stream before it (after what came before it), in
// history and in the tail, and a resume reads it once it decodes.
func TestLogStreamDecoder(t *testing.T) {
	b := kafkatest.Broker(t, embedded.Topic{Name: "log", Partitions: 1})
	writeSeq(t, b.Addr(), "log", 1, 0, 10) // tombstones after v4 and v9
	d := &testDecoder{
		bad:   map[string]bool{"v2": true, "v8": true},
		later: map[string]bool{"v1": true, "v7": true},
		calls: map[string]int{},
	}
	d.down.Store(true)
	// The ring holds the last 6 records (v5 to v9 and a tombstone); v0 to
	// v4 are history.
	l, _ := newLogTails(t, b.Addr(), logtails.Options{RingRecords: 12,
		Decoders: func(string) logtails.StreamDecoder { return d.decode }})
	str := func(fs []got) string {
		var b strings.Builder
		for _, f := range fs {
			fmt.Fprintf(&b, "%s@%d ", f.value, f.next[0])
		}
		return strings.TrimSpace(b.String())
	}
	check := func(what string, start map[int32]int64, want string) {
		t.Helper()
		s := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: start})
		fs, err := nextErr(t, s)
		s.Close()
		if !errors.Is(err, views.ErrLater) || str(fs) != want {
			t.Errorf("%s: %q then %v, want %q then ErrLater", what, str(fs), err, want)
		}
	}
	check("history, down", nil, "d0@1")
	check("tail, down, at the held record", map[int32]int64{0: 8}, "")
	check("tail, down, before the held record", map[int32]int64{0: 7}, "d6@8")

	d.down.Store(false)
	s := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: map[int32]int64{0: 1}})
	if fs := collect(t, s, 7); str(fs) != "d1@2 d3@4 d4@5 d5@7 d6@8 d7@9 d9@11" {
		t.Errorf("resumed at the record that could not be decoded: %q", str(fs))
	}
	r := openStream(t, l, logtails.StreamOptions{Topic: "log", Start: map[int32]int64{0: 9}})
	if fs := collect(t, r, 1); str(fs) != "d9@11" {
		t.Errorf("second stream at the tail: %q", str(fs))
	}
	// The tail decoded v9 once for both streams (v8 too: left out of both);
	// v4 was read from history by one stream.
	for v, n := range map[string]int{"v9": 1, "v8": 1, "v4": 1} {
		if got := d.callsOf(v); got != n {
			t.Errorf("%s decoded %d times, want %d", v, got, n)
		}
	}
}
