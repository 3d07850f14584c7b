package e2e_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// The hostile-input audit: every row of the error table (docs/reliability.md)
// for both bindings, through the emulator with real clients, each answer
// checked for its status and a specific detail (problem+json) or grpc-message.
// SECURITY.md lists each input with the test that shows it.
//
// The broker of these tests creates topics on metadata requests
// (kfake.AllowAutoTopicCreation), as a careless production cluster does: a
// topic missing afterwards proves that no request asked for it.

const auditConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: "/t/{name}/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.name}", topic-pattern: "t-*", filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: "/any/{name}/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.name}", topic-pattern: "*", filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: "/tail/{name}/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.name}", topic-pattern: "*-public", filters: [{ key: "${params.id}" }] }
      - when: [{ method: POST, path: "/t/{name}" }]
        exit: kafka0
        with: { capability: produce, topic: "${params.name}", topic-pattern: "t-*", key: k }
      - when: [{ method: POST, path: "/any/{name}" }]
        exit: kafka0
        with: { capability: produce, topic: "${params.name}", topic-pattern: "*", key: k }
      - when: [{ method: POST, path: "/tail/{name}" }]
        exit: kafka0
        with: { capability: produce, topic: "${params.name}", topic-pattern: "*-public", key: k }
      - when: [{ method: POST, path: /ghost }]
        exit: kafka0
        with: { capability: produce, topic: ghost, key: k }
      - when: [{ method: POST, path: /keyless }]
        exit: kafka0
        with: { capability: produce, topic: items }
      - when: [{ method: POST, path: /items }]
        exit: kafka0
        with: { capability: produce, topic: items, key: "${idempotencyKey}" }
      - when: [{ method: POST, path: /requests }, { method: GET, path: "/requests;cid={correlationId}" }]
        exit: kafka0
        with: { capability: produce, topic: requests, reply-to: replies, async: { location: "/requests;cid=${correlationId}" } }
      - when: [{ method: POST, path: /sync }]
        exit: kafka0
        with: { capability: produce, topic: requests, reply-to: replies }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ method: audit.Items/Fetch }]
        exit: kafka0
        with: { capability: fetch, topic: items }
      - when: [{ method: audit.Items/Put }]
        exit: kafka0
        with: { capability: produce, topic: items }
      - when: [{ method: audit.Ghost/Fetch }]
        exit: kafka0
        with: { capability: fetch, topic: ghost }
      - when: [{ method: audit.Ghost/Put }]
        exit: kafka0
        with: { capability: produce, topic: ghost, key: k }
      - guarded: { users: [] }
        when: [{ method: audit.Mine/Fetch }]
        exit: kafka0
        with: { capability: fetch, topic: "${guarded['users'].identity}", topic-pattern: "t-*" }
      - guarded: { users: [] }
        when: [{ method: audit.Mine/Put }]
        exit: kafka0
        with: { capability: produce, topic: "${guarded['users'].identity}", topic-pattern: "t-*", key: k }
      - guarded: { users: [] }
        when: [{ method: audit.Any/Fetch }]
        exit: kafka0
        with: { capability: fetch, topic: "${guarded['users'].identity}", topic-pattern: "*" }
      - guarded: { users: [] }
        when: [{ method: audit.Any/Put }]
        exit: kafka0
        with: { capability: produce, topic: "${guarded['users'].identity}", topic-pattern: "*", key: k }
      - guarded: { users: [] }
        when: [{ method: audit.Tail/Put }]
        exit: kafka0
        with: { capability: produce, topic: "${guarded['users'].identity}", topic-pattern: "*-public", key: k }
      - when: [{ method: audit.Call/Do }]
        exit: kafka0
        with: { capability: produce, topic: requests, reply-to: replies }
guards:
  users: { type: envoy-jwt, options: { provider: test } }
