package httpkafka

import (
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// A reload drops the fetch routes (and their render caches) the new
// configuration no longer has, unless long polls still hold them.
func TestRetainDropsRoutesAReloadRemoved(t *testing.T) {
	kept, gone, held := &config.With{}, &config.With{}, &config.With{}
	h := New(nil, nil)
	for _, w := range []*config.With{kept, gone, held} {
		h.fetches.Store(w, NewFetch(w, nil))
	}
	f, _ := h.fetches.Load(held)
	f.(*Fetch).waiting.Add(1)

	h.Retain(&config.Config{Bindings: []*config.Binding{{Routes: []*config.Route{{With: kept}, {}}}}})
	for w, want := range map[*config.With]bool{kept: true, gone: false, held: true} {
		if _, ok := h.fetches.Load(w); ok != want {
			t.Errorf("route %p kept = %v, want %v", w, ok, want)
		}
	}
	if h.Waiting() != 1 {
		t.Errorf("Waiting = %d, want the held route's 1", h.Waiting())
	}

	f.(*Fetch).waiting.Add(-1)
	h.Retain(&config.Config{})
	n := 0
	h.fetches.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d routes left after a reload to none, the long poll over", n)
	}
}
