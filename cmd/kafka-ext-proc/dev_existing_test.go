//go:build !nodev

package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/logbuf"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// usersCluster starts a broker standing for the cluster a user already
// runs, with the demo's topics, and writes the demo configuration pointed
// at it; it returns the file.
func usersCluster(t *testing.T) (cfgFile, bootstrap string) {
	t.Helper()
	cfg, err := config.Parse("demo.yaml", demoConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := embedded.Start(embedded.Options{Topics: stack.TopicsOf(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	text := strings.ReplaceAll(string(demoConfig), "bootstrap.servers: localhost:9092", "bootstrap.servers: "+b.Addr())
	if text == string(demoConfig) {
		t.Fatal("the demo configuration names no bootstrap.servers: localhost:9092 to replace")
	}
	cfgFile = filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgFile, b.Addr()
}

// dev --kafka existing runs on the configuration's own cluster: the
// README's curl lines work through it, and the banner names that cluster
// and says the emulator is for development only.
func TestDevWithAnExistingCluster(t *testing.T) {
	cfgFile, bootstrap := usersCluster(t)
	front, kafkaAddr, banner, _ := devStart(t, "--kafka", "existing", "--config", cfgFile, "--responder", "http-echo:orders-requests")
	if kafkaAddr != bootstrap {
		t.Errorf("the banner's Kafka is %q, want the configuration's %s:\n%s", kafkaAddr, bootstrap, strings.Join(banner, "\n"))
	}
	if !strings.Contains(strings.Join(banner, "\n"), devOnlyNotice) {
		t.Errorf("the banner does not say the emulator is for development only:\n%s", strings.Join(banner, "\n"))
	}
	checkReadmeProduceLines(t, front)
}

// dev --processor puts the emulator alone in front of a running serve: the
// README's curl lines work through it.
func TestDevInFrontOfARunningServe(t *testing.T) {
	cfgFile, bootstrap := usersCluster(t)
	r, err := responder.Start(responder.Options{Topic: "orders-requests", ReplyTo: "orders-responses", Handler: responder.HTTPEcho(),
		Properties: map[string]string{"bootstrap.servers": bootstrap}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	admin, listen := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &logbuf.Buffer{}
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--config", cfgFile, "--listen", listen, "--admin", admin, "--drain-delay", "0s", "--grace", "5s"}, io.Discard, logs)
	}()
	defer func() {
		cancel()
		<-exited
	}()
	waitReady(t, admin, logs)
	front, _, banner, stop := devStart(t, "--processor", listen)
	defer stop()
	text := strings.Join(banner, "\n")
	if !strings.Contains(text, listen+" (running on its own)") || !strings.Contains(text, devOnlyNotice) || strings.Contains(text, "Kafka") {
		t.Errorf("the banner of the emulator alone:\n%s", text)
	}
	checkReadmeProduceLines(t, front)
}

func TestDevModesRefuseFlagsTheyDoNotUse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--processor", "127.0.0.1:1", "--data", "d"}, "--data does not go with --processor"},
		{[]string{"--processor", "127.0.0.1:1", "--kafka", "existing"}, "--kafka does not go with --processor"},
		{[]string{"--kafka", "existing", "--topic", "t"}, "--topic does not go with --kafka existing"},
	} {
		var stderr strings.Builder
		code := run(context.Background(), append([]string{"dev"}, c.args...), io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("dev %s: exit %d %q, want 2 and %q", strings.Join(c.args, " "), code, stderr.String(), c.want)
		}
	}
}
