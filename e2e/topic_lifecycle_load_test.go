package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// lifecycleOp is one request of the load and what it was answered.
type lifecycleOp struct {
	put          bool
	key, value   string // PUT: the value written; GET: the body of a 200
	code         int
	start, ended time.Time
}

// lifecycleLoad runs keyed writes and reads of the lifecycle routes until
// stopped, and keeps every answer.
type lifecycleLoad struct {
	e       *env
	mu      sync.Mutex
	ops     []lifecycleOp
	written []string // keys answered 204, for the readers to pick from
	acked   atomic.Int64
	more    chan struct{} // closed at the next 204, under mu
	wg      sync.WaitGroup
}

func (l *lifecycleLoad) record(op lifecycleOp) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, op)
	if op.put && op.code == http.StatusNoContent {
		l.written = append(l.written, op.key)
		l.acked.Add(1)
		close(l.more)
		l.more = make(chan struct{})
	}
}

// writer PUTs a new key at a time, with its idempotency key.
func (l *lifecycleLoad) writer(ctx context.Context, w int) {
	defer l.wg.Done()
	for i := 0; ctx.Err() == nil; i++ {
		key, value := fmt.Sprintf("k-%d-%d", w, i), fmt.Sprintf(`"v-%d-%d"`, w, i)
		start := time.Now()
		resp, _, err := l.e.sendReq(ctx, l.e.h1, "PUT", "/life/"+key, value, "content-type", "application/json", "idempotency-key", key)
		if err != nil {
			continue // the test is ending
		}
		l.record(lifecycleOp{put: true, key: key, value: value, code: resp.StatusCode, start: start, ended: time.Now()})
	}
}

// reader GETs a key answered 204 before, the newest ones mostly.
func (l *lifecycleLoad) reader(ctx context.Context, r *rand.Rand) {
	defer l.wg.Done()
	for ctx.Err() == nil {
		l.mu.Lock()
		n := len(l.written)
		key := ""
		if n > 0 {
			key = l.written[n-1-r.IntN(min(n, 50))]
		}
		l.mu.Unlock()
		if key == "" {
			key = "none-yet"
		}
		start := time.Now()
		resp, body, err := l.e.sendReq(ctx, l.e.h1, "GET", "/life/"+key, "")
		if err != nil {
			continue
		}
		op := lifecycleOp{key: key, code: resp.StatusCode, start: start, ended: time.Now()}
		if resp.StatusCode == http.StatusOK {
			op.value = body
		}
		l.record(op)
	}
}

// waitAcked waits until n more writes than now were answered 204.
func (l *lifecycleLoad) waitAcked(t *testing.T, ctx context.Context, n int64) {
	t.Helper()
	want := l.acked.Load() + n
	for l.acked.Load() < want {
		l.mu.Lock()
		more, ops := l.more, len(l.ops)
		l.mu.Unlock()
		select {
		case <-more:
		case <-ctx.Done():
			t.Fatalf("%d of %d writes acknowledged (%d answers in all)", l.acked.Load(), want, ops)
		}
	}
}

// TestTopicRecreatedUnderLoad: keyed oneway writes and GETs of what was
// written run while the topic is deleted and created again. Checked over
// every answer: no GET that started after the processor saw the deletion
// is answered with a record of the deleted generation; every write that
// started after the deletion and was answered 204 is in the new
// generation's log; and writes and reads of the new generation are served
// again (the time from the creation to the first such read is logged, for
// BENCHMARKS.md: it is not asserted).
func TestTopicRecreatedUnderLoad(t *testing.T) {
	// Serial: it makes its own load.
	topic := embedded.Topic{Name: "life-items", Compact: true}
	var logs *logWatch
	e := startEnv(t, lifecycleConfig, withTopics(topic), withLogWatch(&logs),
		func(o *stack.DevOptions) { o.PartitionCheck = 100 * time.Millisecond })
	ctx := ctxFor(t, 120*time.Second)
	lctx, stop := context.WithCancel(ctx)
	l := &lifecycleLoad{e: e, more: make(chan struct{})}
	for w := range 4 {
		l.wg.Add(2)
		go l.writer(lctx, w)
		go l.reader(lctx, rand.New(rand.NewPCG(uint64(w), 1)))
	}
	defer func() { stop(); l.wg.Wait() }()
	l.waitAcked(t, ctx, 200)

	deleting := time.Now()
	e.deleteTopic(ctx, topic.Name)
	deleted := time.Now()
	logs.wait(t, ctx, viewDropped, 1)
	seen := logs.firstAt(viewDropped)
	if err := e.dev.Broker.CreateTopics(topic); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	l.waitAcked(t, ctx, 200)
	// The newest writes are read back before the load stops.
	l.mu.Lock()
	lastKeys := append([]string(nil), l.written[len(l.written)-8:]...)
	l.mu.Unlock()
	for _, key := range lastKeys {
		if resp, body := e.request(e.h1, "GET", "/life/"+key, "", "prefer", "wait=30"); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /life/%s of a write answered 204 after the recreation: %d %s", key, resp.StatusCode, body)
		}
	}
	stop()
	l.wg.Wait()

	inLog := map[string]string{}
	for _, m := range e.readTopic(topic.Name) {
		inLog[string(m.Key)] = string(m.Value)
	}
	var served time.Time // the first read of the new generation
	codes := map[string]int{}
	for _, op := range l.ops {
		kind := "GET"
		if op.put {
			kind = "PUT"
		}
		codes[fmt.Sprintf("%s %d", kind, op.code)]++
		switch {
		case op.put && op.code == http.StatusNoContent && op.start.After(deleted) && inLog[op.key] != op.value:
			t.Errorf("PUT %s started after the deletion, answered 204, is not in the new generation's log", op.key)
		case !op.put && op.code == http.StatusOK && op.start.After(seen) && inLog[op.key] != op.value:
			t.Errorf("GET %s started after the deletion was seen answered %s, a record of the deleted generation", op.key, op.value)
		case !op.put && op.code == http.StatusOK && op.start.After(created) && (served.IsZero() || op.ended.Before(served)):
			served = op.ended
		}
		// 504 is a write in flight when the topic went: the producer keeps
		// the record while the topic is missing, past the Kafka timeout,
		// and it may yet be written (to the new generation); the answer
		// says so.
		if op.code >= 500 && op.code != http.StatusServiceUnavailable && (!op.put || op.code != http.StatusGatewayTimeout) {
			t.Errorf("%s %s: %d, want a 2xx, 404, 503 (a deleted topic, a write not written) or, for a write, 504", kind, op.key, op.code)
		}
	}
	if served.IsZero() {
		t.Fatal("no read of the new generation was served")
	}
	t.Logf("answers: %v; deletion seen %v after it was asked for; the first read of the new generation served %v after its creation",
		codes, seen.Sub(deleting).Round(time.Millisecond), served.Sub(created).Round(time.Millisecond))
}

// viewDropped is the views' log line for a view whose topic changed.
const viewDropped = "a view's topic changed under it"

// firstAt is when the first line holding sub was logged (zero if none).
func (w *logWatch) firstAt(sub string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, m := range *w.msgs {
		if strings.Contains(m, sub) {
			return (*w.times)[i]
		}
	}
	return time.Time{}
}