limits: { max-body: 1KiB, kafka-timeout: 2s, reply-timeout: 1s, max-wait: 2s }
`

// The names requests of the audit ask for and that must never exist.
var auditForbiddenTopics = []string{
	"t-missing", "t-missing-grpc", "other", "_internal", "_schemas", "ghost",
	"t-a/b", "t-..", "t-\xff", "t-a b", "..",
}

func startAudit(t *testing.T) *env {
	t.Helper()
	e := startEnv(t, auditConfig, withAuditUsers)
	// Configured topics exist (the dev stack creates them); the static
	// `ghost` is deleted now so its routes meet a missing topic.
	if err := e.dev.Broker.Cluster().DeleteTopic("ghost"); err != nil {
		t.Fatal(err)
	}
	for name, configs := range map[string]map[string]string{
		"t-exists": nil,
		"t-small":  {"max.message.bytes": "300"},
		"secret":   {"cleanup.policy": "compact"},
	} {
		if err := e.dev.Broker.Cluster().CreateTopic(name, 1, configs); err != nil {
			t.Fatal(err)
		}
	}
	e.put("items", 0, "k", []byte("v"))
	auditSeen(t, e, "/items/k")
	return e
}

// auditSeen waits until the view answers path (a long poll on a missing
// key waits for it to appear).
func auditSeen(t *testing.T, e *env, path string) {
	t.Helper()
	for i := 0; i < 10; i++ {
		if resp, _ := e.request(e.h1, "GET", path, "", "prefer", "wait=2"); resp.StatusCode == http.StatusOK {
			return
		}
	}
	t.Fatalf("GET %s: the view never read the record", path)
}

// TestAuditErrorTableHTTP walks the error table for http-kafka: the
// processor's answers of docs/reliability.md that malformed or hostile
// input can cause.
func TestAuditErrorTableHTTP(t *testing.T) {
	t.Parallel()
	e := startAudit(t)

	t.Run("no route", func(t *testing.T) {
		resp, body := e.request(e.h1, "PATCH", "/nowhere", "x")
		auditProblem(t, "no route", resp, body, http.StatusNotFound, "no route matches PATCH /nowhere")
	})

	t.Run("malformed input", func(t *testing.T) {
		for _, key := range []string{"not valid!", strings.Repeat("k", 129), "ключ"} {
			resp, body := e.request(e.h1, "POST", "/items", "x", "idempotency-key", key)
			auditProblem(t, "idempotency key "+key[:min(len(key), 12)], resp, body, http.StatusBadRequest, "idempotency-key", "1 to 128 characters")
		}
		resp, body := e.request(e.h1, "POST", "/items", "x", "idempotency-key", "a", "idempotency-key", "b")
		auditProblem(t, "two idempotency keys", resp, body, http.StatusBadRequest, "send one idempotency-key")
		resp, body = e.request(e.h1, "POST", "/keyless", "x")
		auditProblem(t, "no key for a compacted topic", resp, body, http.StatusBadRequest, `topic "items" is compacted`, "with.key")
	})

	t.Run("topic pattern", func(t *testing.T) {
		for _, c := range []struct{ method, path, says string }{
			{"POST", "/t/other", `topic "other" does not match the route's topic-pattern "t-*"`},
			{"GET", "/t/other/k", `topic "other" does not match the route's topic-pattern "t-*"`},
			{"POST", "/any/_internal", `topic "_internal" is not allowed`},
			{"GET", "/any/_schemas/k", `topic "_schemas" is not allowed`},
		} {
			resp, body := e.request(e.h1, c.method, c.path, "x")
			auditProblem(t, c.method+" "+c.path, resp, body, http.StatusBadRequest, c.says)
		}
	})

	t.Run("topic name not legal", func(t *testing.T) {
		// librdkafka takes topic names as C strings: "secret\x00-public"
		// matches the glob *-public but reaches Kafka as "secret". A
		// resolved name must be a legal Kafka topic name before it is
		// matched, read or written.
		e.put("secret", 0, "k", []byte("not yours"))
		for _, c := range []struct{ method, path, topic string }{
			{"GET", "/tail/secret%00-public/k", `"secret\x00-public"`},
			{"POST", "/tail/secret%00-public", `"secret\x00-public"`},
			{"GET", "/t/t-%FF/k", `"t-\xff"`},
			{"POST", "/t/t-%FF", `"t-\xff"`},
			{"POST", "/t/t-..", ""},
			{"GET", "/any/../k", `".."`},
			{"POST", "/t/t-" + strings.Repeat("x", 248), "is not a legal Kafka topic name"},
			{"POST", "/t/t-a%20b", `"t-a b"`},
			{"POST", "/t/t-a%2Fb", `"t-a/b"`},
			{"GET", "/t/t-a%2Fb/k", `"t-a/b"`},
		} {
			resp, body := e.request(e.h1, c.method, c.path, "x")
			if c.path == "/t/t-.." { // a legal name ("." and ".." alone are not)
				auditProblem(t, c.method+" "+c.path, resp, body, http.StatusNotFound, `topic "t-.." does not exist`)
				continue
			}
			auditProblem(t, c.method+" "+c.path, resp, body, http.StatusBadRequest, c.topic, "is not a legal Kafka topic name")
		}
		if recs := auditRecords(t, e.dev.Broker.Addr(), "secret", nil); len(recs) != 1 {
			t.Errorf("topic secret has %d records, want only its own", len(recs))
		}
	})

	t.Run("templated topic missing", func(t *testing.T) {
		for _, method := range []string{"POST", "GET"} {
			path := "/t/t-missing"
			if method == "GET" {
				path += "/k"
			}
			start := time.Now()
			resp, body := e.request(e.h1, method, path, "x")
			auditProblem(t, method+" "+path, resp, body, http.StatusNotFound, `topic "t-missing" does not exist`)
			if took := time.Since(start); took > 2*time.Second+500*time.Millisecond {
				t.Errorf("%s %s: answered after %v, want within the Kafka timeout", method, path, took)
			}
		}
	})

	t.Run("body over max-body", func(t *testing.T) {
		for _, c := range []*http.Client{e.h1, e.h2c} {
			resp, body := e.request(c, "POST", "/t/t-exists", strings.Repeat("x", 1025))
			auditProblem(t, "body of 1025 bytes", resp, body, http.StatusRequestEntityTooLarge, "limits.max-body (1024 bytes)")
		}
	})

	t.Run("static topic missing", func(t *testing.T) {
		// Produce: 503 + retry-after (the route's own topic: the service's
		// problem, not the caller's). Fetch of a missing static topic:
		// TestFetchWhileTheTopicIsMissing (the view is not ready: 503).
		resp, body := e.request(e.h1, "POST", "/ghost", "x")
		auditProblem(t, "POST /ghost", resp, body, http.StatusServiceUnavailable, `topic "ghost" does not exist`)
		if resp.Header.Get("retry-after") == "" {
			t.Errorf("POST /ghost: 503 without retry-after")
		}
	})

	t.Run("broker rejected", func(t *testing.T) {
		resp, body := e.request(e.h1, "POST", "/t/t-small", strings.Repeat("x", 1000))
		auditProblem(t, "record over the topic's max.message.bytes", resp, body, http.StatusBadGateway, `Kafka refused the record for topic "t-small"`, "too large")
	})

	t.Run("reply timeout", func(t *testing.T) {
		start := time.Now()
		resp, body := e.request(e.h1, "POST", "/sync", "x", "idempotency-key", "audit-sync-1")
		auditProblem(t, "sync without a reply", resp, body, http.StatusGatewayTimeout, "limits.reply-timeout (1s)", "same idempotency-key")
		resp, body = e.request(e.h1, "POST", "/requests", "x")
		if resp.StatusCode != http.StatusAccepted || !strings.HasPrefix(resp.Header.Get("location"), "/requests;cid=") {
			t.Errorf("async route without a reply: %d %q %v, want 202 + location", resp.StatusCode, body, resp.Header)
		}
		t.Logf("two reply timeouts in %v", time.Since(start))
	})

	auditNoTopics(t, e, auditForbiddenTopics...)
}

