package httpkafka_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/faultfs"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
)

// These tests drive Fetch over real views: the embedded broker, librdkafka
// producing and consuming. The HTTP side is covered end to end elsewhere.

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
      - when: [{ method: GET, path: "/colour/{c}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ headers: { colour: "${params.c}" } }] }
      - when: [{ method: GET, path: "/both/{id}/{c}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}", headers: { colour: "${params.c}" } }] }
      - when: [{ method: GET, path: "/either/{a}/{b}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.a}" }, { key: "${params.b}" }], merge: { content-type: application/json } }
      - when: [{ method: GET, path: "/red" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ headers: { colour: red } }], merge: { content-type: application/json } }
limits: { max-wait: 20s, kafka-timeout: 10s }
`

type fixture struct {
	t      *testing.T
	broker *embedded.Broker
	client *views.Views
	cfg    *config.Config
	prod   *kafka.Producer
}

func newFixture(t *testing.T, partitions int32) *fixture {
	t.Helper()
	cfg, err := config.Parse("fetch.yaml", []byte(fetchConfig), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	b, err := embedded.Start(embedded.Options{Topics: []embedded.Topic{{Name: "items", Partitions: partitions, Compact: true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3, "linger.ms": 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	f := &fixture{t: t, broker: b, cfg: cfg, prod: p}
	f.client = f.newClient()
	return f
}

func (f *fixture) newClient() *views.Views {
	c, err := views.New(views.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": f.broker.Addr()}, KafkaTimeout: 10 * time.Second,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(c.Close)
	return c
}

func (f *fixture) route(i int, c *views.Views) *httpkafka.Fetch {
	return httpkafka.NewFetch(f.cfg.Bindings[0].Routes[i].With, c)
}

// put writes a record (value nil = tombstone) and waits for its acknowledgement.
func (f *fixture) put(partition int32, key string, value []byte, headers ...string) {
	f.t.Helper()
	topic := "items"
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition}, Key: []byte(key), Value: value}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers = append(m.Headers, kafka.Header{Key: headers[i], Value: []byte(headers[i+1])})
	}
	done := make(chan kafka.Event, 1)
	if err := f.prod.Produce(m, done); err != nil {
		f.t.Fatal(err)
	}
	if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
		f.t.Fatal(m.TopicPartition.Error)
	}
}

func header(r *handler.HTTPResponse, name string) string {
	for _, h := range r.Headers {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// fixtureLimits are the limits of the fixture's configuration: a request
// carries the limits of the snapshot it matched in.
func fixtureLimits() config.Limits {
	return config.Limits{MaxWait: 20 * time.Second, KafkaTimeout: 10 * time.Second}
}

func get(fetch *httpkafka.Fetch, params map[string]string, hdrs ...string) *handler.HTTPResponse {
	req := httpkafka.FetchRequest{Params: params, Limits: fixtureLimits()}
	for i := 0; i+1 < len(hdrs); i += 2 {
		switch hdrs[i] {
		case "if-none-match":
			req.IfNoneMatch = append(req.IfNoneMatch, hdrs[i+1])
		case "prefer":
			req.Prefer = append(req.Prefer, hdrs[i+1])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return fetch.Serve(ctx, context.Background(), req)
}

func TestFetchFilterForms(t *testing.T) {
	f := newFixture(t, 2)
	f.put(0, "a", []byte(`{"n":1}`), "content-type", "application/json", "colour", "red")
	f.put(1, "b", []byte("plain"), "colour", "blue")
	f.put(0, "e", []byte{})

	byKey := f.route(0, f.client)
	r := get(byKey, map[string]string{"id": "a"})
	if r.Status != 200 || string(r.Body) != `{"n":1}` || header(r, "content-type") != "application/json" || header(r, "etag") == "" {
		t.Fatalf("key a: %d %q %v", r.Status, r.Body, r.Headers)
	}
	if r := get(byKey, map[string]string{"id": "b"}); r.Status != 200 || header(r, "content-type") != "application/octet-stream" {
		t.Errorf("key b without content-type: %d %v", r.Status, r.Headers)
	}
	if r := get(byKey, map[string]string{"id": "e"}); r.Status != 204 || len(r.Body) != 0 || header(r, "etag") == "" {
		t.Errorf("empty value: %d %q %v, want 204 with an etag", r.Status, r.Body, r.Headers)
	}
	if r := get(byKey, map[string]string{"id": "zz"}); r.Status != 404 || header(r, "content-type") != "application/problem+json" {
		t.Errorf("missing key: %d %v", r.Status, r.Headers)
	}

	byHeader := f.route(2, f.client)
	if r := get(byHeader, map[string]string{"c": "blue"}); r.Status != 200 || string(r.Body) != "plain" {
		t.Errorf("header filter blue: %d %q", r.Status, r.Body)
	}
	both := f.route(3, f.client)
	if r := get(both, map[string]string{"id": "a", "c": "red"}); r.Status != 200 {
		t.Errorf("key+header a/red: %d", r.Status)
	}
	if r := get(both, map[string]string{"id": "a", "c": "blue"}); r.Status != 404 {
		t.Errorf("key+header a/blue: %d, want 404", r.Status)
	}
	either := f.route(4, f.client)
	if r := get(either, map[string]string{"a": "a", "b": "b"}); r.Status != 200 || string(r.Body) != `[{"n":1}]` {
		// b is not JSON: left out of a merged answer.
		t.Errorf("OR of filters, merged: %d %q", r.Status, r.Body)
	}
}

func TestFetchWinnerIsLatestTimestampThenPartitionThenOffset(t *testing.T) {
	f := newFixture(t, 2)
	f.put(0, "x", []byte("first"), "colour", "green")
	f.put(1, "y", []byte("second"), "colour", "green")
	r := get(f.route(2, f.client), map[string]string{"c": "green"})
	if r.Status != 200 || string(r.Body) != "second" {
		t.Fatalf("winner = %d %q, want second (latest)", r.Status, r.Body)
	}
}

func TestFetchMerge(t *testing.T) {
	f := newFixture(t, 2)
	f.put(1, "p1", []byte(`"one"`))
	f.put(0, "p0a", []byte(`"zero-a"`))
	f.put(0, "gone", []byte(`"gone"`))
	f.put(0, "p0b", []byte(`"zero-b"`))
	f.put(0, "bad", []byte(`not json`))
	f.put(1, "empty", []byte{})
	f.put(0, "gone", nil)

	r := get(f.route(1, f.client), nil)
	if want := `["zero-a","zero-b","one"]`; r.Status != 200 || string(r.Body) != want || header(r, "content-type") != "application/json" {
		t.Fatalf("merged = %d %q %v, want %s", r.Status, r.Body, r.Headers, want)
	}
}

func TestFetchETagIgnoresOtherKeysAndReplicas(t *testing.T) {
	f := newFixture(t, 1)
	f.put(0, "a", []byte(`"a"`), "colour", "red")
	f.put(0, "b", []byte(`"b"`), "colour", "blue")
	single, redMerge := f.route(0, f.client), f.route(5, f.client)
	tag1 := header(get(single, map[string]string{"id": "a"}), "etag")
	mtag1 := header(get(redMerge, nil), "etag")

	btag := header(get(single, map[string]string{"id": "b"}), "etag")
	f.put(0, "b", []byte(`"b2"`), "colour", "blue") // not selected by either route
	f.put(0, "b", []byte(`"b3"`), "colour", "blue")
	// Wait until this replica has read the writes to b.
	for r := changed(t, single, map[string]string{"id": "b"}, btag); string(r.Body) != `"b3"`; {
		r = changed(t, single, map[string]string{"id": "b"}, header(r, "etag"))
	}
	if tag2 := header(get(single, map[string]string{"id": "a"}), "etag"); tag2 != tag1 {
		t.Errorf("filtered ETag changed on a write to another key: %s → %s", tag1, tag2)
	}
	if mtag2 := header(get(redMerge, nil), "etag"); mtag2 != mtag1 {
		t.Errorf("filtered-merge ETag changed on a write to another key: %s → %s", mtag1, mtag2)
	}

	// A second replica that starts after compaction computes the same tags.
	f.broker.Cluster().Compact()
	other := f.newClient()
	if tag := header(get(f.route(0, other), map[string]string{"id": "a"}), "etag"); tag != tag1 {
		t.Errorf("second replica's filtered ETag %s, want %s", tag, tag1)
	}
	if tag := header(get(f.route(5, other), nil), "etag"); tag != mtag1 {
		t.Errorf("second replica's merged ETag %s, want %s", tag, mtag1)
	}
	// A write to the selection changes it.
	f.put(0, "a", []byte(`"a2"`), "colour", "red")
	if r := changed(t, single, map[string]string{"id": "a"}, tag1); string(r.Body) != `"a2"` {
		t.Errorf("after a write to a: %d %q", r.Status, r.Body)
	}
}

func TestFetchConditionalAndLongPoll(t *testing.T) {
	f := newFixture(t, 1)
	f.put(0, "a", []byte("v1"))
	route := f.route(0, f.client)
	id := map[string]string{"id": "a"}
	tag := header(get(route, id), "etag")

	if r := get(route, id, "if-none-match", tag); r.Status != 304 || header(r, "etag") != tag {
		t.Fatalf("conditional: %d %v, want 304 with the etag", r.Status, r.Headers)
	}
	if r := get(route, id, "if-none-match", `W/`+tag+`, "other"`); r.Status != 304 {
		t.Errorf("weak tag in a list: %d, want 304", r.Status)
	}
	if r := get(route, id, "if-none-match", `"other"`); r.Status != 200 {
		t.Errorf("non-matching tag: %d, want 200", r.Status)
	}

	// wait=1 with nothing changing: 304 after the wait, saying so.
	start := time.Now()
	r := get(route, id, "if-none-match", tag, "prefer", "wait=1")
	if r.Status != 304 || header(r, "preference-applied") != "wait=1" || time.Since(start) < time.Second {
		t.Errorf("expired wait: %d %v after %v", r.Status, r.Headers, time.Since(start))
	}

	// A write wakes the waiter with the new answer.
	got := make(chan *handler.HTTPResponse, 1)
	go func() { got <- get(route, id, "if-none-match", tag, "prefer", "wait=20") }()
	waitForWaiters(t, 1, func() { f.put(0, "a", []byte("v2")) }, route)
	r = <-got
	if r.Status != 200 || string(r.Body) != "v2" || header(r, "preference-applied") != "wait=20" {
		t.Fatalf("woken: %d %q %v", r.Status, r.Body, r.Headers)
	}

	// A missing key waited for: 200 when it appears.
	go func() { got <- get(route, map[string]string{"id": "new"}, "prefer", "wait=20") }()
	waitForWaiters(t, 1, func() { f.put(0, "new", []byte("hello")) }, route)
	if r := <-got; r.Status != 200 || string(r.Body) != "hello" {
		t.Fatalf("appearing key: %d %q", r.Status, r.Body)
	}
	// ... and 404 when it does not.
	if r := get(route, map[string]string{"id": "never"}, "prefer", "wait=1"); r.Status != 404 || header(r, "preference-applied") != "wait=1" {
		t.Errorf("key never written: %d %v", r.Status, r.Headers)
	}
}

// waitForWaiters waits (bounded polling) until n requests of the routes
// hold a long poll, then writes: the write must be what wakes them.
func waitForWaiters(t *testing.T, n int64, write func(), routes ...*httpkafka.Fetch) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got int64
		for _, r := range routes {
			got += r.Waiting()
		}
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters registered, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
	write()
}

// changed long-polls until the route's answer differs from tag.
func changed(t *testing.T, fetch *httpkafka.Fetch, params map[string]string, tag string) *handler.HTTPResponse {
	t.Helper()
	r := get(fetch, params, "if-none-match", tag, "prefer", "wait=15")
	if r.Status == http.StatusNotModified {
		t.Fatalf("the answer did not change from %s", tag)
	}
	return r
}

func TestFetchThousandWaitersWakeOnOneWrite(t *testing.T) {
	f := newFixture(t, 1)
	f.put(0, "k", []byte(`"v1"`))
	single, merged := f.route(0, f.client), f.route(1, f.client)
	id := map[string]string{"id": "k"}
	stag := header(get(single, id), "etag")
	mtag := header(get(merged, nil), "etag")

	const n = 1000
	var wg sync.WaitGroup
	results := make(chan string, 2*n)
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			r := get(single, id, "if-none-match", stag, "prefer", "wait=20")
			results <- fmt.Sprintf("single %d %s", r.Status, r.Body)
		}()
		go func() {
			defer wg.Done()
			r := get(merged, nil, "if-none-match", mtag, "prefer", "wait=20")
			results <- fmt.Sprintf("merged %d %s", r.Status, r.Body)
		}()
	}
	waitForWaiters(t, 2*n, func() { f.put(0, "k", []byte(`"v2"`)) }, single, merged)
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

func TestFetchTemplatedTopic(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/t/{topic}/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.topic}", topic-pattern: "tenant-*", filters: [{ key: "${params.id}" }] }
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	b, err := embedded.Start(embedded.Options{Topics: []embedded.Topic{{Name: "tenant-a", Compact: true}, {Name: "_internal"}, {Name: "other"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := views.New(views.Options{Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()}, KafkaTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	route := httpkafka.NewFetch(cfg.Bindings[0].Routes[0].With, c)
	for topic, want := range map[string]int{"tenant-a": http.StatusNotFound, "tenant-missing": http.StatusNotFound, "other": http.StatusBadRequest, "_internal": http.StatusBadRequest} {
		if r := get(route, map[string]string{"topic": topic, "id": "x"}); r.Status != want {
			t.Errorf("topic %s: %d %s, want %d", topic, r.Status, r.Body, want)
		}
	}
	if b.Cluster().TopicInfo("tenant-missing") != nil {
		t.Error("a request created a topic")
	}
}

// A 304 carries the 200's etag and no content-type, for one record and for
// the merged collection: Envoy would drop a content-type from the bodyless
// ImmediateResponse, so sending one only promises what never arrives.
func TestFetchNotModifiedCarriesEtagOnly(t *testing.T) {
	f := newFixture(t, 1)
	f.put(0, "j", []byte(`{"n":1}`), "content-type", "application/json")
	f.put(0, "raw", []byte("bytes"))
	for _, tc := range []struct {
		route  int
		params map[string]string
		ct     string
	}{
		{0, map[string]string{"id": "j"}, "application/json"},
		{0, map[string]string{"id": "raw"}, "application/octet-stream"},
		{1, nil, "application/json"},
	} {
		route := f.route(tc.route, f.client)
		ok := get(route, tc.params)
		if ok.Status != 200 || header(ok, "content-type") != tc.ct {
			t.Fatalf("route %d %v: %d %v", tc.route, tc.params, ok.Status, ok.Headers)
		}
		r := get(route, tc.params, "if-none-match", header(ok, "etag"))
		if r.Status != 304 || header(r, "etag") != header(ok, "etag") || header(r, "content-type") != "" || header(r, "preference-applied") != "" {
			t.Errorf("route %d %v: 304 %d %v, want the 200's etag, no content-type and no preference-applied", tc.route, tc.params, r.Status, r.Headers)
		}
	}
}

// A tombstone wakes a waiter holding the deleted record's tag with 404 at
// once, and a stale tag on a deleted key is 404 without waiting.
func TestFetchDeleteAnswersWaitersAtOnce(t *testing.T) {
	f := newFixture(t, 1)
	f.put(0, "d", []byte("v"))
	route := f.route(0, f.client)
	id := map[string]string{"id": "d"}
	tag := header(get(route, id), "etag")
	got := make(chan *handler.HTTPResponse, 1)
	go func() { got <- get(route, id, "if-none-match", tag, "prefer", "wait=20") }()
	waitForWaiters(t, 1, func() { f.put(0, "d", nil) }, route)
	if r := <-got; r.Status != 404 || header(r, "preference-applied") != "wait=20" {
		t.Fatalf("waiter: %d %v, want 404 saying it waited", r.Status, r.Headers)
	}
	if r := get(route, id, "if-none-match", tag, "prefer", "wait=20"); r.Status != 404 || header(r, "preference-applied") != "" {
		t.Fatalf("stale tag: %d %v, want 404 at once", r.Status, r.Headers)
	}
}

// A fetch route of a static topic keeps its view between requests; when the
// view is evicted (the view limits here: one view, another topic opened),
// the next request opens it again and answers as before, writes made
// meanwhile included.
func TestFetchOfAnEvictedViewOpensItAgain(t *testing.T) {
	f := newFixture(t, 1)
	if err := f.broker.CreateTopics(embedded.Topic{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	c, err := views.New(views.Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": f.broker.Addr()}, KafkaTimeout: 10 * time.Second,
		MaxViews: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f.put(0, "a", []byte("one"))
	byKey := f.route(0, c)
	before := get(byKey, map[string]string{"id": "a"})
	if before.Status != 200 || string(before.Body) != "one" {
		t.Fatalf("before the eviction: %d %q", before.Status, before.Body)
	}

	ctx := context.Background()
	other, err := c.HoldView(ctx, "other", 10*time.Second)
	if err != nil {
		t.Fatalf("opening another view (evicting items): %v", err)
	}
	other.Release()
	if st := c.Stats(); st.Views != 1 {
		t.Fatalf("%d views, want 1: items evicted for other", st.Views)
	}

	after := get(byKey, map[string]string{"id": "a"})
	if after.Status != 200 || string(after.Body) != "one" || header(after, "etag") != header(before, "etag") {
		t.Fatalf("after the eviction: %d %q etag %s, want 200 one etag %s", after.Status, after.Body,
			header(after, "etag"), header(before, "etag"))
	}
	f.put(0, "a", []byte("two"))
	// The re-opened view follows the topic: a long poll on the old tag is
	// answered with the write.
	r := get(byKey, map[string]string{"id": "a"}, "if-none-match", header(before, "etag"), "prefer", "wait=10")
	if r.Status != 200 || string(r.Body) != "two" {
		t.Fatalf("a write after the view was opened again: %d %q, want 200 two", r.Status, r.Body)
	}
}

// A view on disk whose store cannot read answers 503 (retry), never a 404
// for a record the topic holds nor a merged answer missing records.
func TestFetchFromAnUnreadableDiskViewIsUnavailable(t *testing.T) {
	f := newFixture(t, 2)
	for i := range 400 { // many table blocks: a key's is read from the file
		f.put(int32(i%2), fmt.Sprintf("k%03d", i), make([]byte, 1024))
	}
	dir := t.TempDir()
	onDisk := func(fs vfs.FS) *views.Views {
		c, err := views.New(views.Options{
			Name: "kafka0", Properties: map[string]string{"bootstrap.servers": f.broker.Addr()}, KafkaTimeout: 10 * time.Second,
			DiskStore: func(string) bool { return true }, StoreDir: dir, StoreFS: fs,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	first := onDisk(nil)
	if r := get(f.route(0, first), map[string]string{"id": "k000"}); r.Status != 200 {
		t.Fatalf("the first view: %d %s", r.Status, r.Body)
	}
	first.Close() // its store is flushed into table files
	fs := faultfs.New()
	c := onDisk(fs)
	byKey, merged := f.route(0, c), f.route(1, c)
	if r := get(byKey, map[string]string{"id": "k000"}); r.Status != 200 {
		t.Fatalf("before the failure: %d %s", r.Status, r.Body)
	}
	fs.Fail.Store(true)
	for name, r := range map[string]*handler.HTTPResponse{
		"a key":  get(byKey, map[string]string{"id": "k399"}),
		"merged": get(merged, nil),
	} {
		if r.Status != http.StatusServiceUnavailable || header(r, "retry-after") == "" || !strings.Contains(string(r.Body), "cannot be read") {
			t.Errorf("%s with the store unreadable: %d %s, want 503 with retry-after", name, r.Status, r.Body)
		}
	}
	fs.Fail.Store(false)
	if r := get(byKey, map[string]string{"id": "k399"}); r.Status != 200 {
		t.Errorf("after the failure: %d %s", r.Status, r.Body)
	}
}
