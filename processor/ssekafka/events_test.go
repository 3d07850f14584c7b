package ssekafka

import (
	"encoding/base64"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// Frames render as the format requires: an id per event, a data line per
// line of the value whatever its line breaks, an empty value still an
// event, a tombstone a delete event with its key.
func TestAppendEvents(t *testing.T) {
	var f frame
	var chunk []byte
	chunk = f.AppendFrame(chunk, []byte(`{"a":1}`), []int64{1})
	chunk = f.AppendFrame(chunk, []byte("one\ntwo\r\nthree\rfour\n"), []int64{2})
	chunk = f.AppendFrame(chunk, nil, []int64{3})
	chunk = f.AppendTombstone(chunk, []byte("k1"), []int64{4})
	got, n, err := appendEvents(nil, chunk)
	if err != nil || n != 4 {
		t.Fatalf("%d events, %v; want 4", n, err)
	}
	id := func(next int64) string {
		return base64.StdEncoding.EncodeToString(grpcwire.AppendMessageID(nil, []int64{next}))
	}
	want := "id: " + id(1) + "\ndata: {\"a\":1}\n\n" +
		"id: " + id(2) + "\ndata: one\ndata: two\ndata: three\ndata: four\ndata: \n\n" +
		"id: " + id(3) + "\ndata: \n\n" +
		"event: delete\nid: " + id(4) + "\ndata: k1\n\n"
	if string(got) != want {
		t.Fatalf("events:\n%q\nwant\n%q", got, want)
	}
	if id(1) != "AQIAAg==" {
		t.Fatalf("the id of {p0: next 1} is %s, not the reference implementation's AQIAAg==", id(1))
	}
	// The value sits at ValueOffset, whole: another framer's stream takes it from there.
	one := f.AppendFrame(nil, []byte("v"), []int64{1})
	if string(one[f.ValueOffset():f.ValueOffset()+1]) != "v" || len(one) > f.MaxFrame(1, 1) {
		t.Fatalf("frame % x", one)
	}
	for _, bad := range [][]byte{{0, 0, 0}, {0, 0, 0, 0, 9, 'x'}, {0, 0, 0, 0, 1, 'x', 5, 1}} {
		if _, _, err := appendEvents(nil, bad); err == nil {
			t.Errorf("% x: no error", bad)
		}
	}
}

func TestAppendComment(t *testing.T) {
	if got := string(appendComment(nil, "a\nb\rc")); got != ": a b c\n\n" {
		t.Fatalf("%q", got)
	}
}

func TestAcceptsEventStream(t *testing.T) {
	for _, c := range []struct {
		accept []string
		ok     bool
	}{
		{nil, false},
		{[]string{"text/event-stream"}, true},
		{[]string{"Text/Event-Stream"}, true},
		{[]string{"application/json, text/event-stream;q=0.5"}, true},
		{[]string{"text/html", "text/event-stream"}, true},
		{[]string{"*/*"}, false},
		{[]string{"text/*"}, false},
		{[]string{"text/event-stream;q=0"}, false},
		{[]string{"text/event-stream; charset=utf-8"}, true},
	} {
		var h route.Headers
		for _, v := range c.accept {
			h = append(h, route.Header{Name: "accept", Value: v})
		}
		if got := acceptsEventStream(h); got != c.ok {
			t.Errorf("accept %q: %v, want %v", c.accept, got, c.ok)
		}
	}
}

func TestLastEventID(t *testing.T) {
	valid := base64.StdEncoding.EncodeToString(grpcwire.AppendMessageID(nil, []int64{5, 7}))
	for _, c := range []struct {
		values []string
		status int // 0: accepted
		start  map[int32]int64
	}{
		{nil, 0, nil},
		{[]string{""}, 0, nil},
		{[]string{valid}, 0, map[int32]int64{0: 5, 1: 7}},
		{[]string{valid, valid}, 400, nil},
		{[]string{"%%%"}, 400, nil},
		{[]string{string(make([]byte, maxLastEventID+1))}, 400, nil},
	} {
		var h route.Headers
		for _, v := range c.values {
			h = append(h, route.Header{Name: "last-event-id", Value: v})
		}
		start, problem := lastEventID(h)
		switch {
		case c.status != 0 && (problem == nil || problem.Status != c.status):
			t.Errorf("%d values: %+v, want %d", len(c.values), problem, c.status)
		case c.status == 0 && problem != nil:
			t.Errorf("%d values: refused: %s", len(c.values), problem.Body)
		case c.status == 0 && len(start) != len(c.start):
			t.Errorf("%d values: start %v, want %v", len(c.values), start, c.start)
		}
		for p, off := range c.start {
			if start[p] != off {
				t.Errorf("start %v, want %v", start, c.start)
			}
		}
	}
}

func TestLineEnd(t *testing.T) {
	for in, want := range map[string]int{"": -1, "abc": -1, "a\nb": 1, "a\rb": 1, "a\r\nb": 1, "ab\n\r": 2, "ab\r\n\n": 2, "\n": 0, "x\ry\nz": 1} {
		if got := lineEnd([]byte(in)); got != want {
			t.Errorf("lineEnd(%q) = %d, want %d", in, got, want)
		}
	}
}
