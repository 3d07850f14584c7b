package e2e_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
)

const namedConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    options:
      idempotency: { header: x-idem }
      correlation: { headers: { reply-to: x-reply-to, correlation-id: x-cid } }
    routes:
      - when: [{ method: POST, path: "/orders/{id}" }, { method: GET, path: "/orders/{id};cid={correlationId}" }]
        exit: kafka0
        with:
          capability: produce
          topic: named-requests
          key: "${params.id}"
          reply-to: named-responses
          async: { location: "/orders/${params.id};cid=${correlationId}" }
`

// Every header name the binding uses comes from its options: the
// idempotency header, and the reply-to and correlation-id record headers
// (which the reply index reads and the response never shows).
func TestProduceHeaderNamesFromOptions(t *testing.T) {
	t.Parallel()
	tr := newTestResponder()
	e := startEnv(t, namedConfig, withResponder(tr, "named-requests", "x-cid", "x-reply-to"))

	resp, body := e.request(e.h1, "POST", "/orders/1", `{"qty":1}`,
		"x-idem", "named-1", "idempotency-key", "not-this-one", "x-cid", "forged", "x-reply-to", "forged")
	cid := resp.Header.Get("x-correlation") // the test responder echoes the id it read
	if resp.StatusCode != http.StatusCreated || !strings.HasPrefix(cid, "named-1-") || resp.Header.Get("x-cid") != "" {
		t.Fatalf("reply: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	recs := e.readTopic("named-requests")
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	var injected []string
	for _, hd := range recs[0].Headers {
		switch {
		case strings.HasPrefix(hd.Key, "gateway:"):
			t.Errorf("record header %s: the default names are not used", hd.Key)
		case hd.Key == "x-cid" || hd.Key == "x-reply-to":
			injected = append(injected, hd.Key+"="+string(hd.Value))
		}
	}
	if strings.Join(injected, " ") != "x-reply-to=named-responses x-cid="+cid {
		t.Errorf("injected headers %q (a forged one must not pass)", injected)
	}

	// The idempotency header is x-idem: a replay is recognised by it...
	again, body2 := e.request(e.h2c, "POST", "/orders/1", `{"qty":1}`,
		"x-idem", "named-1", "idempotency-key", "not-this-one", "x-cid", "forged", "x-reply-to", "forged")
	if again.StatusCode != http.StatusCreated || body2 != body || len(e.readTopic("named-requests")) != 1 {
		t.Errorf("replay by x-idem: %d %q, %d records", again.StatusCode, body2, len(e.readTopic("named-requests")))
	}
	// ...and checked by its grammar.
	if bad, b := e.request(e.h1, "POST", "/orders/1", `x`, "x-idem", "no spaces"); bad.StatusCode != http.StatusBadRequest || !strings.Contains(b, "x-idem") {
		t.Errorf("bad x-idem: %d %q", bad.StatusCode, b)
	}
	// The reply index reads x-cid: async follow-ups work.
	acc, _ := e.request(e.h1, "POST", "/orders/2", `{"qty":2}`, "prefer", "respond-async")
	loc := acc.Header.Get("location")
	if r, b := e.request(e.h1, "GET", loc, "", "prefer", "wait=10"); r.StatusCode != http.StatusCreated || !strings.Contains(b, `{"qty":2}`) || r.Header.Get("x-cid") != "" {
		t.Errorf("follow-up: %d %q %v", r.StatusCode, b, r.Header)
	}

	// A reload brings a route with a reply-to topic nobody indexed at
	// startup: its first request starts indexing it.
	if err := e.dev.Broker.CreateTopics(embedded.Topic{Name: "named-late"}); err != nil {
		t.Fatal(err)
	}
	e.reload("reloaded.yaml", withRoute(namedConfig, `      - when: [{ method: POST, path: "/late/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: named-requests, key: "${params.id}", reply-to: named-late }
`))
	if r, b := e.request(e.h1, "POST", "/late/1", `{"late":true}`); r.StatusCode != http.StatusCreated || !strings.Contains(b, `{"late":true}`) {
		t.Errorf("a reply-to topic added by a reload: %d %q", r.StatusCode, b)
	}
}
