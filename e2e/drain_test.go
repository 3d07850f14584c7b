package e2e_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
)

const drainConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when:
          - { method: POST, path: "/orders/{id}" }
          - { method: GET, path: "/orders/{id};cid={correlationId}" }
        exit: kafka0
        with:
          capability: produce
          topic: orders
          key: "${params.id}"
          reply-to: replies
          async: { location: "/orders/${params.id};cid=${correlationId}" }
      - when: [{ method: POST, path: "/sync/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: orders, key: "${params.id}", reply-to: replies }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: example.Fanout }]
        exit: kafka0
        with: { capability: fetch, topic: fanout }
limits: { reply-timeout: 60s, max-wait: 60s }
`

// Drain (docs/design.md#drain): with a long poll, a fetch stream, and a sync
// and an async produce waiting for replies, a shutdown answers the long poll
// with its current state, the async request with 202 + location, ends the
// stream UNAVAILABLE, lets the sync request finish within the grace period, and
// returns within it; every acknowledged record is in Kafka.
func TestDrainEndsEveryKindOfWaitAsDesigned(t *testing.T) {
	t.Parallel()
	tr := newTestResponder()
	e := startEnv(t, drainConfig, withResponder(tr, "orders"))
	release := tr.hold()
	defer release()

	e.put("items", 0, "k", []byte("v"))
	resp, _ := e.request(e.h1, "GET", "/items/k", "", "prefer", "wait=10")
	etag := resp.Header.Get("etag")

	type answer struct {
		resp *http.Response
		body string
	}
	poll, async, sync := make(chan answer, 1), make(chan answer, 1), make(chan answer, 1)
	go func() {
		r, b := e.request(e.h1, "GET", "/items/k", "", "if-none-match", etag, "prefer", "wait=60")
		poll <- answer{r, b}
	}()
	go func() {
		r, b := e.request(e.h1, "POST", "/orders/1", `{"n":1}`, "prefer", "respond-async, wait=60")
		async <- answer{r, b}
	}()
	go func() {
		r, b := e.request(e.h1, "POST", "/sync/2", `{"n":2}`)
		sync <- answer{r, b}
	}()
	stream, err := example.NewFanoutClient(e.grpcConn()).Subscribe(context.Background(), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	e.waitGauge("kafka_ext_proc_fetch_waiters", 1)
	e.waitGauge("kafka_ext_proc_produce_reply_waiters", 2)
	e.waitGauge("kafka_ext_proc_grpc_fetch_streams", 1)

	const grace = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopped := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		e.dev.Processor.Shutdown(ctx)
		stopped <- time.Since(start)
	}()

	if a := <-poll; a.resp.StatusCode != http.StatusNotModified || a.resp.Header.Get("etag") != etag {
		t.Errorf("long poll on drain: %d %v, want 304 with its etag", a.resp.StatusCode, a.resp.Header)
	}
	if a := <-async; a.resp.StatusCode != http.StatusAccepted || !strings.HasPrefix(a.resp.Header.Get("location"), "/orders/1;cid=") {
		t.Errorf("async produce on drain: %d %v, want 202 + location", a.resp.StatusCode, a.resp.Header)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("fetch stream on drain: %v, want UNAVAILABLE", err)
	}
	release() // the reply comes within the grace period
	if a := <-sync; a.resp.StatusCode != http.StatusCreated {
		t.Errorf("sync produce during the drain: %d %q, want its reply (201)", a.resp.StatusCode, a.body)
	}
	took := <-stopped
	if took >= grace {
		t.Errorf("shutdown took %v, at or over the grace period", took)
	}
	t.Logf("drained in %v", took)
	if n := len(e.readTopic("orders")); n != 2 {
		t.Errorf("%d records in orders, want the 2 acknowledged ones", n)
	}
}
