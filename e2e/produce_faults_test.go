package e2e_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const faultsConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: "/events/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: events, key: "${params.id}", acks: leader_only }
      - when: [{ method: POST, path: "/fresh/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: fresh, key: "${params.id}", acks: leader_only }
      - when: [{ method: POST, path: "/isr/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: isr, key: "${params.id}", acks: in_sync_replicas }
      - when: [{ method: POST, path: "/none/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: none, key: "${params.id}", acks: none }
limits: { kafka-timeout: 5s }
`

// Broker faults (docs/reliability.md): a record never handed to a broker is a
// 503 (retry-after; retrying is safe), one handed over but not acknowledged is
// a 504 (outcome unknown), both within limits.kafka-timeout; after the broker
// is back, every request answered 2xx has its record once and no request
// answered 503 has one. A broker that holds a produce request past librdkafka's
// request timeout and then writes it is the case where a re-sent batch would be
// written twice: see heldProduce.
func TestProduceBrokerFaults(t *testing.T) {
	t.Parallel()
	var ln *switchedListener
	logs := newLogEvents(t)
	e := startEnv(t, faultsConfig, switched(&ln), func(o *stack.DevOptions) { o.Logger = slog.New(logs) })
	const kafkaTimeout = 5 * time.Second

	var mu sync.Mutex
	answers := map[string]int{} // marker → status, topic events
	post := func(path string) (int, time.Duration, http.Header, string) {
		marker := path[strings.LastIndex(path, "/")+1:]
		start := time.Now()
		resp, body := e.request(e.h1, "POST", "/"+path, marker)
		took := time.Since(start)
		if strings.HasPrefix(path, "events/") {
			mu.Lock()
			answers[marker] = resp.StatusCode
			mu.Unlock()
		}
		return resp.StatusCode, took, resp.Header, body
	}
	for i := 0; i < 5; i++ {
		if status, _, _, body := post(fmt.Sprintf("events/up-%d", i)); status != http.StatusNoContent {
			t.Fatalf("before the fault: %d %s", status, body)
		}
	}

	// The broker goes away: records are never handed over.
	down := logs.on("no broker reachable", "acks=leader")
	ln.set(t, false)
	select {
	case <-down:
	case <-time.After(20 * time.Second):
		t.Fatal("the producer never saw the broker go away")
	}
	// A topic the producer never wrote to: no metadata, nothing handed over.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		resp, body := e.request(e.h1, "POST", "/fresh/1", "fresh")
		took := time.Since(start)
		t.Logf("broker down, topic never written: %d after %v", resp.StatusCode, took)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("retry-after") == "" || !strings.Contains(body, "not written") ||
			took > kafkaTimeout+500*time.Millisecond {
			t.Errorf("broker down, topic never written: %d %v %q after %v, want 503 + retry-after within %v", resp.StatusCode, resp.Header, body, took, kafkaTimeout)
		}
	}()
	// A topic written before: the record waits in librdkafka's queue until
	// its message timeout, then is reported as never sent (503). That report
	// comes from librdkafka's once-a-second timeout scan, so it can land
	// after the Kafka timeout; the answer is then 504 (outcome unknown),
	// less precise but still true.
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, took, hdr, body := post(fmt.Sprintf("events/down-%d", i))
			t.Logf("broker down: %d after %v", status, took)
			switch {
			case took > kafkaTimeout+500*time.Millisecond:
				t.Errorf("broker down: answered after %v, want within the Kafka timeout %v", took, kafkaTimeout)
			case status == http.StatusServiceUnavailable:
				if hdr.Get("retry-after") == "" || !strings.Contains(body, "not written") {
					t.Errorf("broker down: 503 %v %q, want retry-after and a detail saying the record was not written", hdr, body)
				}
			case status == http.StatusGatewayTimeout:
				t.Logf("librdkafka reported the timed-out record after the Kafka timeout: 504")
			default:
				t.Errorf("broker down: %d %q, want 503", status, body)
			}
		}()
	}
	wg.Wait()

	// The broker is back.
	up := logs.on("a broker is reachable again", "acks=leader")
	ln.set(t, true)
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		t.Fatal("the producer never saw the broker come back")
	}

	// The broker takes a record and answers too late, in each acks mode.
	heldProduce(t, e, "events", "late-0", http.StatusGatewayTimeout, post, kafkaTimeout)
	heldProduce(t, e, "isr", "late-1", http.StatusNoContent, post, kafkaTimeout)
	heldProduce(t, e, "none", "late-2", http.StatusNoContent, post, kafkaTimeout)

	// Afterwards requests succeed again (a 503 while librdkafka reconnects
	// is retried, as a client would).
	for i := 0; i < 5; i++ {
		marker := fmt.Sprintf("after-%d", i)
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, _, _, body := post("events/" + marker)
			if status == http.StatusNoContent {
				break
			}
			if status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout || time.Now().After(deadline) {
				t.Fatalf("after the fault: %d %s", status, body)
			}
			marker += "-retry"
		}
	}

	written := map[string]int{}
	for _, m := range e.readTopic("events") {
		written[string(m.Value)]++
	}
	ok2xx, gone503 := 0, 0
	for marker, status := range answers {
		switch {
		case status/100 == 2:
			ok2xx++
			if written[marker] != 1 {
				t.Errorf("%s was answered %d but has %d records", marker, status, written[marker])
			}
		case status == http.StatusServiceUnavailable:
			gone503++
			if written[marker] != 0 {
				t.Errorf("%s was answered 503 (not written) but has %d records", marker, written[marker])
			}
		}
	}
	t.Logf("%d requests answered 2xx, all written once; %d answered 503, none written", ok2xx, gone503)
}

// heldProduce holds the broker's first produce request to topic (route
// /topic/{id}) until the client has its answer, then lets the broker write
// it. librdkafka's request timeout fires meanwhile, so the batch may be in
// the log: with acks=leader (topic events) the producer must not re-send it
// and the answer is 504; with in_sync_replicas (topic isr) the idempotent
// producer re-sends it, the re-sent batch is written and answered 204, and
// the broker drops the held copy by its sequence number; with acks=none
// (topic none) the broker never answers, so the record is 204 once handed
// over. In every mode the record is in the log exactly once, and the answer
// does not depend on which of librdkafka's timers fires first: nothing is
// released by a timer.
func heldProduce(t *testing.T, e *env, topic, marker string, want int, post func(string) (int, time.Duration, http.Header, string), kafkaTimeout time.Duration) {
	t.Helper()
	wake, woken := make(chan struct{}), make(chan struct{})
	var held, resent atomic.Int32
	var done atomic.Bool
	cluster := e.dev.Broker.Cluster()
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !done.Load() {
			cluster.KeepControl()
		}
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) == 0 || pr.Topics[0].Topic != topic {
			return nil, nil, false
		}
		if held.CompareAndSwap(0, 1) {
			cluster.SleepControl(func() { <-wake })
			defer close(woken) // the broker handles the request after this returns
			return nil, nil, false
		}
		resent.Add(1)
		return nil, nil, false
	})
	status, took, _, body := post(topic + "/" + marker)
	close(wake)
	<-woken
	t.Logf("%s, request held past its timeout: %d after %v, %d produce requests after it", topic, status, took, resent.Load())
	if took > kafkaTimeout+500*time.Millisecond {
		t.Errorf("%s: answered after %v, want within the Kafka timeout %v", topic, took, kafkaTimeout)
	}
	if status != want || status == http.StatusGatewayTimeout && !strings.Contains(body, "may or may not") {
		t.Errorf("%s: %d %q, want %d", topic, status, body, want)
	}
	if topic == "events" && resent.Load() != 0 {
		t.Errorf("%s (acks=leader): the producer re-sent a batch that may be in the log (%d requests)", topic, resent.Load())
	}
	// One more record through the same producer, answered after the broker
	// handled the held request; then the log must hold the marker once.
	if s, _, _, b := post(topic + "/" + marker + "-next"); s != http.StatusNoContent {
		t.Fatalf("%s: the record after the held one: %d %s", topic, s, b)
	}
	done.Store(true)
	n := 0
	for _, m := range e.readTopic(topic) {
		if string(m.Value) == marker {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%s: %s was answered %d and is in the log %d times, want once", topic, marker, status, n)
	}
}
