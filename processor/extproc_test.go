package processor

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

// headerList takes raw values (what Envoy sends), falls back to value,
// lower-cases names, and copies the raw values in one allocation.
func TestHeaderList(t *testing.T) {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")},
		{Key: "Content-Type", RawValue: []byte("application/json")},
		{Key: "x-old", Value: "from value"},
		{Key: "empty"},
		{Key: "accept", RawValue: []byte("*/*")},
	}}
	got := headerList(hm)
	want := route.Headers{{Name: ":method", Value: "POST"}, {Name: "content-type", Value: "application/json"},
		{Name: "x-old", Value: "from value"}, {Name: "empty", Value: ""}, {Name: "accept", Value: "*/*"}}
	if len(got) != len(want) {
		t.Fatalf("%q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("header %d: %q, want %q", i, got[i], want[i])
		}
	}
	// The values are copies: Envoy's message may be reused.
	hm.Headers[0].RawValue[0] = 'X'
	if got[0].Value != "POST" {
		t.Errorf("a value aliases the message: %q", got[0].Value)
	}
	lowerOnly := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hm.Headers[0], hm.Headers[4]}}
	// The list and one string for all the values.
	if n := testing.AllocsPerRun(100, func() { _ = headerList(lowerOnly) }); n != 2 {
		t.Errorf("headerList of 2 raw headers: %v allocations, want 2", n)
	}
}
