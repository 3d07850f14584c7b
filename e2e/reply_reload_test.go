package e2e_test

import (
	"net/http"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// A binding no route replies through has no reply consumer (it is created
// with the first reply topic): a reload that adds the first request-reply
// route must still index its replies and answer with them.
func TestReloadAddsTheFirstRequestReplyRoute(t *testing.T) {
	t.Parallel()
	tr := newTestResponder()
	e := startEnv(t, opsConfig, withResponder(tr, "orders-requests"), func(o *stack.DevOptions) {
		o.BrokerOptions.Topics = append(o.BrokerOptions.Topics,
			embedded.Topic{Name: "orders-requests"}, embedded.Topic{Name: "orders-responses"})
	})
	if r, _ := e.request(e.h1, "POST", "/orders/1", `{"qty":1}`); r.StatusCode != http.StatusNotFound {
		t.Fatalf("POST before the reload: %d, want 404", r.StatusCode)
	}

	e.reload("next.yaml", withRoute(opsConfig, `      - when: [{ method: POST, path: "/orders/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: orders-requests, key: "${params.id}", reply-to: orders-responses }
`))
	resp, body := e.request(e.h1, "POST", "/orders/1", `{"qty":1}`, "prefer", "wait=20")
	if resp.StatusCode != http.StatusCreated || body != `POST /orders/1 key=1 body={"qty":1}` {
		t.Fatalf("the reply through the route the reload added: %d %q", resp.StatusCode, body)
	}
	e.waitReady()
}
