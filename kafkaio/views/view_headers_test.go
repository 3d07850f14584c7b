package views

import (
	"bytes"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// Entries with equal headers share one encoding; another header set gets
// its own, and each entry still reads its own headers.
func TestViewEntriesShareEqualHeaders(t *testing.T) {
	v := newView("items", [16]byte{1}, 1, time.Millisecond)
	json := []client.Header{{Key: "content-type", Value: []byte("application/json")}}
	text := []client.Header{{Key: "content-type", Value: []byte("text/plain")}, {Key: "etag", Value: []byte("e1")}}
	for i, hs := range [][]client.Header{json, json, text, json} {
		// A copy per record, as the consumer hands each message its own.
		own := make([]client.Header, len(hs))
		for j, h := range hs {
			own[j] = client.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
		v.apply(&client.Record{Topic: "items", Offset: int64(i), Key: []byte{'a' + byte(i)}, Value: []byte("v"), Timestamp: time.UnixMilli(1), Headers: own})
	}
	a, _ := v.Get("a")
	b, _ := v.Get("b")
	c, _ := v.Get("c")
	d, _ := v.Get("d")
	if &a.headers[0] != &b.headers[0] {
		t.Error("two consecutive entries with equal headers do not share the encoding")
	}
	if &c.headers[0] == &b.headers[0] || &d.headers[0] == &c.headers[0] {
		t.Error("entries with other headers share an encoding")
	}
	for _, tc := range []struct {
		e          Entry
		name, want string
	}{{a, "content-type", "application/json"}, {c, "content-type", "text/plain"}, {c, "etag", "e1"}, {d, "content-type", "application/json"}} {
		if got, ok := tc.e.Header(tc.name); !ok || string(got) != tc.want {
			t.Errorf("%s: Header(%q) = %q, %v; want %q", tc.e.Key, tc.name, got, ok, tc.want)
		}
	}
	if _, ok := d.Header("etag"); ok {
		t.Error("d has c's etag")
	}
}
