package e2e_test

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// itemsRoute and topicRoute are the default ids of opsConfig's routes.
const (
	itemsRoute = "GET:/items/{id}"
	topicRoute = "GET:/t/{topic}/{id}"
)

const opsConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
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
limits: { kafka-timeout: 2s }
`

func withAdmin(o *stack.DevOptions) { o.Admin = "127.0.0.1:0" }

// scrape reads /metrics over HTTP as Prometheus would, once every exchange
// has ended (an exchange is counted when Envoy closes its stream, just after
// the client has its answer).
func (e *env) scrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	e.waitGauge("kafka_ext_proc_exchanges_in_flight", 0)
	return e.scrapeNow()
}

// scrapeNow reads /metrics without waiting for the exchanges.
func (e *env) scrapeNow() map[string]*dto.MetricFamily {
	e.t.Helper()
	resp, err := http.Get("http://" + e.dev.Processor.AdminAddr() + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return mfs
}

// value sums the samples of a family whose labels include want (for a
// histogram, its sample counts).
func value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	mf, ok := mfs[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		match := true
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			match = match && found
		}
		if match {
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// series names every series of a scrape: family{label="value",...}.
//
// The answer's labels (outcome, code, grpc_code) are left out: their values
// are a fixed set, and which of them a run meets depends on the machine (a
// view that takes longer than the Kafka timeout to start answers 503 on a
// loaded one). What the series must never carry is a value taken from a
// request.
func series(mfs map[string]*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var b strings.Builder
			b.WriteString(name)
			for _, l := range m.GetLabel() {
				if answerLabels[l.GetName()] {
					continue
				}
				fmt.Fprintf(&b, " %s=%q", l.GetName(), l.GetValue())
			}
			out[b.String()] = true
		}
	}
	return out
}

var answerLabels = map[string]bool{"outcome": true, "code": true, "grpc_code": true}

func TestMetricsCountExactly(t *testing.T) {
	t.Parallel()
	e := startEnv(t, opsConfig, withAdmin)
	e.put("items", 0, "k", []byte("v"))
	if r, _ := e.request(e.h1, "GET", "/items/k", "", "prefer", "wait=10"); r.StatusCode != 200 {
		t.Fatalf("warm-up: %d", r.StatusCode)
	}
	before := e.scrape()
	for i := 0; i < 3; i++ {
		e.request(e.h1, "GET", "/items/missing", "")
	}
	for i := 0; i < 2; i++ {
		e.request(e.h2c, "GET", "/items/k", "")
	}
	e.request(e.h1, "GET", "/nowhere", "")
	after := e.scrape()
	delta := func(code string, binding string) float64 {
		l := map[string]string{"kind": "http", "code": code, "grpc_code": "none", "binding": binding}
		return value(after, "kafka_ext_proc_exchanges_total", l) - value(before, "kafka_ext_proc_exchanges_total", l)
	}
	if d := delta("404", "http0"); d != 4 {
		t.Errorf("404s counted %v, want 4 (3 missing keys, 1 without a route)", d)
	}
	if d := delta("200", "http0"); d != 2 {
		t.Errorf("200s counted %v, want 2", d)
	}
	if d := value(after, "kafka_ext_proc_exchanges_total", map[string]string{"outcome": "client_error"}) -
		value(before, "kafka_ext_proc_exchanges_total", map[string]string{"outcome": "client_error"}); d != 4 {
		t.Errorf("client errors counted %v, want 4", d)
	}
	if d := value(after, "kafka_ext_proc_exchanges_total", map[string]string{"outcome": "ok"}) -
		value(before, "kafka_ext_proc_exchanges_total", map[string]string{"outcome": "ok"}); d != 2 {
		t.Errorf("ok answers counted %v, want 2", d)
	}
	// Route and capability: the matched route's id, never the path.
	routeDelta := func(code, route, capability string) float64 {
		l := map[string]string{"binding": "http0", "kind": "http", "code": code, "route": route, "capability": capability}
		return value(after, "kafka_ext_proc_exchanges_total", l) - value(before, "kafka_ext_proc_exchanges_total", l)
	}
	if d := routeDelta("404", itemsRoute, "fetch"); d != 3 {
		t.Errorf("404s of route %s (fetch) counted %v, want 3", itemsRoute, d)
	}
	if d := routeDelta("404", "none", "none"); d != 1 {
		t.Errorf("404s without a route counted %v, want 1", d)
	}
	if d := routeDelta("200", itemsRoute, "fetch"); d != 2 {
		t.Errorf("200s of route %s (fetch) counted %v, want 2", itemsRoute, d)
	}
	rl := map[string]string{"binding": "http0", "kind": "http", "route": itemsRoute, "capability": "fetch", "mode": "request"}
	if d := value(after, "kafka_ext_proc_exchange_duration_seconds", rl) - value(before, "kafka_ext_proc_exchange_duration_seconds", rl); d != 5 {
		t.Errorf("durations of route %s observed %v, want 5", itemsRoute, d)
	}
	l := map[string]string{"kind": "http"}
	if d := value(after, "kafka_ext_proc_exchange_duration_seconds", l) - value(before, "kafka_ext_proc_exchange_duration_seconds", l); d != 6 {
		t.Errorf("durations observed %v, want 6", d)
	}
	if v := value(after, "kafka_ext_proc_views_ready", map[string]string{"kafka": "kafka0"}); v != 1 {
		t.Errorf("views ready = %v, want 1", v)
	}
	if v := value(after, "kafka_ext_proc_view_keys", map[string]string{"kafka": "kafka0"}); v != 1 {
		t.Errorf("view keys = %v, want 1", v)
	}
}

// Labels are bounded: 2,000 distinct paths and templated topics (500 of
// each kind) add no series. A label taken from a request would add a series
// at its first distinct value, so the count shows a leak at any size; it was
// 10,000, which took a quarter of this package's time (each request for a
// templated topic that does not exist asks Kafka about it).
func TestMetricSeriesStayBounded(t *testing.T) {
	// Serial: it drives 2,000 requests and counts every series the process exports.
	e := startEnv(t, strings.Replace(opsConfig, `"localhost:9092"`, `"localhost:9092", statistics.interval.ms: "100"`, 1), withAdmin)
	e.request(e.h2c, "GET", "/items/warm", "")
	e.request(e.h2c, "GET", "/t/t-warm/x", "")
	e.request(e.h2c, "GET", "/t/bad/x", "")
	e.request(e.h2c, "GET", "/nowhere/warm", "")
	// The series of librdkafka's statistics appear with their first event
	// (no route replies here, so there is no reply consumer).
	e.waitScrape("the first statistics of the views' consumer", func(m map[string]*dto.MetricFamily) bool {
		return has(m, "kafka_ext_proc_consumer_lag_records", map[string]string{"client": "views", "topic": "items"}) &&
			// A client's broker series appear once it has talked to the broker.
			has(m, "kafka_ext_proc_rdkafka_broker_rtt_avg_seconds", map[string]string{"client": "views"})
	})
	before := series(e.scrape())
	const n = 2000
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				switch i % 4 {
				case 0:
					e.request(e.h2c, "GET", fmt.Sprintf("/items/key-%d", i), "")
				case 1:
					e.request(e.h2c, "GET", fmt.Sprintf("/t/t-%d/x", i), "")
				case 2:
					e.request(e.h2c, "GET", fmt.Sprintf("/t/other-%d/x", i), "")
				default:
					e.request(e.h2c, "GET", fmt.Sprintf("/nowhere/%d", i), "")
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	after := series(e.scrape())
	var added, gone []string
	for s := range after {
		if !before[s] {
			added = append(added, s)
		}
	}
	for s := range before {
		if !after[s] {
			gone = append(gone, s)
		}
	}
	if len(added) > 0 || len(gone) > 0 {
		sort.Strings(added)
		sort.Strings(gone)
		t.Fatalf("%d series before, %d after %d distinct requests; added %q, gone %q", len(before), len(after), n, added, gone)
	}
}

func (e *env) waitReadiness(p *stack.Processor, want bool, reason string) {
	e.t.Helper()
	var ready bool
	var reasons []string
	met := false
	defer func() { // pollUntil's failure ends the test through here
		if !met {
			e.t.Logf("last readiness seen: %v %v", ready, reasons)
		}
	}()
	pollUntil(e.t, fmt.Sprintf("readiness %v with %q", want, reason), func() bool {
		ready, reasons = p.Readiness.Ready()
		return ready == want && (reason == "" || strings.Contains(strings.Join(reasons, "; "), reason))
	})
	met = true
}

// Readiness is false while a view catches up, and when the brokers go away.
func TestReadinessFollowsCatchUpAndBrokers(t *testing.T) {
	t.Parallel()
	e := startEnv(t, opsConfig, func(o *stack.DevOptions) {
		o.BrokerOptions.Topics = []embedded.Topic{{Name: "items", Partitions: 2, Compact: true}}
	})
	// A topic big enough that a new replica is seen catching up.
	const n = 20000
	batch := make([][2]string, 0, n)
	for i := 0; i < n; i++ {
		batch = append(batch, [2]string{fmt.Sprintf("key-%06d", i), `{"v":1}`})
	}
	e.putMany("items", 2, batch)
	other, p2 := e.replica()
	e.waitReadiness(p2, false, "view items")
	e.waitReadiness(p2, true, "")
	if r, _ := other.request(e.h1, "GET", "/items/key-019999", ""); r.StatusCode != 200 {
		t.Fatalf("after catch-up: %d", r.StatusCode)
	}
	e.dev.Broker.Close()
	e.waitReadiness(p2, false, "brokers")
}

// Reload: routes change while long polls stay open and are answered; an
// invalid configuration keeps the old routes serving and is reported.
func TestReloadKeepsWaitersAndRefusesBadConfigs(t *testing.T) {
	t.Parallel()
	e := startEnv(t, opsConfig)
	e.put("items", 0, "k", []byte("v1"))
	resp, _ := e.request(e.h1, "GET", "/items/k", "", "prefer", "wait=10")
	etag := resp.Header.Get("etag")
	held := make(chan *http.Response, 1)
	go func() {
		r, _ := e.request(e.h1, "GET", "/items/k", "", "if-none-match", etag, "prefer", "wait=30")
		held <- r
	}()
	e.waitGauge("kafka_ext_proc_fetch_waiters", 1)

	next := e.reload("next.yaml", strings.Replace(opsConfig, `path: "/items/{id}"`, `path: "/v2/items/{id}"`, 1))
	if r, _ := e.request(e.h1, "GET", "/v2/items/k", ""); r.StatusCode != 200 {
		t.Errorf("new route after reload: %d", r.StatusCode)
	}
	if r, _ := e.request(e.h1, "GET", "/items/k", ""); r.StatusCode != 404 {
		t.Errorf("old route after reload: %d, want 404", r.StatusCode)
	}
	e.put("items", 0, "k", []byte("v2"))
	if r := <-held; r.StatusCode != 200 {
		t.Errorf("the long poll held across the reload: %d", r.StatusCode)
	}

	changedKafka := stack.PointAt(next, "127.0.0.1:1")
	if err := e.dev.Processor.Reload(changedKafka); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Errorf("reload with other kafka options: %v, want a refusal saying restart", err)
	}
	if r, _ := e.request(e.h1, "GET", "/v2/items/k", ""); r.StatusCode != 200 {
		t.Errorf("after a refused reload: %d", r.StatusCode)
	}
}

// putMany writes many records with one producer over the partitions,
// waiting for every acknowledgement.
func (e *env) putMany(topic string, partitions int32, kvs [][2]string) {
	e.t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3, "linger.ms": 20})
	if err != nil {
		e.t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, len(kvs))
	acked := 0
	ack := func() {
		select {
		case ev := <-done:
			if m := ev.(*kafka.Message); m.TopicPartition.Error != nil {
				e.t.Fatal(m.TopicPartition.Error)
			}
			acked++
		case <-time.After(60 * time.Second):
			e.t.Fatal("no acknowledgement")
		}
	}
	for i, kv := range kvs {
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: int32(i) % partitions}, Key: []byte(kv[0]), Value: []byte(kv[1])}
		for p.Produce(m, done) != nil {
			ack() // the local queue is full: wait for a delivery to make room
		}
	}
	for acked < len(kvs) {
		ack()
	}
}
