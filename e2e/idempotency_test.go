package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := stack.StartProcessor(stack.ProcessorOptions{Config: e.dev.Config, Listen: "127.0.0.1:0", Logger: logger})
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
			req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			// Every replica is reached under the same authority, as behind
			// one Envoy cluster: it is part of what a request is.
			req.Host = host
			req.Header.Set("idempotency-key", key)
			req.Header.Set("content-type", "application/json")
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
	}
	return []idemShape{
		{name: "oneway HTTP", topic: "idem-oneway", records: 1, send: httpSend("POST", "/oneway", `{"n":1}`)},
		{name: "oneway gRPC", topic: "idem-grpc-oneway", records: 2, send: func(t *testing.T, r *replica, key string) string {
			t.Helper()
			ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", key)
			st, err := r.grpcc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/example.Oneway/Send", grpc.ForceCodecV2(rawCodec{}))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"m1", "m2"} {
				if err := st.SendMsg(&rawMessage{b: []byte(v)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			var m rawMessage
			err = st.RecvMsg(&m)
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

// Must show 1: for every produce shape, the same idempotency key sent twice
// in a row, twice at once, to two replicas, and to a replica before and
// after its restart writes one request's records, and every answer is the
// first one.
func TestIdempotencyKeyEveryShape(t *testing.T) {
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
