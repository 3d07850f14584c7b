package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

const fetchConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
      - when: [{ method: GET, path: /items }]
        exit: kafka0
        with: { capability: fetch, topic: items, merge: { content-type: application/json } }
      - when: [{ method: GET, path: "/by-colour/{c}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ headers: { colour: "${params.c}" } }] }
      - when: [{ method: GET, path: "/both/{id}/{c}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}", headers: { colour: "${params.c}" } }] }
      - when: [{ method: GET, path: "/red" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ headers: { colour: red } }], merge: { content-type: application/json } }
      - when: [{ method: GET, path: "/ghost/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: ghost, filters: [{ key: "${params.id}" }] }
limits: { max-wait: 30s, kafka-timeout: 2s }
`

func twoPartitions(o *stack.DevOptions) {
	o.BrokerOptions.Topics = []embedded.Topic{{Name: "items", Partitions: 2, Compact: true}}
}

// changed long-polls path until its ETag differs from etag: the way a client
// learns that this replica has read a write.
func (e *env) changed(path, etag string) (*http.Response, string) {
	e.t.Helper()
	resp, body := e.request(e.h2c, "GET", path, "", "if-none-match", etag, "prefer", "wait=20")
	if resp.StatusCode == http.StatusNotModified {
		e.t.Fatalf("GET %s did not change from %s", path, etag)
	}
	return resp, body
}

func TestFetchEndToEnd(t *testing.T) {
	t.Parallel()
	e := startEnv(t, fetchConfig, twoPartitions)
	e.put("items", 1, "p1", []byte(`{"n":"one"}`), "content-type", "application/json", "colour", "blue")
	e.put("items", 0, "p0", []byte(`{"n":"zero"}`), "content-type", "application/json", "colour", "red")
	e.put("items", 0, "gone", []byte(`{"n":"gone"}`), "colour", "red")
	e.put("items", 0, "text", []byte(`not json`), "content-type", "text/plain", "colour", "green")
	e.put("items", 1, "empty", []byte{}, "colour", "grey")
	e.put("items", 0, "gone", nil)
	// Sentinels, last in each partition: once this replica serves them it
	// has read everything before them.
	e.put("items", 0, "sync0", []byte("0"))
	e.put("items", 1, "sync1", []byte("1"))
	for _, k := range []string{"sync0", "sync1"} {
		if resp, _ := e.request(e.h1, "GET", "/items/"+k, "", "prefer", "wait=20"); resp.StatusCode != 200 {
			t.Fatalf("sentinel %s: %d", k, resp.StatusCode)
		}
	}

	for _, c := range []*http.Client{e.h1, e.h2c} {
		resp, body := e.request(c, "GET", "/items/p0", "")
		if resp.StatusCode != 200 || body != `{"n":"zero"}` || resp.Header.Get("content-type") != "application/json" || resp.Header.Get("etag") == "" {
			t.Fatalf("HTTP/%d key: %d %q %v", resp.ProtoMajor, resp.StatusCode, body, resp.Header)
		}
		etag := resp.Header.Get("etag")
		if resp, body := e.request(c, "HEAD", "/items/p0", ""); resp.StatusCode != 200 || body != "" || resp.Header.Get("etag") != etag || resp.Header.Get("content-type") != "application/json" {
			t.Errorf("HTTP/%d HEAD: %d %q %v", resp.ProtoMajor, resp.StatusCode, body, resp.Header)
		}
		if resp, body := e.request(c, "GET", "/items/p0", "", "if-none-match", etag); resp.StatusCode != 304 || body != "" || resp.Header.Get("etag") != etag {
			t.Errorf("HTTP/%d conditional: %d %q %v", resp.ProtoMajor, resp.StatusCode, body, resp.Header)
		}
	}
	if resp, body := e.request(e.h1, "GET", "/items/empty", ""); resp.StatusCode != 204 || body != "" || resp.Header.Get("etag") == "" {
		t.Errorf("empty value: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if resp, body := e.request(e.h1, "GET", "/items/nope", ""); resp.StatusCode != 404 || resp.Header.Get("content-type") != "application/problem+json" {
		t.Errorf("missing key: %d %q", resp.StatusCode, body)
	}
	if resp, body := e.request(e.h1, "GET", "/by-colour/green", ""); resp.StatusCode != 200 || body != "not json" || resp.Header.Get("content-type") != "text/plain" {
		t.Errorf("header filter: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if resp, _ := e.request(e.h1, "GET", "/both/p0/red", ""); resp.StatusCode != 200 {
		t.Errorf("key and header filter: %d", resp.StatusCode)
	}
	if resp, _ := e.request(e.h1, "GET", "/both/p0/blue", ""); resp.StatusCode != 404 {
		t.Errorf("key and a header that does not match: %d", resp.StatusCode)
	}
	// Merge: (partition, offset) order; tombstoned, empty and non-JSON values left out.
	resp, body := e.request(e.h2c, "GET", "/items", "")
	if want := `[{"n":"zero"},0,{"n":"one"},1]`; resp.StatusCode != 200 || body != want || resp.Header.Get("content-type") != "application/json" {
		t.Errorf("merge: %d %q, want %s", resp.StatusCode, body, want)
	}
}

func TestFetchETagsAcrossWritesAndReplicas(t *testing.T) {
	t.Parallel()
	e := startEnv(t, fetchConfig)
	e.put("items", 0, "a", []byte(`"a"`), "colour", "red")
	e.put("items", 0, "b", []byte(`"b"`), "colour", "blue")
	resp, _ := e.request(e.h1, "GET", "/items/b", "", "prefer", "wait=20")
	btag := resp.Header.Get("etag")
	resp, _ = e.request(e.h1, "GET", "/items/a", "")
	atag := resp.Header.Get("etag")
	resp, _ = e.request(e.h1, "GET", "/red", "")
	redTag := resp.Header.Get("etag")

	e.put("items", 0, "b", []byte(`"b2"`), "colour", "blue")
	e.changed("/items/b", btag)
	if resp, _ := e.request(e.h1, "GET", "/items/a", "", "if-none-match", atag); resp.StatusCode != 304 {
		t.Errorf("filtered route: a write to another key changed the answer (%d)", resp.StatusCode)
	}
	if resp, _ := e.request(e.h1, "GET", "/red", "", "if-none-match", redTag); resp.StatusCode != 304 {
		t.Errorf("filtered merge: a write to another key changed the answer (%d)", resp.StatusCode)
	}

	// A second processor replica, started after compaction, gives the same tags.
	e.dev.Broker.Cluster().Compact()
	other, _ := e.replica()
	if resp, body := other.request(e.h1, "GET", "/items/a", "", "if-none-match", atag); resp.StatusCode != 304 || resp.Header.Get("etag") != atag {
		t.Errorf("second replica, filtered: %d %q etag %s, want 304 %s", resp.StatusCode, body, resp.Header.Get("etag"), atag)
	}
	if resp, _ := other.request(e.h1, "GET", "/red", "", "if-none-match", redTag); resp.StatusCode != 304 || resp.Header.Get("etag") != redTag {
		t.Errorf("second replica, merged: %d etag %s, want 304 %s", resp.StatusCode, resp.Header.Get("etag"), redTag)
	}
}

func TestLongPollEndToEnd(t *testing.T) {
	t.Parallel()
	e := startEnv(t, fetchConfig)
	e.put("items", 0, "k", []byte(`"v1"`))
	resp, _ := e.request(e.h1, "GET", "/items/k", "", "prefer", "wait=20")
	etag := resp.Header.Get("etag")

	// Nothing changes: 304 once the wait is over, saying how long it waited.
	resp, _ = e.request(e.h1, "GET", "/items/k", "", "if-none-match", etag, "prefer", "wait=1")
	if resp.StatusCode != 304 || resp.Header.Get("preference-applied") != "wait=1" {
		t.Errorf("expired wait: %d %v", resp.StatusCode, resp.Header)
	}
	// The wait is clamped to limits.max-wait.
	answered := make(chan *http.Response, 1)
	go func() {
		r, _ := e.request(e.h1, "GET", "/items/k", "", "if-none-match", etag, "prefer", "wait=3600")
		answered <- r
	}()
	e.waitGauge("kafka_ext_proc_fetch_waiters", 1)
	e.put("items", 0, "k", []byte(`"v2"`))
	if r := <-answered; r.StatusCode != 200 || r.Header.Get("preference-applied") != "wait=30" {
		t.Errorf("woken: %d %v", r.StatusCode, r.Header)
	}
	// A key that does not exist yet: the wait ends when it appears.
	go func() {
		r, _ := e.request(e.h1, "GET", "/items/later", "", "prefer", "wait=20")
		answered <- r
	}()
	e.waitGauge("kafka_ext_proc_fetch_waiters", 1)
	e.put("items", 0, "later", []byte(`"here"`))
	if r := <-answered; r.StatusCode != 200 {
		t.Errorf("appearing key: %d", r.StatusCode)
	}
}

func TestThousandWaitersEndToEnd(t *testing.T) {
	// Serial: a thousand held requests need the CPU to itself to be woken within their wait.
	e := startEnv(t, fetchConfig)
	e.put("items", 0, "k", []byte(`"v1"`))
	resp, _ := e.request(e.h1, "GET", "/items/k", "", "prefer", "wait=20")
	stag := resp.Header.Get("etag")
	resp, _ = e.request(e.h1, "GET", "/items", "")
	mtag := resp.Header.Get("etag")

	const n = 1000
	var wg sync.WaitGroup
	results := make(chan string, 2*n)
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			r, b := e.request(e.h1, "GET", "/items/k", "", "if-none-match", stag, "prefer", "wait=30")
			results <- fmt.Sprintf("single %d %s", r.StatusCode, b)
		}()
		go func() {
			defer wg.Done()
			r, b := e.request(e.h1, "GET", "/items", "", "if-none-match", mtag, "prefer", "wait=30")
			results <- fmt.Sprintf("merged %d %s", r.StatusCode, b)
		}()
	}
	e.waitGauge("kafka_ext_proc_fetch_waiters", 2*n)
	e.put("items", 0, "k", []byte(`"v2"`))
	wg.Wait()
	close(results)
	counts := map[string]int{}
	for r := range results {
		counts[r]++
	}
	if counts[`single 200 "v2"`] != n || counts[`merged 200 ["v2"]`] != n {
		t.Fatalf("answers: %v", counts)
	}
}

// replica starts a second processor on the same broker, behind its own
// emulator, and returns an env that talks to it.
func (e *env) replica() (*env, *stack.Processor) {
	e.t.Helper()
	p2, err := stack.StartProcessor(stack.ProcessorOptions{Config: e.dev.Config, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p2.Shutdown(context.Background()) })
	f2, err := stack.StartFront(envoy.DefaultYAML(), "127.0.0.1:0", p2.Addr(), slog.New(slog.DiscardHandler))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(f2.Close)
	other := *e
	other.base = "http://" + f2.Addr()
	return &other, p2
}

// A static topic that does not exist: the replica is not ready and says
// why, requests get 503 + retry-after, and creating the topic heals both.
func TestFetchWhileTheTopicIsMissing(t *testing.T) {
	t.Parallel()
	e := startEnv(t, fetchConfig)
	if err := e.dev.Broker.Cluster().DeleteTopic("ghost"); err != nil {
		t.Fatal(err)
	}
	other, p2 := e.replica()
	resp, body := other.request(e.h1, "GET", "/ghost/x", "")
	if resp.StatusCode != 503 || resp.Header.Get("retry-after") == "" || !strings.Contains(body, "ghost") {
		t.Fatalf("missing topic: %d %q %v, want 503 with retry-after", resp.StatusCode, body, resp.Header)
	}
	if ready, reasons := p2.Readiness.Ready(); ready || !strings.Contains(strings.Join(reasons, ";"), "ghost") {
		t.Fatalf("readiness with a missing topic: %v %v", ready, reasons)
	}
	if err := e.dev.Broker.CreateTopics(embedded.Topic{Name: "ghost", Compact: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for ready, _ := p2.Readiness.Ready(); !ready; ready, _ = p2.Readiness.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("not ready after the topic was created")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, _ := other.request(e.h1, "GET", "/ghost/x", ""); resp.StatusCode != 404 {
		t.Fatalf("after creating the topic: %d, want 404 (no record)", resp.StatusCode)
	}
}
