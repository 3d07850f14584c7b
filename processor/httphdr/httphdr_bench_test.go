package httphdr

import (
	"testing"
	"time"
)

// sinkString keeps results the compiler could otherwise leave on the stack.
var sinkString string

// Every fetch parses its if-none-match and prefer headers; a long poll
// carries both.

func BenchmarkParseIfNoneMatch(b *testing.B) {
	for _, tc := range []struct {
		name   string
		values []string
		tags   int
	}{
		{"none", nil, 0},
		{"one", []string{`"AAAAAAAAAAA.0.1000000/v42"`}, 1},
		{"three", []string{`"AAAAAAAAAAA.0.1000000", W/"AAAAAAAAAAA.3.17", "AAAAAAAAAAA.mq0T0w5a8xPM.0:1000083,1:1000083"`}, 3},
		{"star", []string{"*"}, 0},
	} {
		m := ParseIfNoneMatch(tc.values)
		if len(m.Tags) != tc.tags || m.Any != (tc.name == "star") {
			b.Fatalf("ParseIfNoneMatch(%q) = %+v", tc.values, m)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ParseIfNoneMatch(tc.values)
			}
		})
	}
}

func BenchmarkIfNoneMatchMatches(b *testing.B) {
	m := ParseIfNoneMatch([]string{`"AAAAAAAAAAA.0.1000000", W/"AAAAAAAAAAA.3.17", "AAAAAAAAAAA.0.1000001/v42"`})
	tag := "AAAAAAAAAAA.0.1000001/v42"
	if !m.Matches(tag) || m.Matches("AAAAAAAAAAA.0.1000002") {
		b.Fatal("Matches is wrong")
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Matches(tag)
	}
}

func BenchmarkParsePrefer(b *testing.B) {
	for _, tc := range []struct {
		name   string
		values []string
		want   Prefs
	}{
		{"none", nil, Prefs{}},
		{"wait", []string{"wait=30"}, Prefs{Wait: 30 * time.Second, WaitSet: true}},
		{"respond-async-wait", []string{"respond-async, wait=30"}, Prefs{Wait: 30 * time.Second, WaitSet: true, RespondAsync: true}},
	} {
		if got := ParsePrefer(tc.values); got != tc.want {
			b.Fatalf("ParsePrefer(%q) = %+v", tc.values, got)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ParsePrefer(tc.values)
			}
		})
	}
}

func BenchmarkQuote(b *testing.B) {
	tag := "AAAAAAAAAAA.0.1000000/v42"
	if Quote(tag) != `"`+tag+`"` || !ValidTag(tag) {
		b.Fatal("Quote or ValidTag is wrong")
	}
	b.ReportAllocs()
	for b.Loop() {
		sinkString = Quote(tag)
	}
}
