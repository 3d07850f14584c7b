package e2e_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// env is a running dev stack and clients for it.
type env struct {
	t     *testing.T
	dev   *stack.Dev
	base  string       // http://front
	h1    *http.Client // HTTP/1.1
	h2c   *http.Client // prior-knowledge HTTP/2 over cleartext
	prod  *kafka.Producer
	grpcc *grpc.ClientConn
}

// startEnv starts the dev stack for a configuration given as YAML.
func startEnv(t *testing.T, yaml string, opts ...func(*stack.DevOptions)) *env {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	do := stack.DevOptions{
		Config: cfg, Envoy: envoy.DefaultYAML(),
		Front: "127.0.0.1:0", Listen: "127.0.0.1:0", Kafka: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, o := range opts {
		o(&do)
	}
	d, err := stack.StartDev(do)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dev: d, base: "http://" + d.Front()}
	t.Cleanup(func() {
		if e.grpcc != nil {
			e.grpcc.Close()
		}
		if e.prod != nil {
			e.prod.Close()
		}
		e.h1.CloseIdleConnections()
		e.h2c.CloseIdleConnections()
		d.Close()
	})
	e.h1 = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2000}}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true) // prior knowledge, as gRPC clients do
	e.h2c = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{Protocols: &h2c}}
	e.waitReady()
	return e
}

// reload parses yaml as the configuration file name and reloads the
// processor with it, pointed at the test's broker; it returns what it parsed.
func (e *env) reload(name, yaml string) *config.Config {
	e.t.Helper()
	next, err := config.Parse(name, []byte(yaml), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.dev.Processor.Reload(stack.PointAt(next, e.dev.Broker.Addr())); err != nil {
		e.t.Fatal(err)
	}
	return next
}

// withRoute is a configuration with route (YAML lines at the routes'
// indentation) first among the routes of its first binding.
func withRoute(yaml, route string) string {
	return strings.Replace(yaml, "    routes:\n", "    routes:\n"+route, 1)
}

// testWriter sends the stack's warnings to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitReady polls readiness (bounded): the configured views catch up.
func (e *env) waitReady() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready, reasons := e.dev.Processor.Readiness.Ready()
		if ready {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("not ready: %v", reasons)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gauge reads a gauge of the processor's registry.
func (e *env) gauge(name string) float64 {
	e.t.Helper()
	mfs, err := e.dev.Processor.Registry.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
			return sum
		}
	}
	e.t.Fatalf("no metric %s", name)
	return 0
}

// waitGauge polls (bounded) until the gauge reaches want.
func (e *env) waitGauge(name string, want float64) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := e.gauge(name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s = %v, want %v", name, got, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sendReq sends one HTTP request through the front: hdr are name, value
// pairs, "host" setting the request's Host (so :authority), which two
// fronts must share for a replay to match. It returns the body read.
func (e *env) sendReq(ctx context.Context, c *http.Client, method, path, body string, hdr ...string) (*http.Response, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, rd)
	if err != nil {
		return nil, "", err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// request is sendReq that fails the test on a transport error.
func (e *env) request(c *http.Client, method, path, body string, hdr ...string) (*http.Response, string) {
	e.t.Helper()
	resp, b, err := e.sendReq(context.Background(), c, method, path, body, hdr...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp, b
}

// grpcConn is a grpc-go connection to the front.
func (e *env) grpcConn() *grpc.ClientConn {
	e.t.Helper()
	if e.grpcc == nil {
		c, err := grpc.NewClient(e.dev.Front(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			e.t.Fatal(err)
		}
		e.grpcc = c
	}
	return e.grpcc
}

// put writes a record (value nil = tombstone) and waits for its acknowledgement.
func (e *env) put(topic string, partition int32, key string, value []byte, headers ...string) {
	e.t.Helper()
	if e.prod == nil {
		p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3, "linger.ms": 0})
		if err != nil {
			e.t.Fatal(err)
		}
		e.prod = p
	}
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition}, Key: []byte(key), Value: value}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers = append(m.Headers, kafka.Header{Key: headers[i], Value: []byte(headers[i+1])})
	}
	done := make(chan kafka.Event, 1)
	if err := e.prod.Produce(m, done); err != nil {
		e.t.Fatal(err)
	}
	select {
	case ev := <-done:
		if m := ev.(*kafka.Message); m.TopicPartition.Error != nil {
			e.t.Fatal(m.TopicPartition.Error)
		}
	case <-time.After(20 * time.Second):
		e.t.Fatal("no acknowledgement")
	}
}
