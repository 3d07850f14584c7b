package e2e_test

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/logbuf"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const logsConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - guarded: { jwt0: ["read:items"] }
        when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: "/t/{topic}/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.topic}", topic-pattern: "*", filters: [{ key: "${params.id}" }] }
      - when: [{ method: POST, path: "/events/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: events, key: "${params.id}" }
guards:
  jwt0:
    type: jwt
    options: { issuer: "https://auth.example.com", audience: "https://api.example.com", keys: 'JWKS' }
limits: { kafka-timeout: 1s, max-body: 1KiB }
`

// Each failed exchange logs exactly one line, with its cause, and no line
// holds the request's body, its credentials or its query; a successful one
// logs nothing at info.
func TestOneLogLinePerFailedExchange(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	var logs logbuf.Buffer
	e := startEnv(t, strings.ReplaceAll(logsConfig, "'JWKS'", "'"+is.jwks()+"'"), withGuards(t), func(o *stack.DevOptions) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	e.put("items", 0, "k", []byte("v"))
	const (
		secretBody   = "SECRET-BODY-7f3a"
		secretCookie = "SECRET-COOKIE-91bc"
		secretQuery  = "SECRET-QUERY-5d20"
	)
	good := is.token()
	// The view reads the record after its acknowledgement, not with it: wait
	// for it, so that the "ok" case below does not race the view.
	if r, body := e.request(e.h1, "GET", "/items/k", "", "authorization", "Bearer "+good, "prefer", "wait=10"); r.StatusCode != 200 {
		t.Fatalf("waiting for the record: %d %s", r.StatusCode, body)
	}
	forged := is.signWith(is.forger, is.claims())
	lacking := is.token("scope", "write:items")
	cases := []struct {
		id, method, path, body, token string
		status                        int
		cause                         string // part of the logged cause
	}{
		{"ok", "GET", "/items/k", "", good, 200, ""},
		{"no-route", "GET", "/nowhere?token=" + secretQuery, "", "", 404, "no route matches GET /nowhere"},
		{"bad-topic", "GET", "/t/_hidden/x", "", "", 400, `topic "_hidden" is not allowed`},
		{"missing-topic", "GET", "/t/absent/x", "", "", 404, `topic "absent" does not exist`},
		{"forged", "GET", "/items/k", "", forged, 401, "signature does not verify"},
		{"no-role", "GET", "/items/k", "", lacking, 403, "lack role(s) read:items"},
		{"too-large", "POST", "/events/1", strings.Repeat(secretBody, 100), "", 413, "larger than limits.max-body"},
	}
	for _, c := range cases {
		hdr := []string{"x-request-id", "req-" + c.id, "cookie", "session=" + secretCookie}
		if c.token != "" {
			hdr = append(hdr, "authorization", "Bearer "+c.token)
		}
		if r, body := e.request(e.h1, c.method, c.path, c.body, hdr...); r.StatusCode != c.status {
			t.Fatalf("%s: %d %s, want %d", c.id, r.StatusCode, body, c.status)
		}
	}
	// Kafka gone: the processor's own failure.
	e.dev.Broker.Close()
	if r, body := e.request(e.h1, "POST", "/events/2", secretBody, "x-request-id", "req-broker-down"); r.StatusCode < 500 {
		t.Fatalf("produce with the broker down: %d %s", r.StatusCode, body)
	}
	cases = append(cases, struct {
		id, method, path, body, token string
		status                        int
		cause                         string
	}{id: "broker-down", status: 503, cause: "Kafka"})
	e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0) // the line is written as the exchange ends

	lines := logs.Lines()
	for _, l := range lines {
		for _, secret := range []string{secretBody, secretCookie, secretQuery, good, forged, lacking} {
			if strings.Contains(l, secret) {
				t.Errorf("a log line holds a secret or body: %s", l)
			}
		}
	}
	for _, c := range cases {
		var mine []map[string]any
		for _, l := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("not a JSON line: %q", l)
			}
			if rec["request_id"] == "req-"+c.id {
				mine = append(mine, rec)
			}
		}
		if c.cause == "" {
			if len(mine) != 0 {
				t.Errorf("%s: a successful exchange logged %v", c.id, mine)
			}
			continue
		}
		if len(mine) != 1 {
			t.Errorf("%s: %d lines, want 1: %v", c.id, len(mine), mine)
			continue
		}
		rec := mine[0]
		cause, _ := rec["cause"].(string)
		if rec["msg"] != "exchange failed" || !strings.Contains(cause, c.cause) || rec["binding"] != "http0" {
			t.Errorf("%s: %v, want exchange failed in binding http0 with a cause saying %q", c.id, rec, c.cause)
		}
		wantLevel := "INFO"
		if c.status >= 500 {
			wantLevel = "WARN"
		}
		if rec["level"] != wantLevel || rec["status"] != strconv.Itoa(c.status) {
			t.Errorf("%s: level %v status %v, want %s %d", c.id, rec["level"], rec["status"], wantLevel, c.status)
		}
	}
}
