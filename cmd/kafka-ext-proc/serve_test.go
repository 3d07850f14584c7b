package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/logbuf"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serve becomes ready, reloads a changed file, and on SIGTERM (the context)
// drains and exits 0 within the grace period.
func TestServeReadyReloadAndExit(t *testing.T) {
	b, err := embedded.Start(embedded.Options{Topics: []embedded.Topic{{Name: "items", Compact: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	cfg := `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "` + b.Addr() + `" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
`
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &logbuf.Buffer{}
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--config", cfgFile, "--listen", freeAddr(t), "--admin", admin,
			"--drain-delay", "0s", "--grace", "5s", "--watch", "50ms"}, io.Discard, logs)
	}()
	waitReady(t, admin, logs)
	deadline := time.Now().Add(30 * time.Second)

	// A broken file is refused and reported; the old routes keep serving.
	if err := os.WriteFile(cfgFile, []byte(cfg+"\nnonsense: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(logs.String(), "reload refused") {
		if time.Now().After(deadline) {
			t.Fatalf("a broken file was not reported:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(logs.String(), "configuration reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("a fixed file was not reloaded:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	start := time.Now()
	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, logs.String())
		}
		t.Logf("exited 0 in %v", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit within the grace period")
	}
}

func waitReady(t *testing.T, admin string, logs fmt.Stringer) {
	t.Helper()
	waitFor(t, "serve to be ready", logs, func() bool {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func waitFor(t *testing.T, what string, logs fmt.Stringer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s:\n%s", what, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
