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
limits: { kafka-timeout: 3s }
`

// Broker faults (DESIGN §6.6): a record never handed to a broker is a 503
// (retry-after; retrying is safe), one handed over but not acknowledged is
// a 504 (outcome unknown), both within limits.kafka-timeout; after the
// broker is back, every request answered 2xx has its record and no request
// answered 503 has one.
func TestProduceBrokerFaults(t *testing.T) {
	var ln *switchedListener
	logs := newLogEvents(t)
	e := startEnv(t, faultsConfig, switched(&ln), func(o *stack.DevOptions) { o.Logger = slog.New(logs) })
	const kafkaTimeout = 3 * time.Second

	var mu sync.Mutex
	answers := map[string]int{} // marker → status
	post := func(marker string) (int, time.Duration, http.Header, string) {
		start := time.Now()
		resp, body := e.request(e.h1, "POST", "/events/"+marker, marker)
		took := time.Since(start)
		mu.Lock()
		answers[marker] = resp.StatusCode
		mu.Unlock()
		return resp.StatusCode, took, resp.Header, body
	}
	for i := 0; i < 5; i++ {
		if status, _, _, body := post(fmt.Sprintf("up-%d", i)); status != http.StatusNoContent {
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
			status, took, hdr, body := post(fmt.Sprintf("down-%d", i))
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

	// The broker takes the next record and answers too late: the outcome
	// is unknown when the Kafka timeout runs out.
	wake := make(chan struct{})
	var slept atomic.Bool
	cluster := e.dev.Broker.Cluster()
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) > 0 && pr.Topics[0].Topic == "events" && slept.CompareAndSwap(false, true) {
			cluster.SleepControl(func() { <-wake })
		}
		return nil, nil, false // then the broker writes it, late
	})
	status, took, _, body := post("late-0")
	t.Logf("no acknowledgement: %d after %v", status, took)
	if status != http.StatusGatewayTimeout || !strings.Contains(body, "may or may not") || took > kafkaTimeout+500*time.Millisecond {
		t.Errorf("no acknowledgement: %d %q after %v, want 504 within %v", status, body, took, kafkaTimeout)
	}
	close(wake)

	// Afterwards requests succeed again (a 503 while librdkafka reconnects
	// is retried, as a client would).
	for i := 0; i < 5; i++ {
		marker := fmt.Sprintf("after-%d", i)
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, _, _, body := post(marker)
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
	t.Logf("%d requests answered 2xx, all written once; %d answered 503, none written; the 504's record: %d", ok2xx, gone503, written["late-0"])
}
