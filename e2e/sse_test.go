package e2e_test

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/logbuf"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
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
      - when: [{ path: "/topics/{topic}" }]
        exit: kafka0
        with: { topic: "${params.topic}", topic-pattern: "tenant-*" }
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
	t.Parallel()
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
			if s.resp.ProtoMajor == 1 && (len(s.resp.TransferEncoding) != 1 || s.resp.TransferEncoding[0] != "chunked") {
				t.Errorf("HTTP/1.1 transfer-encoding %v, want chunked (no content-length: the body's end is unknown)", s.resp.TransferEncoding)
			}
			if s.resp.ContentLength != -1 {
				t.Errorf("content-length %d on an event stream", s.resp.ContentLength)
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

// Resume by last-event-id, on a topic of one partition and of three: the
// resumed stream sends exactly the events the first sent after that id
// (none missing, none twice), then what is written afterwards; the id of
// one stream resumes another (HTTP/1.1 then HTTP/2 here).
func TestSSEResumeAcrossPartitions(t *testing.T) {
	t.Parallel()
	e := startSSE(t)
	for _, c := range []struct {
		path, topic string
		partitions  int32
	}{{"/events", "events", 1}, {"/multi", "multi", 3}} {
		t.Run(c.topic, func(t *testing.T) {
			const n = 12
			for i := 0; i < n; i++ {
				e.put(c.topic, int32(i)%c.partitions, fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("%s-%d", c.topic, i)))
			}
			first := e.openSSE(e.h1, c.path)
			all := first.take(t, n)
			first.close()
			checkDistinct(t, all)
			var last *sseStream
			for _, cut := range []int{0, 4, n - 2} {
				resumed := e.openSSE(e.h2c, c.path, "last-event-id", all[cut].id)
				got := resumed.take(t, n-1-cut)
				if want := all[cut+1:]; !sameEvents(got, want) {
					t.Fatalf("resumed after event %d: %v, want %v", cut, datas(got), datas(want))
				}
				last = resumed
			}
			for p := int32(0); p < c.partitions; p++ {
				e.put(c.topic, p, "after", []byte(fmt.Sprintf("after-%d", p)))
			}
			for i, ev := range last.take(t, int(c.partitions)) {
				if !strings.HasPrefix(ev.data, "after-") {
					t.Fatalf("live event %d: %+v", i, ev)
				}
			}
		})
	}
}

// checkDistinct fails on an event sent twice.
func checkDistinct(t *testing.T, evs []sseEvent) {
	t.Helper()
	seen := map[string]bool{}
	for _, ev := range evs {
		if seen[ev.data] {
			t.Fatalf("%q twice in %v", ev.data, datas(evs))
		}
		seen[ev.data] = true
	}
}

// sameEvents reports whether got holds the events of want, each once:
// across partitions their order may differ, within one it may not (the
// values name their order).
func sameEvents(got, want []sseEvent) bool {
	if len(got) != len(want) {
		return false
	}
	a, b := datas(got), datas(want)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func datas(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.data
	}
	return out
}

