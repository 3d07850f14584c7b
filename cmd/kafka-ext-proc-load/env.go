package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/envoy/emulator"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// benchConfig has the two fetch route shapes of the bundled demo
// (cmd/kafka-ext-proc/demo.yaml: GET /items merged, GET /items/{id} by key)
// on topics of their own, so the merged route holds exactly -keys records
// and the single-key and long-poll records do not change it.
const benchConfig = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: "127.0.0.1:9092" }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: /merged }]
        exit: kafka0
        with: { capability: fetch, topic: bench-merged, merge: { content-type: application/json } }
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: bench-items, filters: [{ key: "${params.id}" }] }
limits: { max-wait: 60s }
`

const (
	itemsTopic  = "bench-items"
	mergedTopic = "bench-merged"
	// host is the :authority of the generated requests; nothing resolves
	// or dials it.
	host = "kafka-ext-proc.bench"
)

// env is the running system under test: the embedded broker, the processor
// and the clients that speak ext_proc to it as Envoy does.
type env struct {
	log      *slog.Logger
	settings envoy.Settings
	broker   *embedded.Broker
	proc     *stack.Processor
	prod     *kafka.Producer
	procSide *side
}

// side is one ext_proc server as the load sees it: connections and one
// emulator client per connection.
type side struct {
	name    string
	conns   []*grpc.ClientConn
	clients []*emulator.Client
}

func startEnv(ctx context.Context, o *options, logger *slog.Logger) (_ *env, err error) {
	cfg, err := config.Parse("bench.yaml", []byte(benchConfig), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, fmt.Errorf("the built-in configuration: %w", err)
	}
	boot, err := envoy.Parse(envoy.DefaultYAML())
	if err != nil {
		return nil, fmt.Errorf("the shipped envoy.yaml: %w", err)
	}
	settings, err := envoy.SettingsFrom(boot)
	if err != nil {
		return nil, fmt.Errorf("the shipped envoy.yaml: %w", err)
	}

	e := &env{log: logger, settings: settings}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	// Loopback only, on free ports: the load generator talks to nothing else.
	e.broker, err = embedded.Start(embedded.Options{Addr: "127.0.0.1:0", Topics: stack.TopicsOf(cfg), Logger: logger.With("component", "kafka")})
	if err != nil {
		return nil, err
	}
	cfg = stack.PointAt(cfg, e.broker.Addr())
	e.proc, err = stack.StartProcessor(stack.ProcessorOptions{Config: cfg, Listen: "127.0.0.1:0", Logger: logger.With("component", "processor")})
	if err != nil {
		return nil, err
	}
	e.prod, err = kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": e.broker.Addr(), "linger.ms": 0, "log_level": 3, "allow.auto.create.topics": false,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the producer: %w", err)
	}
	e.procSide, err = e.dial("processor", e.proc.Addr(), o.conns)
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	if e.procSide != nil {
		e.procSide.close()
	}
	if e.prod != nil {
		e.prod.Close()
	}
	if e.proc != nil {
		// Every exchange of the run has ended and the load's connections
		// are closed, so the drain is quick; the bound is for a bug.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e.proc.Shutdown(ctx)
		cancel()
	}
	if e.broker != nil {
		e.broker.Close()
	}
}

// dial opens n connections to an ext_proc server at addr (loopback), each
// with the emulator's client on top, as Envoy's workers each hold one.
func (e *env) dial(name, addr string, n int, opts ...grpc.DialOption) (*side, error) {
	s := &side{name: name}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	for range n {
		conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("connecting to %s: %w", name, err)
		}
		// Connect now: the first measured request should not pay for it.
		conn.Connect()
		s.conns = append(s.conns, conn)
		c, err := emulator.NewClient(e.settings, conn, e.log.With("component", "emulator", "target", name))
		if err != nil {
			s.close()
			return nil, err
		}
		s.clients = append(s.clients, c)
	}
	return s, nil
}

func (s *side) close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// client returns the emulator client worker i uses (round robin over the
// connections).
func (s *side) client(i int) *emulator.Client { return s.clients[i%len(s.clients)] }

// newRequest builds a GET as the HCM hands it to the ext_proc filter
// (emulator.DownstreamHeaders). hdr are extra header name/value pairs.
//
// The load reuses one Request for many exchanges, so they share an
// x-request-id; the processor only logs it, and building headers per request
// would add client-side allocations to what is measured.
func newRequest(c *emulator.Client, path string, hdr ...string) emulator.Request {
	r := &http.Request{
		Method: http.MethodGet, URL: &url.URL{Path: path}, RequestURI: path, Host: host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"User-Agent": {"kafka-ext-proc-load"}, "Accept": {"*/*"}},
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	h := emulator.DownstreamHeaders(r)
	return emulator.Request{Headers: h, EndOfStream: true, Route: c.Route(h)}
}

// reply is what the downstream client received.
type reply struct {
	status  int
	headers emulator.Headers
	body    []byte
	at      time.Time // when the terminal action arrived
}

func (r reply) header(name string) string {
	v, _ := r.headers.Get(name)
	return v
}

// exchange runs one request through the ext_proc filter as the emulator's
// HTTP side does: Start, the filter's actions until the terminal one, then
// Close (Envoy's RST of the Process stream).
func exchange(ctx context.Context, c *emulator.Client, req emulator.Request) (reply, error) {
	x := c.Start(ctx, req)
	defer x.Close()
	var r reply
	for {
		a, err := x.Next(ctx)
		if err != nil {
			return r, err
		}
		switch a.Kind {
		case emulator.ActionLocalReply:
			return reply{status: a.Reply.Status, headers: a.Reply.Headers, body: a.Reply.Body, at: time.Now()}, nil
		case emulator.ActionContinue:
			return reply{status: a.Reply.Status, headers: a.Reply.Headers, body: a.Reply.Body},
				fmt.Errorf("the request continued past ext_proc (%s): the processor did not answer", a.Details)
		case emulator.ActionHeaders:
			r.status, r.headers = a.Status, a.Headers
		case emulator.ActionBody:
			r.body = append(r.body, a.Body...)
		case emulator.ActionReset:
			return r, fmt.Errorf("the stream was reset: %s", a.Details)
		}
		if a.Terminal() {
			r.at = time.Now()
			return r, nil
		}
	}
}

// jsonValue returns a JSON object of exactly size bytes (size >= minValue)
// naming key; seq tells versions of one key apart.
func jsonValue(key string, seq, size int) []byte {
	head := fmt.Sprintf(`{"id":%q,"seq":%d,"pad":"`, key, seq)
	const tail = `"}`
	pad := max(size-len(head)-len(tail), 0)
	return []byte(head + strings.Repeat("x", pad) + tail)
}

