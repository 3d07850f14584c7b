package e2e_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const lifecycleIndexesConfig = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: "/life-orders/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: life-requests, key: "${params.id}", reply-to: life-replies }
      - when: [{ method: PUT, path: "/life-keys/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: life-keys, key: "${params.id}" }
`

// logWatch passes a stack's log lines on to its handler and counts, at
// every level, those whose message holds a given text: what a test waits
// on when the processor's only sign of an event is its log.
type logWatch struct {
	next  slog.Handler
	mu    *sync.Mutex
	msgs  *[]string
	times *[]time.Time   // when each was logged
	more  *chan struct{} // closed at the next line
}

func newLogWatch(next slog.Handler) *logWatch {
	more := make(chan struct{})
	return &logWatch{next: next, mu: &sync.Mutex{}, msgs: &[]string{}, times: &[]time.Time{}, more: &more}
}

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }

func (w *logWatch) Handle(ctx context.Context, r slog.Record) error {
	w.mu.Lock()
	*w.msgs = append(*w.msgs, r.Message)
	*w.times = append(*w.times, time.Now())
	close(*w.more)
	*w.more = make(chan struct{})
	w.mu.Unlock()
	if w.next.Enabled(ctx, r.Level) {
		return w.next.Handle(ctx, r)
	}
	return nil
}

func (w *logWatch) WithAttrs(as []slog.Attr) slog.Handler {
	c := *w
	c.next = w.next.WithAttrs(as)
	return &c
}

func (w *logWatch) WithGroup(name string) slog.Handler {
	c := *w
	c.next = w.next.WithGroup(name)
	return &c
}

// wait returns once n lines holding sub were logged.
func (w *logWatch) wait(t *testing.T, ctx context.Context, sub string, n int) {
	t.Helper()
	for {
		w.mu.Lock()
		count := 0
		for _, m := range *w.msgs {
			if strings.Contains(m, sub) {
				count++
			}
		}
		more := *w.more
		w.mu.Unlock()
		if count >= n {
			return
		}
		select {
		case <-more:
		case <-ctx.Done():
			t.Fatalf("%d log lines holding %q, want %d", count, sub, n)
		}
	}
}

// withLogWatch has the stack log through w as well.
func withLogWatch(w **logWatch) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) {
		*w = newLogWatch(o.Logger.Handler())
		o.Logger = slog.New(*w)
	}
}

// The processor's log lines the lifecycle tests wait on.
const (
	replyTopicDropped   = "a reply topic was deleted or created again"
	requestTopicDropped = "a request topic was deleted or created again"
	replyIndexCaughtUp  = "reply index caught up"
)

// TestReplyIndexAcrossTopicLifecycle: the reply index under the operator
// actions on its reply topic. A request-reply is answered; its reply topic
// deleted: a replay is not answered with the deleted reply (503 while the
// topic does not exist); created again with more partitions, then with
// fewer: a replay of a request whose reply went with its topic is 410 (its
// result expired) and writes nothing, and a new request is answered from
// the new generation. Records removed below the index's position
// (DeleteRecords) leave the replies it holds answered.
func TestReplyIndexAcrossTopicLifecycle(t *testing.T) {
	t.Parallel()
	var logs *logWatch
	e := startEnv(t, lifecycleIndexesConfig,
		withTopics(embedded.Topic{Name: "life-requests", Partitions: 1}, embedded.Topic{Name: "life-replies", Partitions: 2}),
		withLogWatch(&logs),
		func(o *stack.DevOptions) { o.PartitionCheck = 100 * time.Millisecond })
	ctx := ctxFor(t, 120*time.Second)
	// The responder is started anew with each generation of the reply
	// topic: a producer's metadata of a topic never shrinks, and one that
	// knew more partitions than the new generation has fails to write to
	// them.
	var rsp *responder.Responder
	startResponder := func() {
		t.Helper()
		if rsp != nil {
			rsp.Close()
		}
		var err error
		rsp, err = responder.Start(responder.Options{
			Properties: map[string]string{"bootstrap.servers": e.dev.Broker.Addr()},
			Topic:      "life-requests", Handler: responder.HTTPEcho(),
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	startResponder()
	t.Cleanup(func() { rsp.Close() })
	order := func(id, key string) (int, string) {
		t.Helper()
		resp, body := e.request(e.h1, "POST", "/life-orders/"+id, `{"id":"`+id+`"}`, "content-type", "application/json", "idempotency-key", key)
		return resp.StatusCode, body
	}
	if code, body := order("1", "k1"); code != http.StatusCreated {
		t.Fatalf("the first order: %d %s", code, body)
	}
	requests := len(e.readTopic("life-requests"))

	e.deleteTopic(ctx, "life-replies")
	logs.wait(t, ctx, replyTopicDropped, 1)
	if code, body := order("1", "k1"); code != http.StatusServiceUnavailable {
		t.Errorf("a replay while the reply topic is deleted: %d %s, want 503 (not the deleted reply)", code, body)
	}

	for i, partitions := range []int32{3, 1} {
		if i > 0 {
			e.deleteTopic(ctx, "life-replies")
		}
		if err := e.dev.Broker.CreateTopics(embedded.Topic{Name: "life-replies", Partitions: partitions}); err != nil {
			t.Fatal(err)
		}
		startResponder()
		logs.wait(t, ctx, replyTopicDropped, 1+i)
		logs.wait(t, ctx, replyIndexCaughtUp, 2+i)
		// The reply of k1 (and, the second time, of k2) went with its
		// topic: expired, and not written again.
		gone := []string{"k1"}
		if i > 0 {
			gone = append(gone, "k2")
		}
		for _, key := range gone {
			if code, body := order(strings.TrimPrefix(key, "k"), key); code != http.StatusGone || !strings.Contains(body, "no longer") {
				t.Errorf("%d partitions: a replay of %s, whose reply was deleted with its topic: %d %s, want 410", partitions, key, code, body)
			}
		}
		key := []string{"k2", "k3"}[i]
		if code, body := order(strings.TrimPrefix(key, "k"), key); code != http.StatusCreated || !strings.Contains(body, `"id":"`+key[1:]+`"`) {
			t.Fatalf("%d partitions: a new order %s: %d %s, want its reply of the new generation", partitions, key, code, body)
		}
	}
	if n := len(e.readTopic("life-requests")); n != requests+2 {
		t.Errorf("%d request records, want %d: one per new order, none for the replays", n, requests+2)
	}

	e.deleteRecords(ctx, "life-replies", 0, 1)
	if code, body := order("3", "k3"); code != http.StatusCreated {
		t.Errorf("a replay after the records below it were removed: %d %s, want the reply the index holds", code, body)
	}
}

// TestKeyIndexAcrossTopicLifecycle: the key index under the operator
// actions on a keyed oneway route's topic. A keyed write repeated writes
// nothing; the topic deleted: the key answers as for a missing topic, not
// as written; created again with more partitions, then with fewer: the
// repeat is written again, once, into the new generation (its first copy
// went with the topic), and every 204 is a record in the log. Records
// removed below the index's position leave the key answered as written.
func TestKeyIndexAcrossTopicLifecycle(t *testing.T) {
	t.Parallel()
	var logs *logWatch
	e := startEnv(t, lifecycleIndexesConfig,
		withTopics(embedded.Topic{Name: "life-keys", Partitions: 2}),
		withLogWatch(&logs),
		func(o *stack.DevOptions) { o.PartitionCheck = 100 * time.Millisecond })
	ctx := ctxFor(t, 120*time.Second)
	put := func(key string) (int, string) {
		t.Helper()
		resp, body := e.request(e.h1, "PUT", "/life-keys/"+key, `"`+key+`"`, "content-type", "application/json", "idempotency-key", key)
		return resp.StatusCode, body
	}
	// written puts key until it is written: the first write to a recreated
	// topic may be refused out of sequence and answered 503 not written.
	written := func(key string) {
		t.Helper()
		for range 3 {
			code, body := put(key)
			if code == http.StatusNoContent {
				return
			}
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "not written") {
				t.Fatalf("PUT %s: %d %s, want 204 or 503 not written", key, code, body)
			}
		}
		t.Fatalf("PUT %s: not written in three tries", key)
	}
	records := func(key string) int {
		t.Helper()
		n := 0
		for _, m := range e.readTopic("life-keys") {
			if string(m.Key) == key {
				n++
			}
		}
		return n
	}
	written("a")
	written("a")
	if n := records("a"); n != 1 {
		t.Fatalf("%d records of a, want 1", n)
	}

	e.deleteTopic(ctx, "life-keys")
	logs.wait(t, ctx, requestTopicDropped, 1)
	if code, body := put("a"); code == http.StatusNoContent {
		t.Errorf("a repeat while its topic is deleted: %d %s, want it not answered as written", code, body)
	}

	for i, partitions := range []int32{3, 1} {
		if i > 0 {
			e.deleteTopic(ctx, "life-keys")
			logs.wait(t, ctx, requestTopicDropped, 2)
		}
		if err := e.dev.Broker.CreateTopics(embedded.Topic{Name: "life-keys", Partitions: partitions}); err != nil {
			t.Fatal(err)
		}
		written("a")
		if n := records("a"); n != 1 {
			t.Errorf("%d partitions: %d records of a after its repeat, want 1 (written again into the new generation)", partitions, n)
		}
		written("a")
		if n := records("a"); n != 1 {
			t.Errorf("%d partitions: %d records of a after a second repeat, want 1", partitions, n)
		}
	}

	e.deleteRecords(ctx, "life-keys", 0, 1)
	if code, body := put("a"); code != http.StatusNoContent {
		t.Errorf("a repeat after the records below it were removed: %d %s, want 204 (it was written)", code, body)
	}
}