// A tombstone is a delete event whose data is the record's key; a
// compacted topic streams the key's current records first (from its view:
// a key deleted before the stream opened is not there at all), then the
// changes, deletes among them.
func TestSSETombstonesAndCompactedHistory(t *testing.T) {
	t.Parallel()
	e := startSSE(t)
	e.put("events", 0, "gone", []byte("v1"))
	e.put("events", 0, "gone", nil)
	s := e.openSSE(e.h1, "/events")
	evs := s.take(t, 2)
	if evs[0].typ != "message" || evs[0].data != "v1" || evs[1].typ != "delete" || evs[1].data != "gone" {
		t.Fatalf("log history: %+v", evs)
	}

	e.put("snapshots", 0, "a", []byte("a1"))
	e.put("snapshots", 0, "a", []byte("a2"))
	e.put("snapshots", 1, "b", []byte("b1"))
	e.put("snapshots", 1, "c", []byte("c1"))
	e.put("snapshots", 1, "c", nil)
	e.waitView("snapshots", 5)
	c := e.openSSE(e.h2c, "/snapshots")
	got := c.take(t, 2)
	if !sameEvents(got, []sseEvent{{data: "a2"}, {data: "b1"}}) {
		t.Fatalf("compacted history: %v, want the current records a2 and b1", datas(got))
	}
	e.put("snapshots", 1, "b", nil)
	e.put("snapshots", 1, "d", []byte("d1")) // the same partition as the delete: the order is the log's
	got = c.take(t, 2)
	if got[0].typ != "delete" || got[0].data != "b" || got[1].data != "d1" {
		t.Fatalf("changes after the history: %+v", got)
	}
	// Resuming after the delete sends only what follows it.
	r := e.openSSE(e.h1, "/snapshots", "last-event-id", got[0].id)
	if ev := r.next(t); ev.data != "d1" {
		t.Fatalf("resumed after the delete: %+v", ev)
	}
}

// waitView polls (bounded) until a fresh stream of the compacted topic
// reads past offsets whose sum is n: the view has caught up with what the
// test wrote.
func (e *env) waitView(topic string, n int64) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.endOffsets(topic) < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("topic %s did not reach %d records", topic, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// What an sse-kafka route refuses, and why: each a problem+json with a
// detail saying what to send instead; nothing is streamed.
func TestSSERefusals(t *testing.T) {
	t.Parallel()
	e := startSSE(t)
	e.put("events", 0, "k", []byte("v"))
	e.put("multi", 0, "k", []byte("v"))
	id := e.openSSE(e.h1, "/events").next(t).id
	foreign := base64.StdEncoding.EncodeToString(grpcwire.AppendMessageID(nil, []int64{1, 1, 1}))
	for _, c := range []struct {
		name   string
		path   string
		hdr    []string
		status int
		detail string
	}{
		{"accept absent", "/events", []string{"accept", ""}, 406, "send accept: text/event-stream"},
		{"accept wildcard", "/events", []string{"accept", "*/*"}, 406, `accept "*/*"`},
		{"accept json", "/events", []string{"accept", "application/json"}, 406, "Server-Sent Events"},
		{"accept with q=0", "/events", []string{"accept", "text/event-stream;q=0, */*"}, 406, "send accept"},
		{"malformed last-event-id", "/events", []string{"last-event-id", "not-an-id"}, 400, "not an event id this gateway issued"},
		{"last-event-id of another gateway's shape", "/events", []string{"last-event-id", base64.StdEncoding.EncodeToString([]byte{2, 2, 0, 2})}, 400, "does not start with 0x01"},
		{"repeated last-event-id", "/events", []string{"last-event-id", id, "last-event-id", id}, 400, "sent 2 times"},
		{"oversized last-event-id", "/events", []string{"last-event-id", strings.Repeat("A", 17<<10)}, 400, "more than the 16384"},
		{"id of a topic with more partitions", "/events", []string{"last-event-id", foreign}, 400, "the topic has no partition 1"},
		{"path parameter naming a topic outside topic-pattern", "/topics/secret", nil, 400, `topic "secret" does not match the route's topic-pattern "tenant-*"`},
		{"path parameter making an illegal topic name", "/tenants/..%2Fsecret", nil, 400, `"tenant-../secret" is not a legal Kafka topic name`},
		{"templated topic that does not exist", "/tenants/nobody", nil, 404, `topic "tenant-nobody" does not exist`},
		{"no route", "/nowhere", nil, 404, "no route matches"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, cl := range []*http.Client{e.h1, e.h2c} {
				s := e.openSSE(cl, c.path, c.hdr...)
				p := s.problem(t)
				if s.resp.StatusCode != c.status || p.Status != c.status || !strings.Contains(p.Detail, c.detail) {
					t.Fatalf("%s: %d %+v, want %d with %q", s.resp.Proto, s.resp.StatusCode, p, c.status, c.detail)
				}
			}
		})
	}
	for _, cl := range e.clients() {
		resp, body := e.request(cl, http.MethodPost, "/events", "x", "accept", "text/event-stream")
		if resp.StatusCode != 405 || resp.Header.Get("allow") != "GET, HEAD" || !strings.Contains(body, "accept GET, HEAD") {
			t.Fatalf("POST: %d %v %s", resp.StatusCode, resp.Header, body)
		}
		resp, body = e.request(cl, http.MethodHead, "/events", "")
		// Envoy sends a bodyless local reply without content-type (rule
		// local-reply-content-type).
		if resp.StatusCode != 200 || resp.Header.Get("cache-control") != "no-cache" || body != "" {
			t.Fatalf("HEAD: %d %v %q", resp.StatusCode, resp.Header, body)
		}
	}
	// A path parameter naming another topic by a pattern's wildcard is
	// still held to topic-pattern: tenant-* admits tenant-acme, nothing else.
	if s := e.openSSE(e.h1, "/tenants/acme"); s.resp.StatusCode != 200 {
		t.Fatalf("a topic within topic-pattern: %d %s", s.resp.StatusCode, s.body(t))
	}
}

