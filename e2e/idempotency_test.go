package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// idemConfig has one route per produce shape, each on a topic of its own so
// the records of each shape can be counted.
const idemConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: /oneway }]
        exit: kafka0
        with: { capability: produce, topic: idem-oneway }
      - when: [{ method: POST, path: /sync }]
        exit: kafka0
        with: { capability: produce, topic: idem-sync, reply-to: idem-http-replies }
      - when: [{ method: POST, path: /async }, { method: GET, path: "/async;cid={correlationId}" }]
        exit: kafka0
        with:
          capability: produce
          topic: idem-async
          reply-to: idem-http-replies
          async: { location: "/async;cid=${correlationId}" }
      - when: [{ method: POST, path: /pending }, { method: GET, path: "/pending;cid={correlationId}" }]
        exit: kafka0
        with:
          capability: produce
          topic: idem-pending
          reply-to: idem-http-replies
          async: { location: "/pending;cid=${correlationId}" }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: example.Oneway }]
        exit: kafka0
        with: { capability: produce, topic: idem-grpc-oneway }
      - when: [{ method: example.Echo/* }]
        exit: kafka0
        with: { capability: produce, topic: idem-grpc, reply-to: idem-grpc-replies }
limits: { reply-timeout: 10s, kafka-timeout: 5s, idempotency-window: 10m }
`

// replica is one processor with an Envoy emulator in front of it, sharing
// the env's broker: another replica of the same deployment.
type replica struct {
	proc  *stack.Processor
	front *stack.Front
	base  string
	h1    *http.Client
	grpcc *grpc.ClientConn
}

func startReplica(t *testing.T, e *env) *replica {
	t.Helper()
	return startReplicaAt(t, e, 0)
}

// startReplicaAt starts a replica whose key index runs ahead by ahead: it
// sees the keys written now as that much older.
func startReplicaAt(t *testing.T, e *env, ahead time.Duration) *replica {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var clock func() time.Time
	if ahead != 0 {
		clock = func() time.Time { return time.Now().Add(ahead) }
	}
	p, err := stack.StartProcessor(stack.ProcessorOptions{Config: e.dev.Config, Listen: "127.0.0.1:0", Logger: logger, KeysClock: clock})
	if err != nil {
		t.Fatal(err)
	}
	f, err := stack.StartFront(envoy.DefaultYAML(), "127.0.0.1:0", p.Addr(), logger)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(f.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{proc: p, front: f, base: "http://" + f.Addr(), h1: &http.Client{Timeout: 60 * time.Second}, grpcc: cc}
	t.Cleanup(r.stop)
	return r
}

// stop ends the replica as a restart would: the processor's state is gone.
func (r *replica) stop() {
	if r.front == nil {
		return
	}
	r.grpcc.Close()
	r.h1.CloseIdleConnections()
	r.front.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	r.proc.Shutdown(ctx)
	cancel()
	r.front = nil
}

// idemShape is one produce shape: how to send a request with a key through
// a replica, what the answer is (as a comparable string), and how many
// records one request writes.
type idemShape struct {
	name    string
	topic   string
	records int
	send    func(t *testing.T, r *replica, key string) string
}

func idemShapes(host string) []idemShape {
	httpSend := func(method, path, body string, hdr ...string) func(t *testing.T, r *replica, key string) string {
		return func(t *testing.T, r *replica, key string) string {
			t.Helper()
			return sendTo(t, r, host, method, path, body, append([]string{"idempotency-key", key, "content-type", "application/json"}, hdr...)...)
		}
	}
	return []idemShape{
		{name: "oneway HTTP", topic: "idem-oneway", records: 1, send: httpSend("POST", "/oneway", `{"n":1}`)},
		{name: "oneway gRPC", topic: "idem-grpc-oneway", records: 2, send: func(t *testing.T, r *replica, key string) string {
			t.Helper()
			ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", key)
			st := sendAll(ctx, t, r.grpcc, "/example.Oneway/Send", false, "m1", "m2")
			var m rawMessage
			err := st.RecvMsg(&m)
			return fmt.Sprintf("%q %v", m.b, status.Code(err))
		}},
		{name: "sync", topic: "idem-sync", records: 1, send: httpSend("POST", "/sync", `{"n":2}`)},
		{name: "async", topic: "idem-async", records: 1, send: httpSend("POST", "/async", `{"n":3}`, "prefer", "respond-async")},
		{name: "gRPC request-reply", topic: "idem-grpc", records: 2, send: func(t *testing.T, r *replica, key string) string {
			t.Helper()
			ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", key)
			resp, err := example.NewEchoClient(r.grpcc).Say(ctx, &example.EchoMessage{Message: "once"})
			return fmt.Sprintf("%q %v", resp.GetMessage(), status.Code(err))
		}},
	}
}

// For every produce shape, the same idempotency key sent twice
// in a row, twice at once, to two replicas, and to a replica before and
// after its restart writes one request's records, and every answer is the
// first one.
func TestIdempotencyKeyEveryShape(t *testing.T) {
	t.Parallel()
	e := startEnv(t, idemConfig, withResponders(
		responder.Options{Topic: "idem-sync", Handler: responder.HTTPEcho()},
		responder.Options{Topic: "idem-async", Handler: responder.HTTPEcho()},
		responder.Options{Topic: "idem-grpc", Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey},
	))
	a := &replica{base: e.base, h1: e.h1, grpcc: e.grpcConn()}
	b := startReplica(t, e)
	host := strings.TrimPrefix(e.base, "http://")

	for _, sh := range idemShapes(host) {
		t.Run(sh.name, func(t *testing.T) {
			check := func(how, key string, answers ...string) {
				t.Helper()
				for _, ans := range answers[1:] {
					if ans != answers[0] {
						t.Errorf("%s: answers differ:\n%s\n%s", how, answers[0], ans)
					}
				}
				if !strings.HasPrefix(answers[0], "20") && !strings.HasPrefix(answers[0], `"`) {
					t.Errorf("%s: the first answer is a failure: %s", how, answers[0])
				}
				if n := len(recordsWithPrefix(e, sh.topic, key+"-")); n != sh.records {
					t.Errorf("%s: %d records with key %s in %s, want %d (one request's)", how, n, key, sh.topic, sh.records)
				}
			}
			k := strings.ReplaceAll(sh.name, " ", "-")

			key := k + "-in-a-row"
			check("twice in a row", key, sh.send(t, a, key), sh.send(t, a, key))

			key = k + "-at-once"
			var wg sync.WaitGroup
			answers := make([]string, 2)
			for i := range answers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					answers[i] = sh.send(t, a, key)
				}()
			}
			wg.Wait()
			check("twice at once", key, answers...)

			key = k + "-two-replicas"
			check("two replicas", key, sh.send(t, a, key), sh.send(t, b, key))

			key = k + "-restart"
			r := startReplica(t, e)
			first := sh.send(t, r, key)
			r.stop()
			r = startReplica(t, e)
			check("across a restart", key, first, sh.send(t, r, key))

			// Nothing else was written: 4 keys, one request's records each.
			if n := len(e.readTopic(sh.topic)); n != 4*sh.records {
				t.Errorf("%d records in %s, want %d", n, sh.topic, 4*sh.records)
			}
		})
	}
}

// sendTo sends one HTTP request through a replica under the authority host
// (every replica is reached under the same one, as behind one Envoy
// cluster: it is part of what a request is) and returns the answer as a
// comparable string.
func sendTo(t *testing.T, r *replica, host, method, path, body string, hdr ...string) string {
	t.Helper()
	req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := r.h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d location=%q body=%s", resp.StatusCode, resp.Header.Get("location"), b)
}

// recordsWithPrefix returns the records of topic whose correlation id
// starts with prefix (the idempotency key and its dash).
func recordsWithPrefix(e *env, topic, prefix string) []string {
	var out []string
	for _, m := range e.readTopic(topic) {
		if v, ok := recHeader(m, "gateway:correlation-id"); ok && strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// counter is the sum of a counter's (or gauge's) series in a processor.
func counter(t *testing.T, p *stack.Processor, name string) float64 {
	t.Helper()
	mfs, err := p.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// After limits.idempotency-window a replay of every kind and
// a follow-up on an async location answer that the result expired, and
// write nothing; after twice the window the key is forgotten and a request
// with it is new. The replicas that see the window pass run their key
// index's clock ahead instead of the test waiting.
func TestIdempotencyWindowExpiry(t *testing.T) {
	t.Parallel()
	e := startEnv(t, idemConfig)
	a := &replica{base: e.base, h1: e.h1, grpcc: e.grpcConn()}
	host := strings.TrimPrefix(e.base, "http://")
	shapes := idemShapes(host)
	oneway, grpcOneway := shapes[0], shapes[1]
	pending := idemShape{topic: "idem-pending", records: 1, send: func(t *testing.T, r *replica, key string) string {
		t.Helper()
		return sendTo(t, r, host, "POST", "/pending", `{"n":4}`, "idempotency-key", key, "prefer", "respond-async")
	}}

	accepted := pending.send(t, a, "late-1")
	if !strings.HasPrefix(accepted, "202 ") {
		t.Fatalf("async request: %s, want 202", accepted)
	}
	m := regexp.MustCompile(`location="([^"]+)"`).FindStringSubmatch(accepted)
	if m == nil {
		t.Fatalf("async request: %s, without a location", accepted)
	}
	location := m[1]
	if got := sendTo(t, a, host, "GET", location, ""); !strings.HasPrefix(got, "202 ") {
		t.Fatalf("follow-up within the window: %s, want 202", got)
	}
	if got := oneway.send(t, a, "late-2"); !strings.HasPrefix(got, "204 ") {
		t.Fatalf("oneway: %s", got)
	}
	if got := grpcOneway.send(t, a, "late-3"); got != `"" OK` {
		t.Fatalf("gRPC oneway: %s", got)
	}

	// Fifteen minutes on (window 10m): expired, nothing written.
	b := startReplicaAt(t, e, 15*time.Minute)
	for _, c := range []struct{ what, got, want string }{
		{"follow-up", sendTo(t, b, host, "GET", location, ""), "410 "},
		{"async replay", pending.send(t, b, "late-1"), "410 "},
		{"oneway replay", oneway.send(t, b, "late-2"), "410 "},
		{"gRPC oneway replay", grpcOneway.send(t, b, "late-3"), `"" FailedPrecondition`},
	} {
		if !strings.HasPrefix(c.got, c.want) || c.want == "410 " && !strings.Contains(c.got, "expired") {
			t.Errorf("%s after the window: %s, want %s saying it expired", c.what, c.got, c.want)
		}
	}
	for _, c := range []struct {
		topic, key string
		want       int
	}{{"idem-pending", "late-1", 1}, {"idem-oneway", "late-2", 1}, {"idem-grpc-oneway", "late-3", 2}} {
		if n := len(recordsWithPrefix(e, c.topic, c.key+"-")); n != c.want {
			t.Errorf("%s: %d records after the replays past the window, want %d", c.key, n, c.want)
		}
	}
	if n := counter(t, b.proc, "kafka_ext_proc_idempotency_expired_total"); n != 4 {
		t.Errorf("kafka_ext_proc_idempotency_expired_total = %v, want 4", n)
	}

	// Twenty-five minutes on (past twice the window): forgotten. The
	// follow-up still answers 410; a request with the key is new.
	c := startReplicaAt(t, e, 25*time.Minute)
	if got := sendTo(t, c, host, "GET", location, ""); !strings.HasPrefix(got, "410 ") {
		t.Errorf("follow-up past twice the window: %s, want 410", got)
	}
	if got := oneway.send(t, c, "late-2"); !strings.HasPrefix(got, "204 ") {
		t.Errorf("a forgotten key: %s, want 204", got)
	}
	if n := len(recordsWithPrefix(e, "idem-oneway", "late-2-")); n != 2 {
		t.Errorf("a forgotten key wrote %d records in all, want 2", n)
	}
}

// The key index remembers at most limits.idempotency-keys ids;
// the oldest go first, counted, and a retry of an evicted key writes again.
func TestIdempotencyKeysBound(t *testing.T) {
	t.Parallel()
	e := startEnv(t, strings.Replace(idemConfig, "idempotency-window: 10m", "idempotency-window: 10m, idempotency-keys: 3", 1))
	a := &replica{base: e.base, h1: e.h1, grpcc: e.grpcConn()}
	oneway := idemShapes(strings.TrimPrefix(e.base, "http://"))[0]
	for _, key := range []string{"b1", "b2", "b3", "b4", "b5", "b5", "b1", "b1"} {
		if got := oneway.send(t, a, key); !strings.HasPrefix(got, "204 ") {
			t.Fatalf("%s: %s", key, got)
		}
	}
	// b5 was remembered (one record); b1 was evicted by b4, so its first
	// retry wrote again and its second did not.
	for key, want := range map[string]int{"b1": 2, "b2": 1, "b5": 1} {
		if n := len(recordsWithPrefix(e, "idem-oneway", key+"-")); n != want {
			t.Errorf("%s: %d records, want %d", key, n, want)
		}
	}
	if n := counter(t, e.dev.Processor, "kafka_ext_proc_idempotency_keys_evicted_total"); n != 3 {
		t.Errorf("kafka_ext_proc_idempotency_keys_evicted_total = %v, want 3 (b1, b2, b3)", n)
	}
	if n := counter(t, e.dev.Processor, "kafka_ext_proc_idempotency_keys"); n != 3 {
		t.Errorf("kafka_ext_proc_idempotency_keys = %v, want 3", n)
	}
}

// A streamed gRPC call repeated with its idempotency key resumes after the
// messages the log already holds: the first call wrote m1 only, its retry
// sends m1 and m2 and writes m2 alone.
func TestIdempotencyGRPCStreamResumes(t *testing.T) {
	t.Parallel()
	e := startEnv(t, idemConfig)
	a := &replica{base: e.base, h1: e.h1, grpcc: e.grpcConn()}
	b := startReplica(t, e)
	send := func(r *replica, msgs ...string) {
		t.Helper()
		ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", "resume-1")
		st := sendAll(ctx, t, r.grpcc, "/example.Oneway/Send", false, msgs...)
		var m rawMessage
		if err := st.RecvMsg(&m); err != nil {
			t.Fatalf("%v: %v", msgs, err)
		}
	}
	send(a, "m1")
	send(b, "m1", "m2") // the retry, through another replica
	var values []string
	for _, m := range e.readTopic("idem-grpc-oneway") {
		if v, _ := recHeader(m, "gateway:correlation-id"); strings.HasPrefix(v, "resume-1-") {
			values = append(values, string(m.Value))
		}
	}
	if strings.Join(values, ",") != "m1,m2" {
		t.Fatalf("records %v, want m1 then m2, once each", values)
	}
}
