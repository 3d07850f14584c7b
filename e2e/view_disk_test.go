package e2e_test

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// diskFetchConfig is fetchConfig with the views of kafka0 on disk under dir.
func diskFetchConfig(dir string) string {
	return strings.Replace(fetchConfig, `options: { bootstrap.servers: "localhost:9092" }`,
		`options: { bootstrap.servers: "localhost:9092", view-store: { type: disk, directory: "`+dir+`" } }`, 1)
}

// The core fetch scenarios with the view on disk: single keys, header
// filters, merged answers, tombstones, entity tags and long polls answer as
// they do from memory; a processor started on the store another one left
// (a restart) resumes from it and gives the same entity tags.
func TestViewOnDiskEndToEnd(t *testing.T) {
	t.Parallel()
	e := startEnv(t, diskFetchConfig(t.TempDir()), twoPartitions)
	e.put("items", 1, "p1", []byte(`{"n":"one"}`), "content-type", "application/json", "colour", "blue")
	e.put("items", 0, "p0", []byte(`{"n":"zero"}`), "content-type", "application/json", "colour", "red")
	e.put("items", 0, "gone", []byte(`{"n":"gone"}`), "colour", "red")
	e.put("items", 0, "text", []byte(`not json`), "content-type", "text/plain", "colour", "green")
	e.put("items", 0, "gone", nil)
	e.put("items", 0, "sync0", []byte("0"))
	e.put("items", 1, "sync1", []byte("1"))
	for _, k := range []string{"sync0", "sync1"} {
		if resp, _ := e.request(e.h1, "GET", "/items/"+k, "", "prefer", "wait=20"); resp.StatusCode != 200 {
			t.Fatalf("sentinel %s: %d", k, resp.StatusCode)
		}
	}
	resp, body := e.request(e.h1, "GET", "/items/p0", "")
	if resp.StatusCode != 200 || body != `{"n":"zero"}` || resp.Header.Get("content-type") != "application/json" || resp.Header.Get("etag") == "" {
		t.Fatalf("key: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	p0tag := resp.Header.Get("etag")
	if resp, _ := e.request(e.h1, "GET", "/items/p0", "", "if-none-match", p0tag); resp.StatusCode != 304 {
		t.Errorf("conditional: %d", resp.StatusCode)
	}
	if resp, body := e.request(e.h1, "GET", "/items/gone", ""); resp.StatusCode != 404 {
		t.Errorf("tombstoned key: %d %q", resp.StatusCode, body)
	}
	if resp, body := e.request(e.h1, "GET", "/by-colour/green", ""); resp.StatusCode != 200 || body != "not json" {
		t.Errorf("header filter: %d %q", resp.StatusCode, body)
	}
	resp, body = e.request(e.h2c, "GET", "/items", "")
	if want := `[{"n":"zero"},0,{"n":"one"},1]`; resp.StatusCode != 200 || body != want {
		t.Errorf("merge: %d %q, want %s", resp.StatusCode, body, want)
	}
	redResp, _ := e.request(e.h1, "GET", "/red", "")
	redTag := redResp.Header.Get("etag")

	// A long poll is woken by the write it waits for.
	answered := make(chan *http.Response, 1)
	go func() {
		r, _ := e.request(e.h1, "GET", "/items/p0", "", "if-none-match", p0tag, "prefer", "wait=20")
		answered <- r
	}()
	e.waitGauge("kafka_ext_proc_fetch_waiters", 1)
	e.put("items", 0, "p0", []byte(`{"n":"zero2"}`), "content-type", "application/json", "colour", "red")
	if r := <-answered; r.StatusCode != 200 || r.Header.Get("etag") == p0tag {
		t.Errorf("long poll: %d %v", r.StatusCode, r.Header)
	}
	resp, _ = e.request(e.h1, "GET", "/items/p0", "")
	p0tag = resp.Header.Get("etag")
	if e.gauge("kafka_ext_proc_view_disk_bytes") <= 0 {
		t.Error("kafka_ext_proc_view_disk_bytes is 0 with a view on disk")
	}

	// A second processor on a store of its own reads the topic into it; a
	// third started on that store once the second stopped resumes from it.
	dir := t.TempDir()
	second := diskReplica(e, dir)
	if resp, _ := second.request(e.h1, "GET", "/items/p0", "", "if-none-match", p0tag); resp.StatusCode != 304 {
		t.Fatalf("second processor: %d", resp.StatusCode)
	}
	second.stop()
	third := diskReplica(e, dir)
	if resp, _ := third.request(e.h1, "GET", "/items/p0", "", "if-none-match", p0tag); resp.StatusCode != 304 {
		t.Errorf("restarted on its store, key: %d etag %s, want 304 %s", resp.StatusCode, resp.Header.Get("etag"), p0tag)
	}
	if resp, _ := third.request(e.h1, "GET", "/red", "", "if-none-match", redTag); resp.StatusCode != 200 {
		// p0 changed since redTag: the merged answer must have too.
		t.Errorf("restarted on its store, merged: %d, want 200 (p0 changed since)", resp.StatusCode)
	}
	if resp, body := third.request(e.h1, "GET", "/items/gone", ""); resp.StatusCode != 404 {
		t.Errorf("restarted on its store, tombstoned key: %d %q", resp.StatusCode, body)
	}
}

// diskEnv is an env talking to a processor of its own.
type diskEnv struct {
	*env
	stop func()
}

// diskReplica starts a processor on e's broker with kafka0's views on disk
// under dir, behind an emulator of its own.
func diskReplica(e *env, dir string) diskEnv {
	e.t.Helper()
	cfg := *e.dev.Config
	k := *cfg.Kafka["kafka0"]
	k.ViewStore = config.ViewStore{Disk: true, Directory: dir}
	cfg.Kafka = maps.Clone(cfg.Kafka)
	cfg.Kafka["kafka0"] = &k
	p, err := stack.StartProcessor(stack.ProcessorOptions{Config: &cfg, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	f, err := stack.StartFront(envoy.DefaultYAML(), "127.0.0.1:0", p.Addr(), slog.New(slog.DiscardHandler))
	if err != nil {
		p.Shutdown(context.Background())
		e.t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			f.Close()
			p.Shutdown(context.Background())
		}
	}
	e.t.Cleanup(stop)
	e.waitReadiness(p, true, "")
	other := *e
	other.base = "http://" + f.Addr()
	return diskEnv{env: &other, stop: stop}
}
