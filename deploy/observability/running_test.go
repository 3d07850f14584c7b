package observability

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// runningConfig uses every part that has metrics: a fetch (views), a
// produce (producer, reply index), and librdkafka's statistics.
const runningConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092", statistics.interval.ms: "100" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: PUT, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: items, key: "${params.id}" }
`

func scrape(t *testing.T, admin string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// metrics.txt is what a running processor exposes: every kafka_ext_proc_
// family it lists is there once the processor has served, and it lists
// every one there is; the other metrics it names exist too.
func TestMetricsListIsWhatARunningProcessorExposes(t *testing.T) {
	cfg, err := config.Parse("running.yaml", []byte(runningConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := stack.StartDev(stack.DevOptions{
		Config: cfg, Envoy: envoy.DefaultYAML(), Front: "127.0.0.1:0", Listen: "127.0.0.1:0", Kafka: "127.0.0.1:0",
		Admin: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	do := func(method, path, body string, hdr ...string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+d.Front()+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := do("PUT", "/items/k", `{"a":1}`, "content-type", "application/json"); s != 204 {
		t.Fatalf("PUT: %d", s)
	}
	if s := do("GET", "/items/k", "", "prefer", "wait=5"); s != 200 {
		t.Fatalf("GET: %d", s)
	}

	listed := metricsList(t)
	var missing, unlisted []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		mfs := scrape(t, d.Processor.AdminAddr())
		missing, unlisted = nil, nil
		for name := range listed {
			if mfs[name] == nil {
				missing = append(missing, name)
			}
		}
		for name := range mfs {
			if strings.HasPrefix(name, "kafka_ext_proc_") && !listed[name] {
				unlisted = append(unlisted, name)
			}
		}
		// librdkafka's series appear with its first statistics.
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	slices.Sort(missing)
	slices.Sort(unlisted)
	if len(missing) > 0 || len(unlisted) > 0 {
		t.Fatalf("metrics.txt lists %d metrics the processor does not expose: %s\nthe processor exposes %d it does not list: %s",
			len(missing), fmt.Sprint(missing), len(unlisted), strings.Join(unlisted, "\n"))
	}
}
