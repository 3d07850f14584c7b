package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// requestCounts counts the requests an embedded broker answers, by kind
// (Fetch, Metadata, ListOffsets, …): in an idle window where one set of
// clients is alive, what those clients ask of the broker, which tells
// the work their librdkafka threads do apart from the work itself.
type requestCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

// countRequests has broker count every request it answers from now on. It
// only observes: a control that does not handle a request leaves it to the
// broker, which answers it as before.
func countRequests(broker *kfake.Cluster) *requestCounts {
	rc := &requestCounts{n: map[string]int64{}}
	broker.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		rc.mu.Lock()
		rc.n[kmsg.NameForKey(req.Key())]++
		rc.mu.Unlock()
		return nil, nil, false
	})
	return rc
}

// snapshot is the counts so far (nil for a nil counter).
func (rc *requestCounts) snapshot() map[string]int64 {
	if rc == nil {
		return nil
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return maps.Clone(rc.n)
}

// requestsSince is the requests of each kind counted between two
// snapshots (kinds with none left out).
func requestsSince(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// requestList is counts as "Fetch 30, Metadata 15", by kind's name, or
// "none".
func requestList(counts map[string]int64) string {
	if len(counts) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(counts))
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}
