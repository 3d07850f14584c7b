//go:build !nodev

package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/internal/logbuf"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// hs256Token signs a token for the guard of TestServeReloadsRotatedSecrets.
func hs256Token(secret []byte) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	input := enc(map[string]any{"alg": "HS256", "typ": "JWT"}) + "." +
		enc(map[string]any{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func octJWKS(secret []byte) string {
	return `{"keys":[{"kty":"oct","alg":"HS256","k":"` + base64.RawURLEncoding.EncodeToString(secret) + `"}]}`
}

// reloadCounts reads the reload metrics from serve's admin port.
func reloadCounts(t *testing.T, admin string) (success, failure, lastOK float64) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mfs["kafka_ext_proc_config_reloads_total"].GetMetric() {
		switch m.GetLabel()[0].GetValue() {
		case "success":
			success = m.GetCounter().GetValue()
		case "failure":
			failure = m.GetCounter().GetValue()
		}
	}
	if mf := mfs["kafka_ext_proc_config_last_reload_successful"]; mf != nil {
		lastOK = mf.GetMetric()[0].GetGauge().GetValue()
	}
	if mf := mfs["kafka_ext_proc_config_last_reload_success_timestamp_seconds"]; mf == nil || mf.GetMetric()[0].GetGauge().GetValue() <= 0 {
		t.Error("no time of the last successful reload")
	}
	return success, failure, lastOK
}

// A file the configuration reads is watched like the configuration: a
// rotated keys-file applies without a restart, and is counted; a rotated
// secret among kafka options is refused (librdkafka reads it only when the
// client starts), said so, and counted as a failure.
func TestServeReloadsRotatedSecrets(t *testing.T) {
	b, err := embedded.Start(embedded.Options{Topics: []embedded.Topic{{Name: "items", Compact: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		// Written beside and renamed, as secret mounts and editors do.
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	oldKey, newKey := []byte("the-old-secret-of-32-bytes-length"), []byte("the-new-secret-of-32-bytes-length")
	write("jwks.json", octJWKS(oldKey))
	write("client-id", "first")
	write("config.yaml", `
guards:
  jwt0: { type: jwt, options: { keys-file: jwks.json, algorithms: [HS256] } }
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "`+b.Addr()+`", client.id: "${file:client-id}" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - guarded: { jwt0: [] }
        when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
`)
	admin, listen := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &logbuf.Buffer{}
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--config", filepath.Join(dir, "config.yaml"), "--listen", listen, "--admin", admin,
			"--drain-delay", "0s", "--grace", "5s", "--watch", "50ms"}, io.Discard, logs)
	}()
	defer func() {
		cancel()
		<-exited
	}()
	waitReady(t, admin, logs)
	front, err := stack.StartFront(envoy.DefaultYAML(), "127.0.0.1:0", listen, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	get := func(key []byte) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+front.Addr()+"/items/none", nil)
		req.Header.Set("authorization", "Bearer "+hs256Token(key))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(oldKey); s != 404 {
		t.Fatalf("the old key before the rotation: %d, want 404 (let through, no record)", s)
	}
	if s := get(newKey); s != 401 {
		t.Fatalf("the new key before the rotation: %d, want 401", s)
	}
	if s, f, ok := reloadCounts(t, admin); s != 0 || f != 0 || ok != 1 {
		t.Fatalf("at start: reloads success %v failure %v, last successful %v", s, f, ok)
	}

	write("jwks.json", octJWKS(newKey))
	waitFor(t, "the rotated keys-file to be reloaded", logs, func() bool { s, _, _ := reloadCounts(t, admin); return s == 1 })
	if s := get(newKey); s != 404 {
		t.Errorf("the new key after the rotation: %d, want 404", s)
	}
	if s := get(oldKey); s != 401 {
		t.Errorf("the old key after the rotation: %d, want 401", s)
	}

	write("client-id", "second")
	waitFor(t, "the rotated kafka secret to be refused", logs, func() bool { _, f, _ := reloadCounts(t, admin); return f == 1 })
	if _, _, ok := reloadCounts(t, admin); ok != 0 {
		t.Errorf("last reload successful = %v after a refusal, want 0", ok)
	}
	if !strings.Contains(logs.String(), `the options of kafka binding \"kafka0\" changed (a ${file:} secret among them counts): restart to apply`) {
		t.Errorf("the refusal does not say to restart:\n%s", logs.String())
	}
	if s := get(newKey); s != 404 {
		t.Errorf("after the refusal the previous configuration serves: %d, want 404", s)
	}
}
