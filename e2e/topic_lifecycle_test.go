package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const lifecycleConfig = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/life" }]
        exit: kafka0
        with: { capability: fetch, topic: life-items, merge: { content-type: application/json } }
      - when: [{ method: GET, path: "/life/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: life-items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: PUT, path: "/life/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: life-items, key: "${params.id}" }
`

// deleteTopic deletes a topic on the test's broker through an admin client,
// as an operator would.
func (e *env) deleteTopic(ctx context.Context, topic string) {
	e.t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3})
	if err != nil {
		e.t.Fatal(err)
	}
	defer a.Close()
	res, err := a.DeleteTopics(ctx, []string{topic})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			e.t.Fatalf("deleting %s: %v", r.Topic, r.Error)
		}
	}
}

// TestDeletedTopicIsNotServed: the topic of a fetch route is deleted. A long
// poll on one of its records is woken and told the topic is gone, and every
// later request is answered as for a missing topic, with the reason, not
// with the deleted records. Recreated, the topic is served as the new
// generation alone: the deleted records are not found, the new ones are.
// The process stays ready meanwhile.
func TestDeletedTopicIsNotServed(t *testing.T) {
	t.Parallel()
	topic := embedded.Topic{Name: "life-items", Compact: true}
	e := startEnv(t, lifecycleConfig, withTopics(topic),
		func(o *stack.DevOptions) { o.PartitionCheck = 100 * time.Millisecond })
	for _, k := range []string{"old1", "old2", "old3", "old4", "old5", "old6"} {
		e.put(topic.Name, 0, k, []byte(`"`+k+`"`))
	}
	resp, body := e.request(e.h1, "GET", "/life/old6", "", "prefer", "wait=10")
	if resp.StatusCode != http.StatusOK || body != `"old6"` {
		t.Fatalf("GET /life/old6: %d %q", resp.StatusCode, body)
	}
	resp, _ = e.request(e.h1, "GET", "/life/old1", "")
	old1Tag := resp.Header.Get("etag")

	// A long poll on old1, which does not change: woken by the deletion
	// (or, should it arrive after the deletion is noticed, answered at once).
	ctx := ctxFor(t, 60*time.Second)
	type answer struct {
		resp *http.Response
		body string
		err  error
	}
	polled := make(chan answer, 1)
	go func() {
		resp, body, err := e.sendReq(ctx, e.h1, "GET", "/life/old1", "", "prefer", "wait=50", "if-none-match", old1Tag)
		polled <- answer{resp, body, err}
	}()

	e.deleteTopic(ctx, topic.Name)
	select {
	case a := <-polled:
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(a.body, "deleted") {
			t.Errorf("long poll on a record of a deleted topic: %d %s, want 503 saying it was deleted", a.resp.StatusCode, a.body)
		}
	case <-ctx.Done():
		t.Fatal("the long poll was not woken by the topic's deletion")
	}
	resp, body = e.request(e.h1, "GET", "/life/old1", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "deleted") {
		t.Errorf("GET /life/old1 after the topic was deleted: %d %s, want 503 saying it was deleted", resp.StatusCode, body)
	}
	// The deletion is noticed (the answers above); the process stays in
	// service for its other routes.
	if ready, reasons := e.dev.Processor.Readiness.Ready(); !ready {
		t.Errorf("not ready after a route's topic was deleted: %v", reasons)
	}

	if err := e.dev.Broker.CreateTopics(topic); err != nil {
		t.Fatal(err)
	}
	e.put(topic.Name, 0, "new1", []byte(`"new1"`))
	resp, body = e.request(e.h1, "GET", "/life/new1", "", "prefer", "wait=30")
	if resp.StatusCode != http.StatusOK || body != `"new1"` {
		t.Fatalf("GET /life/new1 after the topic was recreated: %d %q", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "GET", "/life/old1", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /life/old1 after the topic was recreated: %d %q, want 404", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "GET", "/life/old1", "", "if-none-match", old1Tag); resp.StatusCode != http.StatusNotFound {
		t.Errorf("conditional GET /life/old1 after the topic was recreated: %d %q, want 404", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "GET", "/life", ""); resp.StatusCode != http.StatusOK || body != `["new1"]` {
		t.Errorf("GET /life after the topic was recreated: %d %s, want the new generation alone", resp.StatusCode, body)
	}
}

// TestRecreatedTopicIsNotMerged: the topic of a fetch route is deleted and
// recreated at once, before any reader notices, and two records written to
// it. The view is rebuilt from the new generation: the list holds the two
// new records and none of the six deleted ones, and the deleted records'
// tags do not match (no 304 for a record that no longer exists).
func TestRecreatedTopicIsNotMerged(t *testing.T) {
	t.Parallel()
	topic := embedded.Topic{Name: "life-items", Compact: true}
	// The partition check is left at its default (30s): the recreation is
	// noticed by what the live consumer reads.
	e := startEnv(t, lifecycleConfig, withTopics(topic))
	for _, k := range []string{"old1", "old2", "old3", "old4", "old5", "old6"} {
		e.put(topic.Name, 0, k, []byte(`"`+k+`"`))
	}
	// old6 is the last written: once it is served, so are the others.
	if resp, body := e.request(e.h1, "GET", "/life/old6", "", "prefer", "wait=10"); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /life/old6: %d %q", resp.StatusCode, body)
	}
	resp, body := e.request(e.h1, "GET", "/life", "")
	if resp.StatusCode != http.StatusOK || strings.Count(body, "old") != 6 {
		t.Fatalf("GET /life: %d %q", resp.StatusCode, body)
	}
	listTag := resp.Header.Get("etag")

	ctx := ctxFor(t, 60*time.Second)
	e.deleteTopic(ctx, topic.Name)
	if err := e.dev.Broker.CreateTopics(topic); err != nil {
		t.Fatal(err)
	}
	e.put(topic.Name, 0, "new1", []byte(`"new1"`))
	e.put(topic.Name, 0, "new2", []byte(`"new2"`))
	resp, body = e.request(e.h1, "GET", "/life/new2", "", "prefer", "wait=30")
	if resp.StatusCode != http.StatusOK || body != `"new2"` {
		t.Fatalf("GET /life/new2 after the topic was recreated: %d %q", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "GET", "/life", ""); resp.StatusCode != http.StatusOK || body != `["new1","new2"]` {
		t.Errorf("GET /life after the topic was recreated: %d %s, want the two new records alone", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "GET", "/life", "", "if-none-match", listTag); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /life with the old generation's tag: %d %s, want 200", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "GET", "/life/old1", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /life/old1 after the topic was recreated: %d %q, want 404", resp.StatusCode, body)
	}
}

// TestWriteToRecreatedTopic: items are written through the processor, the
// topic deleted and created again, and written to again. The processor's
// idempotent producer finds the new generation's sequence out of order (a
// fatal error: it is replaced), and nothing of the request is in the log:
// the answer says "not written" (503, retry), not "may or may not" (504),
// and the retry, through the replacement producer, is written.
func TestWriteToRecreatedTopic(t *testing.T) {
	t.Parallel()
	topic := embedded.Topic{Name: "life-items", Compact: true}
	e := startEnv(t, lifecycleConfig, withTopics(topic))
	for _, k := range []string{"old1", "old2", "old3"} {
		if resp, body := e.request(e.h1, "PUT", "/life/"+k, `"`+k+`"`, "content-type", "application/json"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("PUT /life/%s: %d %s", k, resp.StatusCode, body)
		}
	}
	ctx := ctxFor(t, 60*time.Second)
	e.deleteTopic(ctx, topic.Name)
	if err := e.dev.Broker.CreateTopics(topic); err != nil {
		t.Fatal(err)
	}
	// The embedded broker answers the new generation's first batch out of
	// sequence (a broker may instead say it does not know the producer,
	// which librdkafka recovers from, and the first PUT is written).
	resp, body := e.request(e.h1, "PUT", "/life/new1", `"new1"`, "content-type", "application/json")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "not written") || resp.Header.Get("retry-after") == "" {
		t.Fatalf("first PUT after the recreation: %d %s, want 503 + retry-after saying it was not written", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "PUT", "/life/new1", `"new1"`, "content-type", "application/json"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the retry of the first PUT after the recreation: %d %s, want 204", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "GET", "/life/new1", "", "prefer", "wait=30"); resp.StatusCode != http.StatusOK || body != `"new1"` {
		t.Errorf("GET /life/new1: %d %q", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "GET", "/life", ""); resp.StatusCode != http.StatusOK || body != `["new1"]` {
		t.Errorf("GET /life: %d %s, want the new record alone", resp.StatusCode, body)
	}
}

// TestViewAcrossTopicLifecycle: a fetch route's view under the operator
// actions on its topic. Records removed below the view's position
// (DeleteRecords): a long poll on a removed key is woken and answered 404,
// and the list no longer holds it, while the keys still in the log stay.
// The topic deleted and created again with fewer partitions, then with
// more: the view is the new generation alone each time.
func TestViewAcrossTopicLifecycle(t *testing.T) {
	t.Parallel()
	topic := embedded.Topic{Name: "life-items", Compact: true, Partitions: 2}
	e := startEnv(t, lifecycleConfig, withTopics(topic),
		func(o *stack.DevOptions) { o.PartitionCheck = 100 * time.Millisecond })
	ctx := ctxFor(t, 90*time.Second)
	for _, k := range []string{"t1", "t2", "t3"} {
		e.put(topic.Name, 0, k, []byte(`"`+k+`"`))
	}
	e.put(topic.Name, 1, "u1", []byte(`"u1"`))
	resp, body := e.request(e.h1, "GET", "/life/u1", "", "prefer", "wait=10")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /life/u1: %d %s", resp.StatusCode, body)
	}
	resp, body = e.request(e.h1, "GET", "/life/t1", "", "prefer", "wait=10")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /life/t1: %d %s", resp.StatusCode, body)
	}
	tag := resp.Header.Get("etag")

	e.deleteRecords(ctx, topic.Name, 0, 2) // t1 and t2 go; t3 and u1 stay
	resp, body = e.request(e.h1, "GET", "/life/t1", "", "prefer", "wait=30", "if-none-match", tag)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a long poll on t1, whose record was removed: %d %s, want 404", resp.StatusCode, body)
	}
	if resp, body = e.request(e.h1, "GET", "/life", ""); resp.StatusCode != http.StatusOK || body != `["t3","u1"]` {
		t.Errorf("GET /life after records were removed: %d %s, want the records still in the log", resp.StatusCode, body)
	}

	for _, partitions := range []int32{1, 3} {
		e.deleteTopic(ctx, topic.Name)
		if err := e.dev.Broker.CreateTopics(embedded.Topic{Name: topic.Name, Compact: true, Partitions: partitions}); err != nil {
			t.Fatal(err)
		}
		e.newProducer()
		key := fmt.Sprintf("new%d", partitions)
		e.put(topic.Name, partitions-1, key, []byte(`"`+key+`"`))
		resp, body = e.request(e.h1, "GET", "/life/"+key, "", "prefer", "wait=30")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d partitions: GET /life/%s: %d %s", partitions, key, resp.StatusCode, body)
		}
		if resp, body = e.request(e.h1, "GET", "/life", ""); resp.StatusCode != http.StatusOK || body != `["`+key+`"]` {
			t.Errorf("%d partitions: GET /life: %d %s, want the new generation alone", partitions, resp.StatusCode, body)
		}
	}
}