// auditFrame is one length-prefixed gRPC message.
func auditFrame(flag byte, msg []byte) []byte {
	return append([]byte{flag, byte(len(msg) >> 24), byte(len(msg) >> 16), byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// TestAuditErrorTableGRPC walks the error table for grpc-kafka: the
// processor's answers of docs/reliability.md that malformed or hostile
// input can cause.
func TestAuditErrorTableGRPC(t *testing.T) {
	t.Parallel()
	e := startAudit(t)
	user := func(name string) []string { return []string{"x-user", name} }

	t.Run("no route", func(t *testing.T) {
		_, err := auditUnary(e, "/audit.Nowhere/Call", nil)
		auditStatus(t, "no route", err, codes.Unimplemented, "no route matches audit.Nowhere/Call")
		c, msg := auditGRPCRaw(t, e, "/not-a-grpc-path", auditFrame(0, nil))
		if c != codes.Unimplemented || !strings.Contains(msg, "malformed gRPC path") {
			t.Errorf("malformed gRPC path: %v %q", c, msg)
		}
	})

	t.Run("malformed input", func(t *testing.T) {
		_, err := auditUnary(e, "/audit.Call/Do", []byte("x"), "idempotency-key", "not valid!")
		auditStatus(t, "bad idempotency key", err, codes.InvalidArgument, "idempotency-key", "1 to 128 characters")
		_, err = auditUnary(e, "/audit.Items/Put", []byte("x"))
		auditStatus(t, "no key for a compacted topic", err, codes.InvalidArgument, `topic "items" is compacted`)
		// Frames: one cut short by the end of the stream, a length over
		// max-body announced by the prefix alone, a compressed flag without
		// grpc-encoding, and a flag byte gRPC does not define.
		for _, c := range []struct {
			name string
			body []byte
			code codes.Code
			says string
		}{
			{"truncated frame", auditFrame(0, []byte("0123456789"))[:8], codes.InvalidArgument, "ended inside a message"},
			{"truncated prefix", []byte{0, 0, 0}, codes.InvalidArgument, "ended inside a message"},
			{"length over max-body", []byte{0, 0x7f, 0xff, 0xff, 0xff, 'x'}, codes.ResourceExhausted, "larger than limits.max-body (1024 bytes)"},
			{"compressed flag", auditFrame(1, []byte("x")), codes.Unimplemented, "compressed request messages"},
			{"unknown flag", auditFrame(0x80, []byte("x")), codes.InvalidArgument, "malformed request message"},
		} {
			code, msg := auditGRPCRaw(t, e, "/audit.Call/Do", c.body)
			if code != c.code || !strings.Contains(msg, c.says) {
				t.Errorf("%s: %v %q, want %v saying %q", c.name, code, msg, c.code, c.says)
			}
		}
		for _, id := range []string{"!!!!", "AQ", "AgIAAg", "AQIAAgA", strings.Repeat("A", 4096)} {
			err := auditFetch(e, "/audit.Items/Fetch", "last-message-id", id)
			auditStatus(t, "message id "+id[:min(len(id), 8)], err, codes.InvalidArgument, "last-message-id is not a message id")
		}
		err = auditFetch(e, "/audit.Items/Fetch", "last-message-id-bin", string([]byte{9, 9, 9}))
		auditStatus(t, "binary message id", err, codes.InvalidArgument, "last-message-id-bin is not a message id")
		_, err = auditUnary(e, "/audit.Items/Fetch", []byte("not empty"))
		auditStatus(t, "non-empty fetch request", err, codes.InvalidArgument, "empty request")
	})

	t.Run("guard", func(t *testing.T) {
		// Every refused token: TestGuardsGRPC. Here: no identity at all.
		_, err := auditUnary(e, "/audit.Mine/Put", []byte("x"))
		auditStatus(t, "no credentials", err, codes.Unauthenticated, `guard "users"`)
	})

	t.Run("topic pattern", func(t *testing.T) {
		for _, c := range []struct {
			method, user, says string
		}{
			{"/audit.Mine/Put", "other", `topic "other" does not match the route's topic-pattern "t-*"`},
			{"/audit.Mine/Fetch", "other", `topic "other" does not match the route's topic-pattern "t-*"`},
			{"/audit.Any/Put", "_internal", `topic "_internal" is not allowed`},
			{"/audit.Any/Fetch", "_schemas", `topic "_schemas" is not allowed`},
		} {
			var err error
			if strings.HasSuffix(c.method, "/Fetch") {
				err = auditFetch(e, c.method, user(c.user)...)
			} else {
				_, err = auditUnary(e, c.method, []byte("x"), user(c.user)...)
			}
			auditStatus(t, c.method+" as "+c.user, err, codes.InvalidArgument, c.says)
		}
	})

	t.Run("topic name not legal", func(t *testing.T) {
		// An identity is whatever the token's subject holds.
		// (grpc-go base64-encodes -bin values itself.)
		_, err := auditUnary(e, "/audit.Tail/Put", []byte("written?"), "x-user-bin", "secret\x00-public")
		auditStatus(t, "identity secret\\x00-public", err, codes.InvalidArgument, "is not a legal Kafka topic name")
		if recs := auditRecords(t, e.dev.Broker.Addr(), "secret", nil); len(recs) != 0 {
			t.Errorf("topic secret has %d records, want none", len(recs))
		}
	})

	t.Run("templated topic missing", func(t *testing.T) {
		_, err := auditUnary(e, "/audit.Mine/Put", []byte("x"), user("t-missing-grpc")...)
		auditStatus(t, "produce", err, codes.NotFound, `topic "t-missing-grpc" does not exist`)
		err = auditFetch(e, "/audit.Mine/Fetch", user("t-missing-grpc")...)
		auditStatus(t, "fetch", err, codes.NotFound, `topic "t-missing-grpc" does not exist`)
	})

	t.Run("message over max-body", func(t *testing.T) {
		_, err := auditUnary(e, "/audit.Mine/Put", make([]byte, 1025), user("t-exists")...)
		auditStatus(t, "1025 bytes", err, codes.ResourceExhausted, "larger than limits.max-body (1024 bytes)")
	})

	t.Run("static topic missing", func(t *testing.T) {
		_, err := auditUnary(e, "/audit.Ghost/Put", []byte("x"))
		auditStatus(t, "produce", err, codes.Unavailable, `topic "ghost" does not exist`)
		err = auditFetch(e, "/audit.Ghost/Fetch")
		auditStatus(t, "fetch", err, codes.Unavailable, `topic "ghost" does not exist`)
	})

	t.Run("broker rejected", func(t *testing.T) {
		_, err := auditUnary(e, "/audit.Mine/Put", make([]byte, 1000), user("t-small")...)
		auditStatus(t, "record over the topic's max.message.bytes", err, codes.ResourceExhausted, `topic "t-small"`, "too large")
	})

	t.Run("reply timeout", func(t *testing.T) {
		start := time.Now()
		_, err := auditUnary(e, "/audit.Call/Do", []byte("x"))
		auditStatus(t, "no reply", err, codes.DeadlineExceeded, "limits.reply-timeout (1s)")
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("answered after %v", took)
		}
	})

	auditNoTopics(t, e, auditForbiddenTopics...)
}

const auditFaultsConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: "/events/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: events, key: "${params.id}", acks: leader_only }
      - when: [{ method: GET, path: "/t/{name}/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.name}", topic-pattern: "t-*", filters: [{ key: "${params.id}" }] }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ method: audit.Events/Put }]
        exit: kafka0
        with: { capability: produce, topic: events, key: k, acks: leader_only }
      - guarded: { users: [] }
        when: [{ method: audit.Mine/Fetch }]
        exit: kafka0
        with: { capability: fetch, topic: "${guarded['users'].identity}", topic-pattern: "t-*" }
guards:
  users: { type: envoy-jwt, options: { provider: test } }
limits: { kafka-timeout: 4s }
`

// TestAuditKafkaFaults: the rows of the error table where Kafka fails, for both
// bindings — a record enqueued but not acknowledged within limits.kafka-timeout
// (504 / UNAVAILABLE, "may or may not"), then the broker gone: records not
// enqueued and views that cannot start (503 + retry-after / UNAVAILABLE). Each
// answer comes within the Kafka timeout. (TestProduceBrokerFaults shows that
// every 2xx was written and no 503.)
func TestAuditKafkaFaults(t *testing.T) {
	t.Parallel()
	var sw *switchedListener
	var logs auditLog
	e := startEnv(t, auditFaultsConfig, withAuditUsers, switched(&sw), func(o *stack.DevOptions) {
		o.Logger = logs.logger()
		o.BrokerOptions.Logger = slog.New(slog.DiscardHandler)
	})
	// 4s keeps the 2 s between a record's own timeout and the answer's
	// (messageTimeout in kafkaio) that the default 5s has; at 2s it is
	// 1.3 s, little on a busy machine for librdkafka to report a record
	// that never left before the answer must go (503, not 504).
	const kafkaTimeout = 4 * time.Second
	if _, err := auditUnary(e, "/audit.Events/Put", []byte("warm")); err != nil {
		t.Fatalf("gRPC produce before the faults: %v", err)
	}
	if resp, body := e.request(e.h1, "POST", "/events/warm", "warm"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("HTTP produce before the faults: %d %s", resp.StatusCode, body)
	}
	within := func(what string, start time.Time) {
		if took := time.Since(start); took > kafkaTimeout+time.Second {
			t.Errorf("%s: answered after %v, want within the Kafka timeout (%v)", what, took, kafkaTimeout)
		}
	}

	t.Run("not acknowledged", func(t *testing.T) {
		// The broker holds every produce request for events until the
		// answers are in, then writes the records, late.
		wake := make(chan struct{})
		var woken atomic.Bool
		cluster := e.dev.Broker.Cluster()
		cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			if woken.Load() {
				cluster.DropControl()
				return nil, nil, false
			}
			for _, tp := range req.(*kmsg.ProduceRequest).Topics {
				if tp.Topic == "events" {
					cluster.SleepControl(func() { <-wake })
					break
				}
			}
			return nil, nil, false
		})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			start := time.Now()
			resp, body := e.request(e.h1, "POST", "/events/late", "late")
			auditProblem(t, "HTTP", resp, body, http.StatusGatewayTimeout, "did not acknowledge", "may or may not")
			within("HTTP", start)
		}()
		go func() {
			defer wg.Done()
			start := time.Now()
			_, err := auditUnary(e, "/audit.Events/Put", []byte("late"))
			auditStatus(t, "gRPC", err, codes.Unavailable, "not acknowledged in time", "may or may not")
			within("gRPC", start)
		}()
		wg.Wait()
		woken.Store(true)
		close(wake)
	})

	t.Run("broker gone", func(t *testing.T) {
		gone := logs.on("no broker reachable", "acks=leader")
		sw.set(t, false)
		auditWaitFor(t, "the producer to see the broker go", gone)
		var wg sync.WaitGroup
		run := func(f func()) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f()
			}()
		}
		run(func() {
			start := time.Now()
			resp, body := e.request(e.h1, "POST", "/events/down", "down")
			auditProblem(t, "HTTP produce", resp, body, http.StatusServiceUnavailable, "was not written to Kafka", "retrying is safe")
			if resp.Header.Get("retry-after") == "" {
				t.Error("HTTP produce: 503 without retry-after")
			}
			within("HTTP produce", start)
		})
		run(func() {
			start := time.Now()
			resp, body := e.request(e.h1, "GET", "/t/t-never-opened/k", "")
			auditProblem(t, "HTTP fetch of a new view", resp, body, http.StatusServiceUnavailable, `the view of topic "t-never-opened" is not ready`)
			if resp.Header.Get("retry-after") == "" {
				t.Error("HTTP fetch: 503 without retry-after")
			}
			within("HTTP fetch", start)
		})
		run(func() {
			start := time.Now()
			_, err := auditUnary(e, "/audit.Events/Put", []byte("down"))
			auditStatus(t, "gRPC produce", err, codes.Unavailable, `topic "events"`)
			within("gRPC produce", start)
		})
		run(func() {
			start := time.Now()
			err := auditFetch(e, "/audit.Mine/Fetch", "x-user", "t-never-opened")
			auditStatus(t, "gRPC fetch", err, codes.Unavailable, `topic "t-never-opened"`)
			within("gRPC fetch", start)
		})
		wg.Wait()
	})
}

// TestAuditHeaderDenyList: request headers that are credentials, belong to the
// connection or to Envoy, or are meant for the processor never reach a Kafka
// record (docs/design.md#http-kafka-produce), read back with a librdkafka
// consumer: through the emulator (HTTP/1.1 and h2c, hop-by-hop headers as a raw
// HTTP/1.1 client sends them), from an ext_proc peer that forwards every header
// (an Envoy that strips nothing), and as gRPC metadata.
func TestAuditHeaderDenyList(t *testing.T) {
	t.Parallel()
	e := startAudit(t)
	denied := []string{
		"authorization", "Bearer deny-token", "cookie", "session=deny-cookie", "proxy-authorization", "Basic ZGVueTpkZW55",
		"x-envoy-original-path", "/admin", "x-envoy-internal", "true", "x-envoy-expected-rq-timeout-ms", "1",
		"prefer", "respond-async", "te", "trailers",
	}
	for i, c := range []*http.Client{e.h1, e.h2c} {
		key := "deny-client-" + strconv.Itoa(i)
		hdr := append([]string{"idempotency-key", key, "x-kept", "yes", "content-type", "text/plain"}, denied...)
		resp, body := e.request(c, "POST", "/requests", "body", hdr...)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("HTTP/%d: %d %q, want 202", resp.ProtoMajor, resp.StatusCode, body)
		}
	}
	raw := "POST /requests HTTP/1.1\r\nHost: audit\r\nIdempotency-Key: deny-raw\r\nX-Kept: yes\r\n" +
		"Connection: keep-alive, x-hop\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n" +
		"TE: trailers\r\nTrailer: x-trailer\r\nPrefer: respond-async\r\nCookie: a=deny-cookie\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\nx-trailer: t\r\n\r\n"
	if resp, body, err := auditRaw(t, e.dev.Front(), []byte(raw)); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("raw HTTP/1.1: %v %q %v, want 202", resp, body, err)
	}
	peer := [][2]string{
		{":method", "POST"}, {":path", "/requests"}, {":authority", "audit"}, {":scheme", "http"},
		{"idempotency-key", "deny-peer"}, {"x-kept", "yes"}, {"content-length", "4"},
		{"connection", "keep-alive"}, {"keep-alive", "timeout=5"}, {"proxy-connection", "keep-alive"},
		{"transfer-encoding", "chunked"}, {"upgrade", "websocket"}, {"te", "trailers"}, {"trailer", "x-t"},
	}
	for i := 0; i+1 < len(denied); i += 2 {
		peer = append(peer, [2]string{denied[i], denied[i+1]})
	}
	if st := auditPeer(t, e, peer, "body"); st != http.StatusAccepted {
		t.Fatalf("ext_proc peer: %d, want 202", st)
	}
	recs := auditRecords(t, e.dev.Broker.Addr(), "requests", nil)
	for _, key := range []string{"deny-client-0", "deny-client-1", "deny-raw", "deny-peer"} {
		m := auditRecordWith(t, recs, "idempotency-key", key)
		auditCheckHeaders(t, key, m, "x-kept", ":path", "gateway:correlation-id")
		if string(m.Value) != "body" {
			t.Errorf("%s: value %q", key, m.Value)
		}
	}

	t.Run("gRPC metadata", func(t *testing.T) {
		md := append([]string{"x-user", "t-exists", "x-kept", "yes", "idempotency-key", "deny-grpc"}, denied...)
		if _, err := auditUnary(e, "/audit.Mine/Put", []byte("body"), md...); err != nil {
			t.Fatalf("gRPC produce: %v", err)
		}
		m := auditRecordWith(t, auditRecords(t, e.dev.Broker.Addr(), "t-exists", nil), "meta:idempotency-key", "deny-grpc")
		auditCheckHeaders(t, "gRPC", m, "meta:x-kept")
	})
}

// TestAuditSecretsNeverLogged: a bearer token (accepted, and refused), a
// cookie, a proxy credential and the SASL password of the kafka binding
// appear neither in the processor's logs — captured at debug level, with
// librdkafka's own debug output for its configuration and security — nor
// in the records written, nor in the answers. The broker requires SASL, so
// the password is really used.
func TestAuditSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	const (
		saslPassword = "sasl-S3cret-audit-0001"
		cookie       = "cookie-S3cret-audit-0002"
		proxyCred    = "cHJveHktUzNjcmV0LWF1ZGl0LTAwMDM"
	)
	is := newIssuer(t)
	token := is.token("sub", "audit-user")
	expired := is.token("sub", "audit-user", "exp", time.Now().Add(-time.Hour).Unix())
	config := `
bindings:
  kafka0:
    type: kafka
    kind: client
    options:
      bootstrap.servers: "localhost:9092"
      security.protocol: SASL_PLAINTEXT
      sasl.mechanism: PLAIN
      sasl.username: audit
      sasl.password: "` + saslPassword + `"
      debug: "conf,security"
      log_level: "7"
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - guarded: { jwt0: [] }
        when: [{ method: POST, path: /requests }, { method: GET, path: "/requests;cid={correlationId}" }]
        exit: kafka0
        with: { capability: produce, topic: requests, reply-to: replies, async: { location: "/requests;cid=${correlationId}" } }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - guarded: { jwt0: [] }
        when: [{ method: audit.Secret/Put }]
        exit: kafka0
        with: { capability: produce, topic: requests, key: k }
guards:
  jwt0:
    type: jwt
    options: { issuer: "https://auth.example.com", audience: "https://api.example.com", keys: '` + is.jwks() + `' }
limits: { kafka-timeout: 3s }
`
	var logs auditLog
	e := startEnv(t, config, func(o *stack.DevOptions) {
		o.Logger = logs.logger()
		o.BrokerOptions.Logger = slog.New(slog.DiscardHandler) // the broker's logs are not the processor's
		o.BrokerOptions.Extra = append(o.BrokerOptions.Extra, kfake.EnableSASL(), kfake.Superuser("PLAIN", "audit", saslPassword))
	})
	sasl := kafka.ConfigMap{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "audit", "sasl.password": saslPassword}
	secrets := []string{saslPassword, cookie, proxyCred, token, expired}
	// A token's signature alone is a secret too (header and claims are not).
	for _, tok := range []string{token, expired} {
		secrets = append(secrets, tok[strings.LastIndexByte(tok, '.')+1:])
	}
	hdr := []string{"authorization", "Bearer " + token, "cookie", "session=" + cookie,
		"proxy-authorization", "Basic " + proxyCred, "prefer", "respond-async", "idempotency-key", "secrets-1"}
	var answers strings.Builder
	for _, c := range []*http.Client{e.h1, e.h2c} {
		resp, body := e.request(c, "POST", "/requests", "body", hdr...)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("with a valid token: %d %q, want 202", resp.StatusCode, body)
		}
		resp, body = e.request(c, "POST", "/requests", "body", "authorization", "Bearer "+expired, "cookie", "session="+cookie)
		auditProblem(t, "expired token", resp, body, http.StatusUnauthorized, "expired")
		fmt.Fprintln(&answers, resp.Header, body)
	}
	if _, err := auditUnary(e, "/audit.Secret/Put", []byte("body"), "authorization", "Bearer "+expired, "cookie", "session="+cookie); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC with an expired token: %v, want UNAUTHENTICATED", err)
	} else {
		fmt.Fprintln(&answers, err)
	}
	if _, err := auditUnary(e, "/audit.Secret/Put", []byte("body"), "authorization", "Bearer "+token, "cookie", "session="+cookie,
		"proxy-authorization", "Basic "+proxyCred); err != nil {
		t.Errorf("gRPC with a valid token: %v", err)
	}

	// The two HTTP requests share an idempotency key: the second is a
	// replay and writes nothing.
	recs := auditRecords(t, e.dev.Broker.Addr(), "requests", sasl)
	if len(recs) != 2 {
		t.Fatalf("%d records, want the requests' (one HTTP, one gRPC)", len(recs))
	}
	var written strings.Builder
	for _, m := range recs {
		fmt.Fprintf(&written, "%s %s\n", m.Key, m.Value)
		for _, h := range m.Headers {
			fmt.Fprintf(&written, "%s: %s\n", h.Key, h.Value)
		}
	}
	logged := logs.text()
	// The capture is real: debug lines of the exchange, of librdkafka's
	// configuration dump and of its SASL handshake are there.
	for _, want := range []string{"route matched", "Client configuration", "SASL PLAIN"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the captured log has no %q: the capture is blind", want)
		}
	}
	for _, where := range []struct{ name, text string }{{"the logs", logged}, {"the records", written.String()}, {"the answers", answers.String()}} {
		for _, secret := range secrets {
			if i := strings.Index(where.text, secret); i >= 0 {
				line := where.text[strings.LastIndexByte(where.text[:i], '\n')+1:]
				line, _, _ = strings.Cut(line, "\n")
				t.Errorf("a secret (%.12s…) is in %s: %s", secret, where.name, line)
			}
		}
	}
	t.Logf("%d bytes of debug log, %d records searched", len(logged), len(recs))
}

// TestAuditHostileRequests: requests shaped to hurt — oversized and
// numerous headers, invalid UTF-8 and NUL in paths, `..` and `%2F` in path
// parameters, huge `prefer: wait` values, malformed `if-none-match` and
// `grpc-timeout` — each get a clear answer, and the processor goes on
// serving with no exchange left behind. Where the front (Envoy, here its
// emulator) refuses a request itself, the same input is also sent straight
// to the processor by an ext_proc peer.
func TestAuditHostileRequests(t *testing.T) {
	t.Parallel()
	e := startAudit(t)
	e.put("items", 0, "a/b", []byte("slash"))
	e.put("items", 0, "..", []byte("dots"))
	auditSeen(t, e, "/items/a%2Fb")
	auditSeen(t, e, "/items/..")
	resp, _ := e.request(e.h1, "GET", "/items/k", "")
	etag := resp.Header.Get("etag")
	if resp.StatusCode != http.StatusOK || etag == "" {
		t.Fatalf("GET /items/k: %d", resp.StatusCode)
	}
	type answer struct {
		status int
		body   string // exact body, or "" for a problem
		says   string // for a problem: part of its detail
	}
	check := func(what string, resp *http.Response, body string, want answer) {
		t.Helper()
		if want.says != "" {
			auditProblem(t, what, resp, body, want.status, want.says)
			return
		}
		if resp.StatusCode != want.status || body != want.body {
			t.Errorf("%s: %d %.100q, want %d %q", what, resp.StatusCode, body, want.status, want.body)
		}
	}

	t.Run("oversized and many headers", func(t *testing.T) {
		many := func(n int) []string {
			var hdr []string
			for i := 0; i < n; i++ {
				hdr = append(hdr, "x-h-"+strconv.Itoa(i), "v")
			}
			return hdr
		}
		for _, c := range []struct {
			name   string
			hdr    []string
			status int
		}{
			{"a 59 KiB header", []string{"x-big", strings.Repeat("a", 59<<10)}, http.StatusOK},
			{"1000 headers", many(1000), http.StatusOK},
			// Over Envoy's max_request_headers_kb (60 KiB of URL, header names
			// and values): the front answers 431 and the processor never sees
			// them. (Envoy's max_headers_count, 100, would also refuse 1000
			// headers; the emulator does not count headers.)
			{"a 60 KiB header", []string{"x-big", strings.Repeat("a", 60<<10)}, http.StatusRequestHeaderFieldsTooLarge},
			{"a 100 KiB header", []string{"x-big", strings.Repeat("a", 100<<10)}, http.StatusRequestHeaderFieldsTooLarge},
			{"10000 headers", many(10000), http.StatusRequestHeaderFieldsTooLarge},
		} {
			resp, body := e.request(e.h1, "GET", "/items/k", "", c.hdr...)
			if resp.StatusCode != c.status || c.status == http.StatusOK && body != "v" {
				t.Errorf("%s: %d %.80q, want %d", c.name, resp.StatusCode, body, c.status)
			}
		}
		// An Envoy configured with larger limits: the processor answers.
		base := [][2]string{{":method", "GET"}, {":path", "/items/k"}, {":authority", "audit"}, {":scheme", "http"}}
		big := append(append([][2]string{}, base...), [2]string{"x-big", strings.Repeat("a", 1<<20)})
		if st := auditPeer(t, e, big, ""); st != http.StatusOK {
			t.Errorf("a 1 MiB header from the peer: %d, want 200", st)
		}
		lots := append([][2]string{}, base...)
		for i := 0; i < 20000; i++ {
			lots = append(lots, [2]string{"x-h-" + strconv.Itoa(i), "v"})
		}
		if st := auditPeer(t, e, lots, ""); st != http.StatusOK {
			t.Errorf("20000 headers from the peer: %d, want 200", st)
		}
		// Over grpc-go's 4 MiB message limit: the stream is refused.
		huge := append(append([][2]string{}, base...), [2]string{"x-big", strings.Repeat("a", 5<<20)})
		if st, err := auditPeerErr(t, e, huge, ""); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("a 5 MiB header from the peer: %d %v, want RESOURCE_EXHAUSTED on the stream", st, err)
		}
	})

	t.Run("paths", func(t *testing.T) {
		for _, c := range []struct {
			path string
			want answer
		}{
			{"/items/\xff\xfe", answer{status: 404, says: "no record matches"}},
			{"/t/t-\xff/k", answer{status: 400, says: "is not a legal Kafka topic name"}},
			{"/items/%FF", answer{status: 404, says: "no record matches"}},
			{"/items/%00", answer{status: 404, says: "no record matches"}},
			{"/items/..", answer{status: 200, body: "dots"}},
			{"/items/%2E%2E", answer{status: 200, body: "dots"}},
			{"/items/a%2Fb", answer{status: 200, body: "slash"}},
			{"/items/a%2fb", answer{status: 200, body: "slash"}},
			// Paths are not normalised: `..` never reaches another route.
			{"/items/../items/k", answer{status: 404, says: "no route matches GET /items/../items/k"}},
			{"/items/a/b", answer{status: 404, says: "no route matches GET /items/a/b"}},
			{"/items/k;x=1", answer{status: 404, says: "no route matches"}},
			{"/items/k?x=%FF&y=\xff", answer{status: 200, body: "v"}},
		} {
			resp, body, err := auditRaw(t, e.dev.Front(), []byte("GET "+c.path+" HTTP/1.1\r\nHost: audit\r\n\r\n"))
			if err != nil {
				t.Errorf("GET %q: %v", c.path, err)
				continue
			}
			check("GET "+strconv.Quote(c.path), resp, body, c.want)
		}
		// A NUL or a bad escape in the request line: the front's 400.
		for _, p := range []string{"/items/a\x00b", "/items/%", "/items/%zz"} {
			resp, _, err := auditRaw(t, e.dev.Front(), []byte("GET "+p+" HTTP/1.1\r\nHost: audit\r\n\r\n"))
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Errorf("GET %q: %v %v, want the front's 400", p, resp, err)
			}
		}
		// The same from the peer: the processor answers on its own.
		for _, c := range []struct {
			path string
			want int
		}{{"/items/a\x00b", 404}, {"/items/%", 404}, {"/items/%zz", 404}, {"/t/t-%/k", 400}, {"", 400}, {"*", 404}} {
			if st := auditPeer(t, e, [][2]string{{":method", "GET"}, {":path", c.path}, {":authority", "a"}, {":scheme", "http"}}, ""); st != c.want {
				t.Errorf("GET %q from the peer: %d, want %d", c.path, st, c.want)
			}
		}
	})

	t.Run("prefer wait", func(t *testing.T) {
		// Out of range (not a 32-bit count of seconds) is invalid and
		// ignored (RFC 7240): the answer is immediate, nothing applied.
		for _, w := range []string{"wait=99999999999999999999", "wait=" + strings.Repeat("9", 4000), "wait=-1", "wait=1e9", "wait=0x10", "wait="} {
			start := time.Now()
			resp, body := e.request(e.h1, "GET", "/items/k", "", "prefer", w, "if-none-match", etag)
			if resp.StatusCode != http.StatusNotModified || resp.Header.Get("preference-applied") != "" || time.Since(start) > time.Second {
				t.Errorf("prefer %.30s: %d %q %v after %v, want an immediate 304", w, resp.StatusCode, body, resp.Header, time.Since(start))
			}
		}
		// The largest valid value is clamped to limits.max-wait (2s).
		start := time.Now()
		resp, _ := e.request(e.h1, "GET", "/items/k", "", "prefer", "wait=4294967295", "if-none-match", etag)
		took := time.Since(start)
		if resp.StatusCode != http.StatusNotModified || resp.Header.Get("preference-applied") != "wait=2" || took < 2*time.Second || took > 4*time.Second {
			t.Errorf("prefer wait=4294967295: %d %v after %v, want 304 + preference-applied: wait=2 after 2s", resp.StatusCode, resp.Header, took)
		}
	})

	t.Run("if-none-match", func(t *testing.T) {
		for _, c := range []struct {
			inm    string
			status int
		}{
			{`"unterminated`, 200}, {`W/`, 200}, {`W/""`, 200}, {`""`, 200}, {strings.Repeat(",", 10000), 200},
			{strings.Repeat(`"x", `, 5000), 200}, {"ü", 200}, {`*, garbage`, 304}, {etag + `, "x`, 304},
			{`"` + strings.Repeat("9.", 2000) + `"`, 200},
		} {
			resp, body := e.request(e.h1, "GET", "/items/k", "", "if-none-match", c.inm)
			want := "v"
			if c.status == 304 {
				want = ""
			}
			if resp.StatusCode != c.status || body != want || resp.Header.Get("etag") != etag {
				t.Errorf("if-none-match %.30q: %d %q %v, want %d", c.inm, resp.StatusCode, body, resp.Header, c.status)
			}
		}
		for _, inm := range []string{"\xff\xfe", "\"a\tb\""} {
			resp, body, err := auditRaw(t, e.dev.Front(), []byte("GET /items/k HTTP/1.1\r\nHost: a\r\nIf-None-Match: "+inm+"\r\n\r\n"))
			if err != nil || resp.StatusCode != http.StatusOK || body != "v" {
				t.Errorf("if-none-match %q: %v %q %v, want 200", inm, resp, body, err)
			}
		}
		// Control characters: the front's 400; from the peer, a 200.
		if resp, _, err := auditRaw(t, e.dev.Front(), []byte("GET /items/k HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"\x01\"\r\n\r\n")); err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("if-none-match with a control character: %v %v, want the front's 400", resp, err)
		}
		if st := auditPeer(t, e, [][2]string{{":method", "GET"}, {":path", "/items/k"}, {":authority", "a"}, {":scheme", "http"}, {"if-none-match", "\"\x00\x01\""}}, ""); st != http.StatusOK {
			t.Errorf("if-none-match with control characters from the peer: %d, want 200", st)
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		for _, c := range []struct {
			timeout string
			code    codes.Code
			says    string
		}{
			{"abc", codes.InvalidArgument, `malformed grpc-timeout "abc"`},
			{"999999999H", codes.InvalidArgument, "malformed grpc-timeout"}, // 9 digits at most
			{"-1S", codes.InvalidArgument, "malformed grpc-timeout"},
			{"", codes.InvalidArgument, "malformed grpc-timeout"},
			{"0n", codes.DeadlineExceeded, "grpc-timeout (0s) elapsed"},
		} {
			code, msg := auditGRPCRaw(t, e, "/audit.Items/Fetch", auditFrame(0, nil), "grpc-timeout", c.timeout)
			if code != c.code || !strings.Contains(msg, c.says) {
				t.Errorf("grpc-timeout %q: %v %q, want %v saying %q", c.timeout, code, msg, c.code, c.says)
			}
		}
		for _, p := range []string{"/audit.Items/Fetch/extra", "/audit.It%FFems/Fetch", "/audit.Items/", "//"} {
			code, msg := auditGRPCRaw(t, e, p, auditFrame(0, nil))
			if code != codes.Unimplemented || msg == "" {
				t.Errorf("gRPC path %q: %v %q, want UNIMPLEMENTED", p, code, msg)
			}
		}
		var md []string
		for i := 0; i < 1000; i++ {
			md = append(md, "x-m-"+strconv.Itoa(i), "v")
		}
		_, err := auditUnary(e, "/audit.Nowhere/Call", nil, md...)
		auditStatus(t, "1000 metadata entries", err, codes.Unimplemented, "no route matches")
	})

	// Still serving, and nothing left behind.
	if resp, body := e.request(e.h2c, "GET", "/items/k", ""); resp.StatusCode != http.StatusOK || body != "v" {
		t.Errorf("after the hostile requests: %d %q", resp.StatusCode, body)
	}
	e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0)
}