// put writes records and waits for their acknowledgement. It returns the
// time the last acknowledgement arrived.
func (e *env) put(ctx context.Context, topic string, records map[string][]byte) (time.Time, error) {
	done := make(chan kafka.Event, len(records))
	for key, value := range records {
		m := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key:            []byte(key), Value: value,
			Headers: []kafka.Header{{Key: "content-type", Value: []byte("application/json")}},
		}
		if err := e.prod.Produce(m, done); err != nil {
			return time.Time{}, fmt.Errorf("producing to %s: %w", topic, err)
		}
	}
	var last time.Time
	for range records {
		select {
		case ev := <-done:
			m, ok := ev.(*kafka.Message)
			if !ok {
				return time.Time{}, fmt.Errorf("producing to %s: unexpected event %v", topic, ev)
			}
			if m.TopicPartition.Error != nil {
				return time.Time{}, fmt.Errorf("producing to %s: %w", topic, m.TopicPartition.Error)
			}
			last = time.Now()
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("producing to %s: %w", topic, ctx.Err())
		}
	}
	return last, nil
}

// awaitAnswer polls the processor until a request is answered as want
// says: the view reads a write shortly after its acknowledgement, and the
// processor answers 503 until its views have caught up. Polling is bounded.
func (e *env) awaitAnswer(ctx context.Context, req emulator.Request, want func(reply) bool) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last reply
	var lastErr error
	for {
		last, lastErr = exchange(ctx, e.procSide.client(0), req)
		if lastErr == nil && want(last) {
			return last, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			path, _ := req.Headers.Get(":path")
			return last, fmt.Errorf("GET %s was not answered as expected in time (last: %d, %d bytes, err %v): %w",
				path, last.status, len(last.body), lastErr, ctx.Err())
		}
	}
}
