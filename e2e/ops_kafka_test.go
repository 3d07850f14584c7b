package e2e_test

import (
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// Statistics every 100ms, so the tests see librdkafka's numbers quickly.
const opsKafkaConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092", statistics.interval.ms: "100" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: "/t/{topic}/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.topic}", topic-pattern: "t-*", filters: [{ key: "${params.id}" }] }
      - when: [{ method: POST, path: /events }]
        exit: kafka0
        with: { capability: produce, topic: events }
      - when: [{ method: POST, path: "/p/{topic}/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: "${params.topic}", topic-pattern: "p-*", key: "${params.id}", acks: leader_only }
      - when: [{ method: POST, path: /orders }]
        exit: kafka0
        with: { capability: produce, topic: orders, reply-to: order-replies }
limits: { kafka-timeout: 3s }
`

// waitScrape scrapes (without waiting for exchanges) until cond holds,
// and returns the scrape that met it.
func (e *env) waitScrape(what string, cond func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	e.t.Helper()
	var mfs map[string]*dto.MetricFamily
	pollUntil(e.t, what, func() bool {
		mfs = e.scrapeNow()
		return cond(mfs)
	})
	return mfs
}

// has tells whether a family has a sample whose labels include want.
func has(mfs map[string]*dto.MetricFamily, name string, want map[string]string) bool {
	for _, m := range mfs[name].GetMetric() {
		ok := true
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == k && lp.GetValue() == v
			}
			ok = ok && found
		}
		if ok {
			return true
		}
	}
	return false
}

// Every record handed to a producer is counted once, by its result:
// acknowledged, or the cause. (A keyless produce to a missing topic fails
// before any record, when the topic's compaction is looked up.)
func TestProduceResultsCountedByCause(t *testing.T) {
	t.Parallel()
	e := startEnv(t, opsKafkaConfig, withAdmin)
	if err := e.dev.Broker.Cluster().CreateTopic("p-tiny", 1, map[string]string{"max.message.bytes": "200"}); err != nil {
		t.Fatal(err)
	}
	before := e.scrape()
	const n = 5
	for i := 0; i < n; i++ {
		if r, body := e.request(e.h1, "POST", "/events", `{"n":1}`); r.StatusCode >= 300 {
			t.Fatalf("produce %d: %d %s", i, r.StatusCode, body)
		}
	}
	if r, body := e.request(e.h1, "POST", "/p/p-tiny/1", strings.Repeat("x", 1000)); r.StatusCode != http.StatusBadGateway {
		t.Errorf("a record over the topic's max.message.bytes: %d %s, want 502", r.StatusCode, body)
	}
	if r, body := e.request(e.h1, "POST", "/p/p-missing/1", "x"); r.StatusCode != http.StatusNotFound {
		t.Errorf("a produce to a missing topic: %d %s", r.StatusCode, body)
	}
	after := e.scrape()
	for _, result := range []string{"acked", "timeout", "broker_unreachable", "queue_full", "message_too_large",
		"unknown_topic", "not_authorized", "rejected", "cancelled", "other"} {
		want := map[string]float64{"acked": n, "message_too_large": 1, "unknown_topic": 1}[result]
		l := map[string]string{"kafka": "kafka0", "result": result}
		if !has(after, "kafka_ext_proc_produce_records_total", l) {
			t.Errorf("no series for result %s", result)
		}
		if d := value(after, "kafka_ext_proc_produce_records_total", l) - value(before, "kafka_ext_proc_produce_records_total", l); d != want {
			t.Errorf("produce_records_total{result=%q} grew by %v, want %v", result, d, want)
		}
	}
}

// librdkafka's statistics: round trips and errors per broker for every
// long-lived client, queue depth, and lag per topic where templated topics
// are summed under their route's topic-pattern.
func TestRdkafkaStatisticsAndLag(t *testing.T) {
	t.Parallel()
	e := startEnv(t, opsKafkaConfig, withAdmin)
	for _, topic := range []string{"t-a", "t-b"} {
		if err := e.dev.Broker.Cluster().CreateTopic(topic, 2, map[string]string{"cleanup.policy": "compact"}); err != nil {
			t.Fatal(err)
		}
		e.put(topic, 1, "x", []byte("v"))
	}
	for i := 0; i < 3; i++ {
		e.put("items", 0, "k", []byte("v"))
	}
	for _, path := range []string{"/items/k", "/t/t-a/x", "/t/t-b/x"} {
		// The live view may not have read the record yet: wait for it.
		if r, body := e.request(e.h1, "GET", path, "", "prefer", "wait=10"); r.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, r.StatusCode, body)
		}
	}
	if r, body := e.request(e.h1, "POST", "/events", "x"); r.StatusCode >= 300 {
		t.Fatalf("produce: %d %s", r.StatusCode, body)
	}
	broker := e.dev.Broker.Addr()
	lag := func(topic string) map[string]string {
		return map[string]string{"kafka": "kafka0", "client": "views", "topic": topic}
	}
	mfs := e.waitScrape("statistics of the views' consumer and the producer, the views read to their ends", func(m map[string]*dto.MetricFamily) bool {
		return has(m, "kafka_ext_proc_consumer_lag_records", lag("items")) && value(m, "kafka_ext_proc_consumer_lag_records", lag("items")) == 0 &&
			has(m, "kafka_ext_proc_consumer_lag_records", lag("t-*")) && value(m, "kafka_ext_proc_consumer_lag_records", lag("t-*")) == 0 &&
			has(m, "kafka_ext_proc_rdkafka_queue_messages", map[string]string{"kafka": "kafka0", "client": "producer-all"})
	})
	for _, client := range []string{"views", "replies", "producer-all"} {
		for _, name := range []string{"kafka_ext_proc_rdkafka_broker_rtt_avg_seconds", "kafka_ext_proc_rdkafka_broker_rtt_p99_seconds",
			"kafka_ext_proc_rdkafka_broker_tx_errors_total", "kafka_ext_proc_rdkafka_broker_rx_errors_total",
			"kafka_ext_proc_rdkafka_broker_request_timeouts_total"} {
			if !has(mfs, name, map[string]string{"kafka": "kafka0", "client": client, "broker": broker}) {
				t.Errorf("no %s{client=%q, broker=%q}", name, client, broker)
			}
		}
	}
	// Templated topics are one series under their pattern, never their names.
	for _, m := range mfs["kafka_ext_proc_consumer_lag_records"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "topic" && strings.HasPrefix(lp.GetValue(), "t-") && lp.GetValue() != "t-*" {
				t.Errorf("a lag series for the concrete topic %q", lp.GetValue())
			}
		}
	}
	if v := value(mfs, "kafka_ext_proc_rdkafka_broker_tx_errors_total", map[string]string{"client": "views"}); v != 0 {
		t.Errorf("tx errors %v on a healthy broker", v)
	}

	// A record the producer holds while no broker answers is its queue.
	e.dev.Broker.Close()
	done := make(chan int, 1)
	go func() {
		r, _, err := e.sendReq(t.Context(), e.h1, "POST", "/events", "held")
		if err != nil {
			done <- 0
			return
		}
		done <- r.StatusCode
	}()
	queued := map[string]string{"kafka": "kafka0", "client": "producer-all"}
	e.waitScrape("the held record in the producer's queue", func(m map[string]*dto.MetricFamily) bool {
		return value(m, "kafka_ext_proc_rdkafka_queue_messages", queued) == 1 && value(m, "kafka_ext_proc_rdkafka_queue_bytes", queued) > 0
	})
	if st := <-done; st != http.StatusServiceUnavailable && st != http.StatusGatewayTimeout {
		t.Errorf("produce with the broker down: %d, want 503 or 504", st)
	}
	mfs = e.waitScrape("the producer's queue empty again", func(m map[string]*dto.MetricFamily) bool {
		return value(m, "kafka_ext_proc_rdkafka_queue_messages", queued) == 0
	})
	// Whether librdkafka had noticed that no broker answers before the record
	// was handed over decides between the two causes.
	down := value(mfs, "kafka_ext_proc_produce_records_total", map[string]string{"kafka": "kafka0", "result": "broker_unreachable"})
	timedOut := value(mfs, "kafka_ext_proc_produce_records_total", map[string]string{"kafka": "kafka0", "result": "timeout"})
	if down+timedOut != 1 {
		t.Errorf("produce_records_total: broker_unreachable %v, timeout %v; want one record in all", down, timedOut)
	}
}
