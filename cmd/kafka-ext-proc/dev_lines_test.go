//go:build !nodev

package main

import (
	"slices"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// dev's banner gives an sse-kafka route a curl line that follows its
// stream: -N, and the accept the route requires.
func TestTryLinesOfAnSSERoute(t *testing.T) {
	cfg, err := config.Parse("sse.yaml", []byte(`
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "k:9092" } }
  sse0:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{ path: "/events/{tenant}" }]
        exit: kafka0
        with: { topic: "events-${params.tenant}", topic-pattern: "events-*" }
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := tryLines(cfg, "127.0.0.1:8080")
	want := "curl -N 'http://127.0.0.1:8080/events/1' -H 'accept: text/event-stream'"
	if !slices.Contains(got, want) {
		t.Fatalf("lines %q, want %q among them", got, want)
	}
}