// An id whose position lies below where the topic now starts (retention
// deleted records after it) is refused with 410 and the offsets, not
// resumed past the gap.
func TestSSEResumeBelowLogStart(t *testing.T) {
	t.Parallel()
	e := startSSE(t)
	for i := 0; i < 6; i++ {
		e.put("events", 0, "k", []byte(fmt.Sprintf("v%d", i)))
	}
	evs := e.openSSE(e.h1, "/events").take(t, 6)
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	topic := "events"
	res, err := a.DeleteRecords(ctxFor(t, 20*time.Second), []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 4}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil {
			t.Fatal(r.TopicPartition.Error)
		}
	}
	s := e.openSSE(e.h2c, "/events", "last-event-id", evs[1].id)
	if p := s.problem(t); s.resp.StatusCode != 410 || !strings.Contains(p.Detail, "partition 0 asked offset 2, the log starts at 4") {
		t.Fatalf("below the log start: %d %+v", s.resp.StatusCode, p)
	}
	// At the log start, or after it, resumes.
	if ev := e.openSSE(e.h1, "/events", "last-event-id", evs[3].id).next(t); ev.data != "v4" {
		t.Fatalf("resumed at the log start: %+v", ev)
	}
}

const sseGuardedConfig = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  sse0:
    type: sse-kafka
    kind: proxy
    options: { credentials: { query: access_token, cookie: session } }
    routes:
      - guarded: { jwt0: ["read:items"] }
        when: [{ path: /events }]
        exit: kafka0
        with: { topic: events, filters: [{ headers: { owner: "${guarded['jwt0'].identity}" } }] }
guards:
  jwt0:
    type: jwt
    options: { issuer: "https://auth.example.com", audience: "https://api.example.com", keys: 'JWKS' }
