//go:build !nodev

package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/logbuf"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// templatedRoutes are added to the demo configuration so that a request
// can name a topic the user's cluster lacks.
const templatedRoutes = `    routes:
      - when: [{ method: POST, path: "/t/{name}" }]
        exit: kafka0
        with: { capability: produce, topic: "${params.name}", topic-pattern: "t-*", key: k }
      - when: [{ method: GET, path: "/t/{name}/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: "${params.name}", topic-pattern: "t-*", filters: [{ key: "${params.id}" }] }
`

// usersCluster starts a broker standing for the cluster a user already
// runs, with the demo's topics, and writes the demo configuration pointed
// at it, with templated routes added; it returns the file. Like a
// carelessly run production cluster, the broker creates a topic whenever
// a metadata request asks for one it lacks, and accepts CreateTopics: a
// topic that stays absent proves nothing asked for it.
func usersCluster(t *testing.T) (cfgFile, bootstrap string) {
	t.Helper()
	cfg, err := config.Parse("demo.yaml", demoConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := embedded.Start(embedded.Options{Topics: stack.TopicsOf(cfg), Extra: []kfake.Opt{kfake.AllowAutoTopicCreation()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	text := strings.ReplaceAll(string(demoConfig), "bootstrap.servers: localhost:9092", "bootstrap.servers: "+b.Addr())
	if text == string(demoConfig) {
		t.Fatal("the demo configuration names no bootstrap.servers: localhost:9092 to replace")
	}
	const http0 = "    type: http-kafka\n    kind: proxy\n    routes:\n"
	if !strings.Contains(text, http0) {
		t.Fatal("the demo configuration has no http-kafka routes to add to")
	}
	text = strings.Replace(text, http0, strings.TrimSuffix(http0, "    routes:\n")+templatedRoutes, 1)
	cfgFile = filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgFile, b.Addr()
}

// dev --kafka existing runs on the configuration's own cluster: the
// README's curl lines work through it, the banner names that cluster and
// says the emulator is for development only, and no topic is created,
// neither at start nor by a request naming a topic the cluster lacks.
func TestDevWithAnExistingCluster(t *testing.T) {
	cfgFile, bootstrap := usersCluster(t)
	before := clusterTopics(t, bootstrap)
	front, kafkaAddr, banner, _ := devStart(t, "--kafka", "existing", "--config", cfgFile, "--responder", "http-echo:orders-requests")
	if kafkaAddr != bootstrap {
		t.Errorf("the banner's Kafka is %q, want the configuration's %s:\n%s", kafkaAddr, bootstrap, strings.Join(banner, "\n"))
	}
	if !strings.Contains(strings.Join(banner, "\n"), devOnlyNotice) {
		t.Errorf("the banner does not say the emulator is for development only:\n%s", strings.Join(banner, "\n"))
	}
	checkReadmeProduceLines(t, front)

	// A templated route naming a topic the cluster lacks gets the README's
	// 404 rather than the topic.
	client := &http.Client{Timeout: 30 * time.Second}
	for _, c := range []struct{ method, path string }{{"POST", "/t/t-missing"}, {"GET", "/t/t-missing/1"}} {
		req, err := http.NewRequest(c.method, "http://"+front+c.path, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var problem struct{ Detail string }
		err = json.NewDecoder(resp.Body).Decode(&problem)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("content-type") != "application/problem+json" || err != nil ||
			!strings.Contains(problem.Detail, `topic "t-missing" does not exist`) {
			t.Errorf("%s %s: %d %s %q (%v), want 404 problem+json saying the topic does not exist",
				c.method, c.path, resp.StatusCode, resp.Header.Get("content-type"), problem.Detail, err)
		}
	}

	if after := clusterTopics(t, bootstrap); !slices.Equal(after, before) {
		t.Errorf("the cluster's topics changed under dev --kafka existing:\nbefore %v\nafter  %v", before, after)
	}

	// The listing sees a topic created now: the comparison above can fail.
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := admin.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: "t-probe", NumPartitions: 1, ReplicationFactor: 1}})
	if err != nil || len(res) != 1 || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("the user's cluster refused a CreateTopics: %v %v", res, err)
	}
	if after := clusterTopics(t, bootstrap); !slices.Contains(after, "t-probe") {
		t.Errorf("a created topic is not listed: %v", after)
	}
}

// clusterTopics lists the topics of the cluster at bootstrap, sorted.
func clusterTopics(t *testing.T, bootstrap string) []string {
	t.Helper()
	return slices.Sorted(maps.Keys(clusterMetadata(t, bootstrap).Topics))
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
