package e2e_test

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const produceConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: POST, path: /items }]
        exit: kafka0
        with: { capability: produce, topic: items, key: "${idempotencyKey}", overrides: { x-source: gateway } }
      - when: [{ method: POST, path: /keyless }]
        exit: kafka0
        with: { capability: produce, topic: items }
      - when: [{ method: POST, path: /events }]
        exit: kafka0
        with: { capability: produce, topic: events }
      - when: [{ path: "/items/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: items, key: "${params.id}", acks: leader_only }
      - when:
          - { method: POST, path: "/orders/{id}" }
          - { method: GET, path: "/orders/{id};cid={correlationId}" }
        exit: kafka0
        with:
          capability: produce
          topic: orders-requests
          acks: leader_only
          key: "${params.id}"
          reply-to: orders-responses
          overrides: { x-route: orders, x-order: "${params.id}" }
          async: { location: "/orders/${params.id};cid=${correlationId}", x-poll-after: "1" }
      - when: [{ method: POST, path: "/hostile/{case}" }]
        exit: kafka0
        with: { capability: produce, topic: orders-requests, reply-to: orders-responses }
      - guarded: { users: [] }
        when: [{ method: POST, path: /mine }, { method: GET, path: "/mine;cid={correlationId}" }]
        exit: kafka0
        with: { capability: produce, topic: orders-requests, reply-to: orders-responses, async: { location: "/mine;cid=${correlationId}" } }
      - when: [{ method: POST, path: "/slow/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: slow-requests, key: "${params.id}", reply-to: slow-responses }
      - when: [{ method: POST, path: "/slow-async/{id}" }, { method: GET, path: "/slow-async/{id};cid={correlationId}" }]
        exit: kafka0
        with:
          capability: produce
          topic: slow-requests
          key: "${params.id}"
          reply-to: slow-responses
          async: { location: "/slow-async/${params.id};cid=${correlationId}" }
      - when: [{ method: POST, path: /acks/none }]
        exit: kafka0
        with: { capability: produce, topic: acks-none, acks: none, key: k }
      - when: [{ method: POST, path: /acks/leader }]
        exit: kafka0
        with: { capability: produce, topic: acks-leader, acks: leader_only, key: k }
      - when: [{ method: POST, path: /acks/all }]
        exit: kafka0
        with: { capability: produce, topic: acks-all, key: k }
      - when: [{ method: POST, path: /gone }]
        exit: kafka0
        with: { capability: produce, topic: gone, key: k }
      - when: [{ method: POST, path: "/t/{name}" }]
        exit: kafka0
        with: { capability: produce, topic: "${params.name}", topic-pattern: "t-*", key: k }
guards:
  users: { type: envoy-jwt, options: { provider: test } }
limits: { reply-timeout: 4s, kafka-timeout: 3s, max-wait: 10s }
`

var (
	uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	cidRe  = regexp.MustCompile(`^([A-Za-z0-9._~-]{1,128})-[0-9a-f]{32}$`)
	// fpRe is a fingerprint header: the key's use, then the fingerprint.
	fpRe = regexp.MustCompile(`^[0-9a-f]{32}\.[0-9a-f]{16,32}$`)
)

// names lists "name=value" of a record's headers in order.
func names(m *kafka.Message) []string {
	var out []string
	for _, h := range m.Headers {
		out = append(out, h.Key+"="+string(h.Value))
	}
	return out
}

// produceEnv is the dev stack of produceConfig with a test responder on
// orders-requests, the x-user guard, and the handler captured.
func produceEnv(t *testing.T) (*env, *testResponder, *httpkafka.Handler) {
	tr := newTestResponder()
	var h *httpkafka.Handler
	e := startEnv(t, produceConfig, withResponder(tr, "orders-requests"), handlerOf(&h), func(o *stack.DevOptions) {
		o.Guards = userGuard{}
		o.BrokerOptions.Topics = append(o.BrokerOptions.Topics, embedded.Topic{Name: "t-exists"})
	})
	return e, tr, h
}

// location is the correlation id of an async location.
func cidOf(t *testing.T, location string) string {
	t.Helper()
	_, cid, ok := strings.Cut(location, ";cid=")
	if !ok || !cidRe.MatchString(cid) {
		t.Fatalf("location %q carries no correlation id", location)
	}
	return cid
}

func TestProduce(t *testing.T) {
	t.Parallel()
	e, tr, h := produceEnv(t)

	t.Run("oneway records", func(t *testing.T) {
		for _, r := range []struct{ method, path, body string }{
			{"PUT", "/items/7", `{"name":"pen"}`},
			{"POST", "/items", `{"name":"ink"}`},
			{"POST", "/items", `{"name":"nib"}`},
			{"POST", "/items", `{"name":"cap"}`},
			{"DELETE", "/items/7", ""},
			{"PUT", "/items/8", ""},
		} {
			hdr := []string{"content-type", "application/json", "x-custom", "c", "authorization", "Bearer t"}
			if r.path == "/items" && r.body == `{"name":"ink"}` {
				hdr = append(hdr, "idempotency-key", "item-1")
			}
			if r.body == "" {
				hdr = []string{"x-custom", "c"}
			}
			resp, body := e.request(e.h1, r.method, r.path, r.body, hdr...)
			if resp.StatusCode != http.StatusNoContent || body != "" {
				t.Fatalf("%s %s: %d %q, want 204", r.method, r.path, resp.StatusCode, body)
			}
		}
		recs := e.readTopic("items")
		if len(recs) != 6 {
			t.Fatalf("%d records in items, want 6", len(recs))
		}
		ct := "content-type=application/json"
		want := []struct {
			key, value string
			null       bool
			headers    []string
		}{
			{"7", `{"name":"pen"}`, false, []string{ct}},
			{"item-1", `{"name":"ink"}`, false, []string{ct, "x-source=gateway"}},
			{"", `{"name":"nib"}`, false, []string{ct, "x-source=gateway"}},
			{"", `{"name":"cap"}`, false, []string{ct, "x-source=gateway"}},
			{"7", "", true, nil},
			{"8", "", false, nil},
		}
		for i, w := range want {
			m := recs[i]
			if w.key != "" && string(m.Key) != w.key {
				t.Errorf("record %d: key %q, want %q", i, m.Key, w.key)
			}
			if string(m.Value) != w.value || (m.Value == nil) != w.null {
				t.Errorf("record %d: value %q (null %v), want %q (null %v)", i, m.Value, m.Value == nil, w.value, w.null)
			}
			got := names(m)
			if i == 1 {
				// The request with an idempotency key also carries its
				// correlation id, by which a retry finds the record, and
				// its key's use and fingerprint, by which a retry is told
				// from another request under the key.
				cid, _ := recHeader(m, "gateway:correlation-id")
				fp, _ := recHeader(m, "gateway:fingerprint")
				if n := len(got); n < 2 || got[n-2] != "gateway:correlation-id="+cid || !cidRe.MatchString(cid) || !strings.HasPrefix(cid, "item-1-") ||
					got[n-1] != "gateway:fingerprint="+fp || !fpRe.MatchString(fp) {
					t.Errorf("record %d: headers %q, want the correlation id of item-1 and its fingerprint last", i, got)
				} else {
					got = got[:n-2]
				}
			}
			if strings.Join(got, " ") != strings.Join(w.headers, " ") {
				t.Errorf("record %d: headers %q, want %q", i, got, w.headers)
			}
		}
		// POST without an idempotency key: distinct, non-empty UUID keys.
		if k2, k3 := string(recs[2].Key), string(recs[3].Key); !uuidRe.MatchString(k2) || !uuidRe.MatchString(k3) || k2 == k3 {
			t.Errorf("generated keys %q and %q, want two distinct UUIDs", k2, k3)
		}

		// A compacted topic needs a key; a plain one takes a record without.
		resp, body := e.request(e.h1, "POST", "/keyless", `x`)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "compacted") {
			t.Errorf("keyless record to a compacted topic: %d %s, want 400", resp.StatusCode, body)
		}
		if resp, body := e.request(e.h1, "POST", "/events", `x`); resp.StatusCode != http.StatusNoContent {
			t.Errorf("keyless record to a plain topic: %d %s", resp.StatusCode, body)
		}
		if ev := e.readTopic("events"); len(ev) != 1 || ev[0].Key != nil || string(ev[0].Value) != "x" {
			t.Errorf("events: %d records, want one without key", len(ev))
		}
		if resp, body := e.request(e.h1, "POST", "/items", `x`, "idempotency-key", "not valid!"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "idempotency-key") {
			t.Errorf("bad idempotency key: %d %s, want 400", resp.StatusCode, body)
		}
		if n := len(e.readTopic("items")); n != 6 {
			t.Errorf("refused requests wrote records: %d in items", n)
		}
	})

	t.Run("request-reply record and reply", func(t *testing.T) {
		resp, body := e.request(e.h1, "POST", "/orders/1?x=1", `{"qty":1}`,
			"content-type", "application/json", "x-custom", "c", "authorization", "Bearer t", "cookie", "s=1",
			"prefer", "wait=1", "if-match", `"HsYV1vQBNyg.0.7/rev=42"`, "idempotency-key", "sync-1")
		if resp.StatusCode != http.StatusCreated || body != `POST /orders/1?x=1 key=1 body={"qty":1}` ||
			resp.Header.Get("content-type") != "text/plain" || resp.Header.Get("preference-applied") != "" {
			t.Fatalf("reply: %d %q %v", resp.StatusCode, body, resp.Header)
		}
		cid := resp.Header.Get("x-correlation")
		if m := cidRe.FindStringSubmatch(cid); m == nil || m[1] != "sync-1" {
			t.Fatalf("correlation id %q does not start with the idempotency key", cid)
		}
		recs := recordsWith(e.readTopic("orders-requests"), "gateway:correlation-id", cid)
		if len(recs) != 1 {
			t.Fatalf("%d records with the correlation id, want 1", len(recs))
		}
		m := recs[0]
		if string(m.Key) != "1" || string(m.Value) != `{"qty":1}` {
			t.Errorf("record key %q value %q", m.Key, m.Value)
		}
		// The request headers as Envoy sent them (pseudo-headers included)
		// minus the deny-list (authorization, cookie, prefer,
		// content-length), if-match reduced to the record's etag, then
		// reply-to, the overrides, the correlation id and (a request with an
		// idempotency key) the fingerprint header.
		got := names(m)
		for i, g := range got {
			for _, vary := range []string{":authority=", "x-request-id=", "user-agent=", "gateway:fingerprint="} {
				if strings.HasPrefix(g, vary) {
					got[i] = vary + "*"
				}
			}
		}
		want := []string{":authority=*", ":path=/orders/1?x=1", ":method=POST", ":scheme=http",
			"accept-encoding=gzip", "content-type=application/json", "idempotency-key=sync-1", "if-match=rev=42",
			"user-agent=*", "x-custom=c", "x-forwarded-proto=http", "x-request-id=*",
			"gateway:reply-to=orders-responses", "x-route=orders", "x-order=1", "gateway:correlation-id=" + cid, "gateway:fingerprint=*"}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("record headers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("hostile replies", func(t *testing.T) {
		resp, body := e.request(e.h1, "POST", "/hostile/ok", "x")
		if resp.StatusCode != http.StatusCreated || body != "hostile" || resp.Header.Get("x-kept") != "kept" ||
			resp.Header.Get("x-split") != "" || resp.Header.Get("set-cookie") != "" || len(resp.TransferEncoding) != 0 ||
			resp.ContentLength != int64(len("hostile")) || resp.Header.Get("gateway:correlation-id") != "" {
			t.Errorf("hostile headers: %d %q %v (transfer-encoding %v, length %d)", resp.StatusCode, body, resp.Header, resp.TransferEncoding, resp.ContentLength)
		}
		resp, body = e.request(e.h2c, "POST", "/hostile/bad", "x")
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("content-type") != "application/problem+json" || !strings.Contains(body, "99") {
			t.Errorf(":status 99: %d %q, want 502 saying why", resp.StatusCode, body)
		}
	})

	t.Run("replay", func(t *testing.T) {
		replays := h.Replays()
		first, body := e.request(e.h1, "POST", "/orders/2", `{"qty":2}`, "idempotency-key", "replay-1", "content-type", "application/json")
		cid := first.Header.Get("x-correlation")
		if first.StatusCode != http.StatusCreated || cid == "" {
			t.Fatalf("first: %d %q", first.StatusCode, body)
		}
		// A retry through another connection (other x-request-id, other
		// user-agent): the stored reply, and nothing produced.
		again, body2 := e.request(e.h2c, "POST", "/orders/2", `{"qty":2}`, "idempotency-key", "replay-1", "content-type", "application/json")
		if again.StatusCode != http.StatusCreated || body2 != body || again.Header.Get("x-correlation") != cid {
			t.Errorf("replay: %d %q, want the stored reply %q", again.StatusCode, body2, body)
		}
		if n := len(recordsWith(e.readTopic("orders-requests"), "gateway:correlation-id", cid)); n != 1 {
			t.Errorf("%d records after the replay, want 1", n)
		}
		if got := h.Replays() - replays; got != 1 {
			t.Errorf("%d replays counted, want 1", got)
		}
		// The same key with another body is refused: the key names the
		// first request.
		changed, body3 := e.request(e.h1, "POST", "/orders/2", `{"qty":3}`, "idempotency-key", "replay-1", "content-type", "application/json")
		if changed.StatusCode != http.StatusUnprocessableEntity || changed.Header.Get("content-type") != "application/problem+json" ||
			!strings.Contains(body3, `idempotency key \"replay-1\" was used`) {
			t.Errorf("changed body: %d %q, want 422 naming the key", changed.StatusCode, body3)
		}
		if n := len(recordsWith(e.readTopic("orders-requests"), "idempotency-key", "replay-1")); n != 1 {
			t.Errorf("%d records with the idempotency key, want 1", n)
		}
	})

	t.Run("replay in flight", func(t *testing.T) {
		tr.forget()
		release := tr.hold()
		defer release()
		type answer struct {
			status int
			body   string
			cid    string
		}
		answers := make(chan answer, 2)
		send := func() {
			resp, body := e.request(e.h1, "POST", "/orders/3", `{"qty":3}`, "idempotency-key", "flight-1")
			answers <- answer{resp.StatusCode, body, resp.Header.Get("x-correlation")}
		}
		go send()
		req := tr.next(t) // the record reached the responder: the first waits for its reply
		go send()
		pollUntil(t, "both requests waiting", func() bool { return h.ReplyWaiters() == 2 })
		release()
		a, b := <-answers, <-answers
		if a.status != http.StatusCreated || a != b || a.cid != req.CorrelationID {
			t.Errorf("answers %+v and %+v, want the same reply", a, b)
		}
		if n := len(recordsWith(e.readTopic("orders-requests"), "gateway:correlation-id", a.cid)); n != 1 {
			t.Errorf("%d records, want 1", n)
		}
	})

	t.Run("identities", func(t *testing.T) {
		send := func(user string, hdr ...string) (*http.Response, string) {
			h := append([]string{"idempotency-key", "same-1", "x-user", user}, hdr...)
			return e.request(e.h1, "POST", "/mine", `{"same":true}`, h...)
		}
		ra, ba := send("alice")
		rb, _ := send("bob")
		if ra.StatusCode != 201 || rb.StatusCode != 201 || ra.Header.Get("x-user") != "alice" || rb.Header.Get("x-user") != "bob" {
			t.Fatalf("replies: alice %d %v, bob %d %v", ra.StatusCode, ra.Header, rb.StatusCode, rb.Header)
		}
		ca, cb := ra.Header.Get("x-correlation"), rb.Header.Get("x-correlation")
		if ca == cb {
			t.Fatalf("alice and bob share correlation id %s", ca)
		}
		if again, body := send("alice"); again.Header.Get("x-user") != "alice" || body != ba {
			t.Errorf("alice's replay: %q %v", body, again.Header)
		}
		if n := len(recordsWith(e.readTopic("orders-requests"), "idempotency-key", "same-1")); n != 2 {
			t.Errorf("%d records for two callers, want 2", n)
		}
		// A follow-up is bound to the caller that was given the location.
		acc, _ := e.request(e.h1, "POST", "/mine", `{"async":true}`, "x-user", "alice", "prefer", "respond-async")
		loc := acc.Header.Get("location")
		if acc.StatusCode != http.StatusAccepted || !strings.HasPrefix(loc, "/mine;cid=") {
			t.Fatalf("async: %d %v", acc.StatusCode, acc.Header)
		}
		if resp, body := e.request(e.h1, "GET", loc, "", "x-user", "bob", "prefer", "wait=5"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob's follow-up of alice's request: %d %q, want 404", resp.StatusCode, body)
		}
		if resp, body := e.request(e.h1, "GET", loc, "", "x-user", "alice", "prefer", "wait=5"); resp.StatusCode != http.StatusCreated || resp.Header.Get("x-user") != "alice" {
			t.Errorf("alice's follow-up: %d %q", resp.StatusCode, body)
		}
		if resp, _ := e.request(e.h1, "POST", "/mine", `{}`); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("no identity: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("no idempotency key", func(t *testing.T) {
		r1, _ := e.request(e.h1, "POST", "/orders/4", `{"qty":4}`)
		r2, _ := e.request(e.h1, "POST", "/orders/4", `{"qty":4}`)
		c1, c2 := cidRe.FindStringSubmatch(r1.Header.Get("x-correlation")), cidRe.FindStringSubmatch(r2.Header.Get("x-correlation"))
		if r1.StatusCode != 201 || r2.StatusCode != 201 || c1 == nil || c2 == nil || c1[0] == c2[0] || !uuidRe.MatchString(c1[1]) || !uuidRe.MatchString(c2[1]) {
			t.Fatalf("without idempotency key: %d %v / %d %v", r1.StatusCode, c1, r2.StatusCode, c2)
		}
		for _, c := range []string{c1[0], c2[0]} {
			if n := len(recordsWith(e.readTopic("orders-requests"), "gateway:correlation-id", c)); n != 1 {
				t.Errorf("%d records for %s, want 1", n, c)
			}
		}
	})

	t.Run("async", func(t *testing.T) {
		tr.forget()
		release := tr.hold()
		defer release()
		start := time.Now()
		acc, body := e.request(e.h1, "POST", "/orders/5", `{"qty":5}`, "prefer", "respond-async", "idempotency-key", "async-1")
		loc := acc.Header.Get("location")
		if acc.StatusCode != http.StatusAccepted || body != "" || !strings.HasPrefix(loc, "/orders/5;cid=async-1-") ||
			acc.Header.Get("x-poll-after") != "1" || acc.Header.Get("preference-applied") != "respond-async" {
			t.Fatalf("respond-async: %d %q %v", acc.StatusCode, body, acc.Header)
		}
		t.Logf("202 after %v (after the acknowledgement, before any reply)", time.Since(start))
		cid := cidOf(t, loc)
		if n := len(recordsWith(e.readTopic("orders-requests"), "gateway:correlation-id", cid)); n != 1 {
			t.Errorf("%d records after the 202, want 1 (acknowledged)", n)
		}
		// Before the reply: 202 and the same location, at once.
		early, _ := e.request(e.h1, "GET", loc, "")
		if early.StatusCode != http.StatusAccepted || early.Header.Get("location") != loc || early.Header.Get("x-poll-after") != "1" {
			t.Errorf("follow-up before the reply: %d %v", early.StatusCode, early.Header)
		}
		// A long-polling follow-up gets the reply when it comes.
		polled := make(chan *http.Response, 1)
		go func() {
			resp, _ := e.request(e.h2c, "GET", loc, "", "prefer", "wait=10")
			polled <- resp
		}()
		tr.next(t)
		pollUntil(t, "the follow-up waiting", func() bool { return h.ReplyWaiters() == 1 })
		release()
		if resp := <-polled; resp.StatusCode != http.StatusCreated || resp.Header.Get("preference-applied") != "wait=10" || resp.Header.Get("x-correlation") != cid {
			t.Errorf("long-polled follow-up: %d %v", resp.StatusCode, resp.Header)
		}
		// After the reply: the reply, at once, as often as asked.
		late, lbody := e.request(e.h1, "GET", loc, "")
		if late.StatusCode != http.StatusCreated || lbody != `POST /orders/5 key=5 body={"qty":5}` {
			t.Errorf("follow-up after the reply: %d %q", late.StatusCode, lbody)
		}
		if n := len(recordsWith(e.readTopic("orders-requests"), "gateway:correlation-id", cid)); n != 1 {
			t.Errorf("follow-ups produced: %d records, want 1", n)
		}
		// respond-async, wait=N answers synchronously when the reply comes in time.
		sync, sbody := e.request(e.h1, "POST", "/orders/5", `{"qty":6}`, "prefer", "respond-async, wait=5")
		if sync.StatusCode != http.StatusCreated || sync.Header.Get("preference-applied") != "wait=5" || !strings.Contains(sbody, `{"qty":6}`) {
			t.Errorf("respond-async, wait=5: %d %q %v", sync.StatusCode, sbody, sync.Header)
		}
	})

	t.Run("reply timeout", func(t *testing.T) {
		var wg sync.WaitGroup
		// A key each: one key on the two requests (another path, the same
		// topic) would be refused as reused.
		for _, c := range []struct {
			path, key string
			status    int
		}{{"/slow/1", "slow-1", http.StatusGatewayTimeout}, {"/slow-async/1", "slow-async-1", http.StatusAccepted}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				resp, body := e.request(e.h1, "POST", c.path, "x", "idempotency-key", c.key)
				took := time.Since(start)
				t.Logf("%s: %d after %v", c.path, resp.StatusCode, took)
				if resp.StatusCode != c.status || took < 4*time.Second || took > 6*time.Second {
					t.Errorf("%s: %d %q after %v, want %d after the 4s reply-timeout", c.path, resp.StatusCode, body, took, c.status)
				}
				if c.status == http.StatusAccepted && !strings.HasPrefix(resp.Header.Get("location"), "/slow-async/1;cid=slow-async-1-") {
					t.Errorf("%s: location %q", c.path, resp.Header.Get("location"))
				}
				if c.status == http.StatusGatewayTimeout && !strings.Contains(body, "idempotency-key") {
					t.Errorf("%s: the 504 does not say how to retry: %s", c.path, body)
				}
			}()
		}
		wg.Wait()
	})

	t.Run("acks", func(t *testing.T) {
		seen := observeAcks(e.dev.Broker.Cluster())
		for _, mode := range []string{"none", "leader", "all"} {
			if resp, body := e.request(e.h1, "POST", "/acks/"+mode, "x"); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("acks %s: %d %q", mode, resp.StatusCode, body)
			}
		}
		// acks=0 gets no answer: its request may still be on the way.
		pollUntil(t, "the acks=0 ProduceRequest", func() bool { return len(seen.of("acks-none")) > 0 })
		for topic, want := range map[string]int16{"acks-none": 0, "acks-leader": 1, "acks-all": -1} {
			got := seen.of(topic)
			if len(got) == 0 {
				t.Errorf("%s: no ProduceRequest seen", topic)
			}
			for _, a := range got {
				if a != want {
					t.Errorf("%s: ProduceRequest acks %d, want %d", topic, a, want)
				}
			}
		}
	})

	t.Run("topics", func(t *testing.T) {
		if err := e.dev.Broker.Cluster().DeleteTopic("gone"); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			path   string
			status int
			says   string
		}{
			{"/gone", http.StatusServiceUnavailable, `\"gone\" does not exist`},
			{"/t/t-missing", http.StatusNotFound, `\"t-missing\" does not exist`},
			{"/t/other", http.StatusBadRequest, "topic-pattern"},
			{"/t/_internal", http.StatusBadRequest, "'_'"},
			{"/t/t-exists", http.StatusNoContent, ""},
		} {
			start := time.Now()
			resp, body := e.request(e.h1, "POST", c.path, "x")
			took := time.Since(start)
			if resp.StatusCode != c.status || !strings.Contains(body, c.says) || took > time.Second {
				t.Errorf("%s: %d %q after %v, want %d saying %q within 1s", c.path, resp.StatusCode, body, took, c.status, c.says)
			}
		}
		if topics := e.dev.Broker.Cluster().TopicInfo("t-missing"); topics != nil {
			t.Error("a request created a topic")
		}
		// A record the broker refuses: 502 with its reason.
		if err := e.dev.Broker.Cluster().CreateTopic("t-tiny", 1, map[string]string{"max.message.bytes": "200"}); err != nil {
			t.Fatal(err)
		}
		resp, body := e.request(e.h1, "POST", "/t/t-tiny", strings.Repeat("x", 1000))
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "refused") {
			t.Errorf("a record too large for the topic: %d %q, want 502 with the broker's reason", resp.StatusCode, body)
		}
		t.Logf("too large: %d %s", resp.StatusCode, body)
	})

	t.Run("client gone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := e.sendReq(ctx, e.h2c, "POST", "/slow/2", "x")
			done <- err
		}()
		pollUntil(t, "the request waiting for its reply", func() bool { return h.ReplyWaiters() == 1 })
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the cancelled request succeeded")
		}
		pollUntil(t, "the waiter released", func() bool { return h.ReplyWaiters() == 0 && h.InFlight() == 0 })
		e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0)
	})

	// The request that leads a flight waits for its record's acknowledgement
	// on its own exchange; a client that leaves meanwhile ends the exchange
	// at once, and the record, already with the broker, is still written
	// once and ends the flight when the broker answers.
	t.Run("client gone while the broker holds the record", func(t *testing.T) {
		held, wake := make(chan struct{}), make(chan struct{})
		var once sync.Once
		cluster := e.dev.Broker.Cluster()
		cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			pr := req.(*kmsg.ProduceRequest)
			if len(pr.Topics) == 0 || pr.Topics[0].Topic != "slow-requests" {
				cluster.KeepControl()
				return nil, nil, false
			}
			once.Do(func() {
				close(held)
				cluster.SleepControl(func() { <-wake })
			})
			return nil, nil, false // the broker writes it after the wake-up
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := e.sendReq(ctx, e.h2c, "POST", "/slow/held", "held-while-gone")
			done <- err
		}()
		<-held
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the cancelled request succeeded")
		}
		e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0)
		if n := h.InFlight(); n != 1 {
			t.Errorf("%d flights while the broker holds the record, want 1 (its lead waiting)", n)
		}
		close(wake)
		pollUntil(t, "the flight ended", func() bool { return h.InFlight() == 0 })
		n := 0
		for _, m := range e.readTopic("slow-requests") {
			if string(m.Value) == "held-while-gone" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d records of the request whose client left, want 1", n)
		}
	})

	t.Run("latency", func(t *testing.T) {
		const n = 30
		took := make([]time.Duration, n)
		for i := range took {
			start := time.Now()
			resp, _ := e.request(e.h2c, "POST", "/orders/9", `{"qty":9}`)
			took[i] = time.Since(start)
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("request %d: %d", i, resp.StatusCode)
			}
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		t.Logf("request-reply through emulator, processor, broker and responder: median %v, p90 %v, max %v (n=%d)",
			took[n/2], took[n*9/10], took[n-1], n)
	})

	t.Run("replica", func(t *testing.T) {
		const host = "api.example.com" // both fronts are one API to the client
		hdr := []string{"host", host, "idempotency-key", "replica-1", "content-type", "application/json"}
		first, body := e.request(e.h1, "POST", "/orders/6", `{"qty":6}`, hdr...)
		if first.StatusCode != http.StatusCreated {
			t.Fatalf("first: %d %q", first.StatusCode, body)
		}
		acc, _ := e.request(e.h1, "POST", "/orders/6", `{"qty":7}`, "prefer", "respond-async")
		loc := acc.Header.Get("location")
		if r, _ := e.request(e.h1, "GET", loc, "", "prefer", "wait=10"); r.StatusCode != http.StatusCreated {
			t.Fatalf("the async request got no reply: %d", r.StatusCode)
		}
		records := len(e.readTopic("orders-requests"))
		replays := h.Replays()

		// A replica started after the replies: ready only once its reply
		// index caught up, then it answers both from the index.
		start := time.Now()
		other, p2 := e.replica()
		_, reasons := p2.Readiness.Ready()
		// The index may have caught up before this look (the reasons then
		// name only the views): that it is a condition at all is what holds
		// readiness back until it has.
		if names := p2.Readiness.Names(); !slices.Contains(names, "kafka kafka0 replies orders-responses") {
			t.Errorf("the replica's readiness does not wait for its reply index: conditions %q", names)
		}
		pollUntil(t, "the replica ready", func() bool { ok, _ := p2.Readiness.Ready(); return ok })
		t.Logf("replica ready after %v (not ready at start: %q)", time.Since(start), reasons)
		if r, b := other.request(e.h1, "GET", loc, ""); r.StatusCode != http.StatusCreated || !strings.Contains(b, `{"qty":7}`) {
			t.Errorf("follow-up through the replica: %d %q", r.StatusCode, b)
		}
		again, body2 := other.request(e.h1, "POST", "/orders/6", `{"qty":6}`, hdr...)
		if again.StatusCode != http.StatusCreated || body2 != body || again.Header.Get("x-correlation") != first.Header.Get("x-correlation") {
			t.Errorf("replay through the replica: %d %q, want %q", again.StatusCode, body2, body)
		}
		if n := len(e.readTopic("orders-requests")); n != records {
			t.Errorf("the replica produced: %d records, was %d", n, records)
		}
		if h.Replays() != replays {
			t.Error("the replay was answered by the first processor")
		}
	})

	t.Run("drain", func(t *testing.T) {
		// Last: it stops the processor. A request waiting for its reply on
		// an async route is answered 202 + location when the process drains.
		tr.forget()
		release := tr.hold()
		defer release()
		answered := make(chan *http.Response, 1)
		go func() {
			resp, _ := e.request(e.h1, "POST", "/orders/10", `{"qty":10}`)
			answered <- resp
		}()
		tr.next(t)
		pollUntil(t, "the request waiting", func() bool { return h.ReplyWaiters() == 1 })
		go e.dev.Processor.Shutdown(context.Background())
		resp := <-answered
		if resp.StatusCode != http.StatusAccepted || !strings.HasPrefix(resp.Header.Get("location"), "/orders/10;cid=") {
			t.Errorf("on drain: %d %v, want 202 + location", resp.StatusCode, resp.Header)
		}
	})
}
