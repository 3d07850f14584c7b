package e2e_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The hostile-input audit (DESIGN §6.6): every row of the error table for
// both bindings, through the emulator with real clients, each answer
// checked for its status and a specific detail (problem+json) or
// grpc-message. SECURITY.md lists each input with the test that shows it.
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
	return e
}

// TestAuditErrorTableHTTP walks DESIGN §6.6 for http-kafka.
func TestAuditErrorTableHTTP(t *testing.T) {
	e := startAudit(t)

	t.Run("no route", func(t *testing.T) {
		resp, body := e.do(e.h1, "PATCH", "/nowhere", "x")
		auditProblem(t, "no route", resp, body, http.StatusNotFound, "no route matches PATCH /nowhere")
	})

	t.Run("malformed input", func(t *testing.T) {
		for _, key := range []string{"not valid!", strings.Repeat("k", 129), "ключ"} {
			resp, body := e.do(e.h1, "POST", "/items", "x", "idempotency-key", key)
			auditProblem(t, "idempotency key "+key[:min(len(key), 12)], resp, body, http.StatusBadRequest, "idempotency-key", "1 to 128 characters")
		}
		resp, body := e.do(e.h1, "POST", "/items", "x", "idempotency-key", "a", "idempotency-key", "b")
		auditProblem(t, "two idempotency keys", resp, body, http.StatusBadRequest, "send one idempotency-key")
		resp, body = e.do(e.h1, "POST", "/keyless", "x")
		auditProblem(t, "no key for a compacted topic", resp, body, http.StatusBadRequest, `topic "items" is compacted`, "with.key")
	})

	t.Run("topic pattern", func(t *testing.T) {
		for _, c := range []struct{ method, path, says string }{
			{"POST", "/t/other", `topic "other" does not match the route's topic-pattern "t-*"`},
			{"GET", "/t/other/k", `topic "other" does not match the route's topic-pattern "t-*"`},
			{"POST", "/any/_internal", `topic "_internal" is not allowed`},
			{"GET", "/any/_schemas/k", `topic "_schemas" is not allowed`},
		} {
			resp, body := e.do(e.h1, c.method, c.path, "x")
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
			resp, body := e.do(e.h1, c.method, c.path, "x")
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
			resp, body := e.do(e.h1, method, path, "x")
			auditProblem(t, method+" "+path, resp, body, http.StatusNotFound, `topic "t-missing" does not exist`)
			if took := time.Since(start); took > 2*time.Second+500*time.Millisecond {
				t.Errorf("%s %s: answered after %v, want within the Kafka timeout", method, path, took)
			}
		}
	})

	t.Run("body over max-body", func(t *testing.T) {
		for _, c := range []*http.Client{e.h1, e.h2c} {
			resp, body := e.do(c, "POST", "/t/t-exists", strings.Repeat("x", 1025))
			auditProblem(t, "body of 1025 bytes", resp, body, http.StatusRequestEntityTooLarge, "limits.max-body (1024 bytes)")
		}
	})

	t.Run("static topic missing", func(t *testing.T) {
		// Produce: 503 + retry-after (the route's own topic: the service's
		// problem, not the caller's). Fetch of a missing static topic:
		// TestFetchWhileTheTopicIsMissing (the view is not ready: 503).
		resp, body := e.do(e.h1, "POST", "/ghost", "x")
		auditProblem(t, "POST /ghost", resp, body, http.StatusServiceUnavailable, `topic "ghost" does not exist`)
		if resp.Header.Get("retry-after") == "" {
			t.Errorf("POST /ghost: 503 without retry-after")
		}
	})

	t.Run("broker rejected", func(t *testing.T) {
		resp, body := e.do(e.h1, "POST", "/t/t-small", strings.Repeat("x", 1000))
		auditProblem(t, "record over the topic's max.message.bytes", resp, body, http.StatusBadGateway, `Kafka refused the record for topic "t-small"`, "too large")
	})

	t.Run("reply timeout", func(t *testing.T) {
		start := time.Now()
		resp, body := e.do(e.h1, "POST", "/sync", "x", "idempotency-key", "audit-sync-1")
		auditProblem(t, "sync without a reply", resp, body, http.StatusGatewayTimeout, "limits.reply-timeout (1s)", "same idempotency-key")
		resp, body = e.do(e.h1, "POST", "/requests", "x")
		if resp.StatusCode != http.StatusAccepted || !strings.HasPrefix(resp.Header.Get("location"), "/requests;cid=") {
			t.Errorf("async route without a reply: %d %q %v, want 202 + location", resp.StatusCode, body, resp.Header)
		}
		t.Logf("two reply timeouts in %v", time.Since(start))
	})

	auditNoTopics(t, e, auditForbiddenTopics...)
}
