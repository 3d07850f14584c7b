package httphdr

import (
	"reflect"
	"testing"
	"time"
)

func TestParsePrefer(t *testing.T) {
	cases := []struct {
		in   []string
		want Prefs
	}{
		{nil, Prefs{}},
		{[]string{"wait=10"}, Prefs{Wait: 10 * time.Second, WaitSet: true}},
		{[]string{"WAIT = 5"}, Prefs{Wait: 5 * time.Second, WaitSet: true}},
		{[]string{`wait="7"`}, Prefs{Wait: 7 * time.Second, WaitSet: true}},
		{[]string{"respond-async, wait=3"}, Prefs{Wait: 3 * time.Second, WaitSet: true, RespondAsync: true}},
		{[]string{"respond-async", "wait=3"}, Prefs{Wait: 3 * time.Second, WaitSet: true, RespondAsync: true}},
		{[]string{"wait=3;foo=bar"}, Prefs{Wait: 3 * time.Second, WaitSet: true}},
		{[]string{"wait=abc, wait=4"}, Prefs{Wait: 4 * time.Second, WaitSet: true}}, // first *valid* one
		{[]string{"wait=4, wait=9"}, Prefs{Wait: 4 * time.Second, WaitSet: true}},   // first one counts
		{[]string{"wait=-1"}, Prefs{}},
		{[]string{"wait=1.5"}, Prefs{}},
		{[]string{"wait="}, Prefs{}},
		{[]string{"wait=99999999999"}, Prefs{}},
		{[]string{"return=minimal, handling=lenient"}, Prefs{}},
		{[]string{`foo="a,wait=1", wait=2`}, Prefs{Wait: 2 * time.Second, WaitSet: true}},
	}
	for _, c := range cases {
		if got := ParsePrefer(c.in); got != c.want {
			t.Errorf("ParsePrefer(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestParseIfNoneMatch(t *testing.T) {
	cases := []struct {
		in   []string
		want IfNoneMatch
	}{
		{nil, IfNoneMatch{}},
		{[]string{`"abc"`}, IfNoneMatch{Tags: []string{"abc"}}},
		{[]string{`W/"abc"`}, IfNoneMatch{Tags: []string{"abc"}}},
		{[]string{`abc`}, IfNoneMatch{Tags: []string{"abc"}}},
		{[]string{`"a", W/"b" ,c`, `"d"`}, IfNoneMatch{Tags: []string{"a", "b", "c", "d"}}},
		{[]string{`*`}, IfNoneMatch{Any: true}},
		{[]string{` , ,`}, IfNoneMatch{}},
		{[]string{`"a,b"`}, IfNoneMatch{Tags: []string{"a,b"}}},
	}
	for _, c := range cases {
		if got := ParseIfNoneMatch(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseIfNoneMatch(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestIfNoneMatchMatches(t *testing.T) {
	m := ParseIfNoneMatch([]string{`W/"x", "y"`})
	if !m.Matches("x") || !m.Matches("y") || m.Matches("z") {
		t.Error("list matching is wrong")
	}
	any := ParseIfNoneMatch([]string{"*"})
	if !any.Matches("q") {
		t.Error("* must match any current representation")
	}
	if any.Matches("") {
		t.Error("* must not match when there is no representation")
	}
	if (IfNoneMatch{}).Present() || !any.Present() {
		t.Error("Present is wrong")
	}
}

func TestValidTag(t *testing.T) {
	for s, want := range map[string]bool{"abc-1.2/x": true, `a"b`: false, "a b": false, "a\nb": false, "": true} {
		if got := ValidTag(s); got != want {
			t.Errorf("ValidTag(%q) = %v", s, got)
		}
	}
}

func FuzzParsePrefer(f *testing.F) {
	for _, s := range []string{"wait=10", "respond-async, wait=3", `a="b,c";d`, "wait=\"", ",,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := ParsePrefer([]string{s})
		if p.Wait < 0 || (!p.WaitSet && p.Wait != 0) {
			t.Fatalf("ParsePrefer(%q) = %+v", s, p)
		}
	})
}

func FuzzParseIfNoneMatch(f *testing.F) {
	for _, s := range []string{`"a"`, `W/"a", b`, "*", `"unterminated`, `\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m := ParseIfNoneMatch([]string{s})
		for _, tag := range m.Tags {
			if tag == "" {
				t.Fatalf("ParseIfNoneMatch(%q) yielded an empty tag", s)
			}
		}
	})
}

func TestListLen(t *testing.T) {
	for in, want := range map[string]int{
		"":                                   0,
		"application/json":                   1,
		"application/json,text/plain":        2, // Envoy's join of two content-type headers
		"application/json, application/json": 2,
		`text/plain; x="a,b"`:                1,
		" , ,":                               0,
	} {
		if got := ListLen(in); got != want {
			t.Errorf("ListLen(%q) = %d, want %d", in, got, want)
		}
	}
}