`

// A guarded route takes the bearer token from the configured query
// parameter or cookie (EventSource cannot set authorization); the identity
// filters the stream; a missing, forged or unprivileged token is refused
// before anything streams; the token is in no log line.
func TestSSEGuardedQueryToken(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	var logs logbuf.Buffer
	e := startEnv(t, strings.ReplaceAll(sseGuardedConfig, "'JWKS'", "'"+is.jwks()+"'"),
		withTopics(embedded.Topic{Name: "events", Partitions: 1}),
		func(o *stack.DevOptions) {
			o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})
	e.put("events", 0, "1", []byte("for alice"), "owner", "alice")
	e.put("events", 0, "2", []byte("for bob"), "owner", "bob")
	alice := is.token()

	for _, c := range []struct {
		name string
		path string
		hdr  []string
	}{
		{"query", "/events?access_token=" + url.QueryEscape(alice), nil},
		{"cookie", "/events", []string{"cookie", "theme=dark; session=" + alice}},
		{"authorization header", "/events", []string{"authorization", "Bearer " + alice}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := e.openSSE(e.h1, c.path, c.hdr...)
			if s.resp.StatusCode != 200 {
				t.Fatalf("%d %s", s.resp.StatusCode, s.body(t))
			}
			if ev := s.next(t); ev.data != "for alice" {
				t.Fatalf("alice's stream: %+v", ev)
			}
		})
	}
	for _, c := range []struct {
		name, path string
		status     int
		detail     string
	}{
		{"no token", "/events", 401, `guard "jwt0"`},
		{"forged token", "/events?access_token=" + url.QueryEscape(is.hmacWithPublicKey()), 401, `guard "jwt0"`},
		{"token without the role", "/events?access_token=" + url.QueryEscape(is.token("scope", "write:items")), 403, "read:items"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := e.openSSE(e.h2c, c.path)
			if p := s.problem(t); s.resp.StatusCode != c.status || !strings.Contains(p.Detail, c.detail) {
				t.Fatalf("%d %+v, want %d with %q", s.resp.StatusCode, p, c.status, c.detail)
			}
		})
	}
	e.dev.Close() // every line is written
	sig := alice[strings.LastIndexByte(alice, '.')+1:]
	if strings.Contains(logs.String(), sig) || strings.Contains(logs.String(), "access_token") {
		t.Fatalf("the token reached the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"/events"`) {
		t.Fatalf("the log has no line of the requests (at debug level), so the check above proves nothing:\n%s", logs.String())
	}
}

// Beside an http-kafka binding, without the binding metadata, a request
// goes to the sse-kafka binding whose routes match its path, any other to
// the http-kafka binding.
func TestSSEBesideHTTPKafka(t *testing.T) {
	t.Parallel()
	e := startEnv(t, `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: localhost:9092 } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
  sse0:
    type: sse-kafka
    kind: proxy
    routes:
      - when: [{ path: /items-events }]
        exit: kafka0
        with: { topic: items }
`, withTopics(embedded.Topic{Name: "items", Partitions: 1, Compact: true}))
	e.put("items", 0, "1", []byte(`{"n":1}`))
	if ev := e.openSSE(e.h1, "/items-events").next(t); ev.data != `{"n":1}` {
		t.Fatalf("the sse-kafka route: %+v", ev)
	}
	resp, body := e.request(e.h1, http.MethodGet, "/items/1", "", "prefer", "wait=5")
	if resp.StatusCode != 200 || body != `{"n":1}` {
		t.Fatalf("the http-kafka route: %d %s", resp.StatusCode, body)
	}
	if resp, _ := e.request(e.h1, http.MethodGet, "/nowhere", ""); resp.StatusCode != 404 {
		t.Fatalf("no route: %d", resp.StatusCode)
	}
}

// With the shipped CORS blocks uncommented, a cross-origin EventSource's
// stream (a streamed answer, not a local reply) carries
// access-control-allow-origin, and Envoy answers a preflight naming
// last-event-id (a client that sets the header itself sends one).
func TestSSECrossOrigin(t *testing.T) {
	t.Parallel()
	e := startSSE(t, withCORS(t))
	e.put("events", 0, "k", []byte("v"))
	const origin = "https://app.example.com"
	for _, c := range e.clients() {
		s := e.openSSE(c, "/events", "origin", origin)
		if s.resp.StatusCode != 200 || s.resp.Header.Get("access-control-allow-origin") != origin {
			t.Fatalf("%s: %d %v, want the stream with access-control-allow-origin", s.resp.Proto, s.resp.StatusCode, s.resp.Header)
		}
		if ev := s.next(t); ev.data != "v" {
			t.Fatalf("%+v", ev)
		}
		resp, _ := e.request(c, http.MethodOptions, "/events", "", "origin", origin,
			"access-control-request-method", "GET", "access-control-request-headers", "last-event-id")
		if resp.StatusCode != 200 || resp.Header.Get("access-control-allow-origin") != origin || resp.Header.Get("access-control-allow-headers") == "" {
			t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
		}
	}
}
