package e2e_test

import (
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const sseConfig = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  sse0:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{ path: /events }]
        exit: kafka0
        with: { topic: events }
      - when: [{ path: /multi }]
        exit: kafka0
        with: { topic: multi }
      - when: [{ path: /snapshots }]
        exit: kafka0
        with: { topic: snapshots }
      - when: [{ path: "/tenants/{tenant}" }]
        exit: kafka0
        with: { topic: "tenant-${params.tenant}", topic-pattern: "tenant-*" }
      - when: [{ path: "/keys/{key}" }]
        exit: kafka0
        with: { topic: multi, filters: [{ key: "${params.key}" }] }
`

func startSSE(t *testing.T, opts ...func(*stack.DevOptions)) *env {
	t.Helper()
	all := []func(*stack.DevOptions){withTopics(
		embedded.Topic{Name: "events", Partitions: 1},
		embedded.Topic{Name: "multi", Partitions: 3},
		embedded.Topic{Name: "snapshots", Partitions: 2, Compact: true},
		embedded.Topic{Name: "tenant-acme", Partitions: 1},
		embedded.Topic{Name: "secret", Partitions: 1},
	)}
	return startEnv(t, sseConfig, append(all, opts...)...)
}

// A record becomes an event: its value in data lines (a value with line
// breaks is one data line per line, joined back by the reader), an id,
// the retry hint first.
func TestSSERecordsAsEvents(t *testing.T) {
	e := startSSE(t)
	e.put("events", 0, "k1", []byte(`{"n":1}`))
	e.put("events", 0, "k2", []byte("line one\nline two\r\nline three"))
	for _, c := range []struct {
		name string
		cl   func() *sseStream
	}{
		{"HTTP/1.1", func() *sseStream { return e.openSSE(e.h1, "/events") }},
		{"HTTP/2", func() *sseStream { return e.openSSE(e.h2c, "/events") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.cl()
			if s.resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", s.resp.StatusCode, s.body(t))
			}
			if got := s.resp.Header.Get("cache-control"); got != "no-cache" {
				t.Errorf("cache-control %q", got)
			}
			evs := s.take(t, 2)
			if evs[0].data != `{"n":1}` || evs[0].typ != "message" || evs[0].id != "AQIAAg==" {
				t.Errorf("first event %+v, want data {\"n\":1} id AQIAAg== ({p0: next 1})", evs[0])
			}
			if evs[1].data != "line one\nline two\nline three" || evs[1].id != "AQIABA==" {
				t.Errorf("second event %+v", evs[1])
			}
			select {
			case r := <-s.retry:
				if r != "2000" {
					t.Errorf("retry %q, want 2000 (limits.sse-retry)", r)
				}
			default:
				t.Error("no retry hint before the events")
			}
			e.put("events", 0, "k3", []byte("live"))
			if ev := s.next(t); ev.data != "live" || ev.id != "AQIABg==" {
				t.Errorf("live event %+v", ev)
			}
		})
	}
}
