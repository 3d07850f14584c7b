package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

const respondersConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "BOOTSTRAP", client.id: demo } }
  http0:
    type: http-kafka
    kind: proxy
    options: { correlation: { headers: { reply-to: x-reply-to, correlation-id: x-cid } } }
    routes:
      - when: [{ method: POST, path: "/orders/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: orders-requests, reply-to: orders-responses }
      - when: [{ method: POST, path: /events }]
        exit: kafka0
        with: { capability: produce, topic: events }
  grpc0:
    type: grpc-kafka
    kind: proxy
    options: { correlation: { headers: { correlation-id: zilla:correlation-id, status: x-status } } }
    routes:
      - when: [{ method: example.Echo/* }]
        exit: kafka0
        with: { capability: produce, topic: echo-requests, reply-to: echo-responses }
limits: { reply-timeout: 10s }
`

func TestResponderFlag(t *testing.T) {
	var f responderFlag
	for _, bad := range []string{"http-echo", "http-echo:", "echo:orders", ":orders"} {
		if err := f.Set(bad); err == nil {
			t.Errorf("--responder %q accepted", bad)
		}
	}
	if err := f.Set("http-echo:orders-requests"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("grpc-echo:orders-requests"); err == nil {
		t.Error("two responders for one topic accepted")
	}
	if err := f.Set("grpc-echo:echo-requests"); err != nil || f.String() != "http-echo:orders-requests,grpc-echo:echo-requests" {
		t.Fatalf("%v %s", err, f.String())
	}

	cfg, err := config.Parse("r.yaml", []byte(respondersConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := f.options(cfg, nil)
	if err != nil || len(opts) != 2 {
		t.Fatalf("%v %v", opts, err)
	}
	h, g := opts[0], opts[1]
	if h.Topic != "orders-requests" || h.ReplyTo != "orders-responses" || h.CorrelationHeader != "x-cid" || h.ReplyToHeader != "x-reply-to" ||
		h.Properties["client.id"] != "demo" || h.DedupKey != nil || h.Handler == nil {
		t.Errorf("http-echo: %+v", h)
	}
	if g.Topic != "echo-requests" || g.CorrelationHeader != "zilla:correlation-id" || g.StatusHeader != "x-status" || g.MessageHeader != "zilla:message" || g.DedupKey == nil {
		t.Errorf("grpc-echo: %+v", g)
	}
	if _, err := f.options(cfg, opts[:1]); err == nil || !strings.Contains(err.Error(), "already answers") {
		t.Errorf("a topic answered already: %v", err)
	}
	for spec, want := range map[string]string{
		"grpc-echo:orders-requests": "http-kafka binding \"http0\", which grpc-echo does not answer",
		"http-echo:events":          "no request-reply route",
		"http-echo:nowhere":         "no request-reply route",
	} {
		var one responderFlag
		if err := one.Set(spec); err != nil {
			t.Fatal(err)
		}
		if _, err := one.options(cfg, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", spec, err, want)
		}
	}
}

// `kafka-ext-proc responder` answers a route's requests through the
// configuration's Kafka cluster: here dev's broker, with dev started
// without a responder.
func TestResponderCommand(t *testing.T) {
	dir := t.TempDir()
	devCfg := filepath.Join(dir, "dev.yaml")
	if err := os.WriteFile(devCfg, []byte(respondersConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	front, kafkaAddr := devRun(t, "--config", devCfg)
	cfg := filepath.Join(dir, "responder.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(respondersConfig, "BOOTSTRAP", kafkaAddr, 1)), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"responder", "--config", cfg, "--responder", "http-echo:orders-requests", "--log-level", "warn"}, w, io.Discard)
		w.Close()
	}()
	defer func() {
		cancel()
		go io.Copy(io.Discard, out) //nolint:errcheck // drain
		if code := <-exited; code != 0 {
			t.Errorf("responder exited with %d", code)
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "answering orders-requests (bootstrap.servers "+kafkaAddr+")\n" {
		t.Fatalf("responder printed %q (%v)", line, err)
	}

	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Post("http://"+front+"/orders/7", "application/json", strings.NewReader(`{"qty":7}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || string(body) != `{"method":"POST","path":"/orders/7","key":null,"body":{"qty":7}}` {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}

	for _, args := range [][]string{{"responder"}, {"responder", "--config", cfg}, {"responder", "--responder", "http-echo:x"}} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code := run(context.Background(), []string{"responder", "--config", cfg, "--responder", "grpc-echo:orders-requests"}, io.Discard, io.Discard); code != 1 {
		t.Errorf("a responder of the wrong kind: exit %d, want 1", code)
	}
}
