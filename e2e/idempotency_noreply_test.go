package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
)

// noReplyConfig is idemConfig with a short reply-timeout, so that the
// first attempt of each request-reply request times out while no responder
// runs.
var noReplyConfig = strings.Replace(idemConfig, "reply-timeout: 10s", "reply-timeout: 3s", 1)

// A retry with the idempotency key of a request-reply request that has no
// reply yet (its responder is down: the first attempt timed out, or its
// 202 was lost) writes nothing, whether it comes in a row, at once, or
// through another replica, and answers as the first attempt did; once a
// responder answers, every retry gets the one reply. The reply index
// cannot catch these retries (there is no reply to find), so this is the
// key index's work alone.
func TestIdempotencyKeyBeforeAnyReply(t *testing.T) {
	t.Parallel()
	e := startEnv(t, noReplyConfig)
	a := &replica{base: e.base, h1: e.h1, grpcc: e.grpcConn()}
	b := startReplica(t, e)
	host := strings.TrimPrefix(e.base, "http://")

	grpcAnswer := func(msgs []string, err error) string {
		st := status.Convert(err)
		return fmt.Sprintf("%q %v %s", msgs, st.Code(), st.Message())
	}
	shapes := []struct {
		idemShape
		first string // what the first attempt answers, with no responder (a regexp)
		reply string // what a retry answers once the responder answered (a regexp)
	}{
		{idemShape{name: "sync", topic: "idem-sync", records: 1, send: func(t *testing.T, r *replica, key string) string {
			t.Helper()
			return sendTo(t, r, host, "POST", "/sync", `{"n":1}`, "idempotency-key", key, "content-type", "application/json")
		}}, `^504 location="" body=.*"detail":"no reply within limits.reply-timeout \(3s\); the request was written to topic \\"idem-sync\\": retry with the same idempotency-key header to get its reply without writing it again"`,
			`^201 location="" body=.*"body":\{"n":1\}`},
		{idemShape{name: "async", topic: "idem-async", records: 1, send: func(t *testing.T, r *replica, key string) string {
			t.Helper()
			return sendTo(t, r, host, "POST", "/async", `{"n":2}`, "idempotency-key", key, "content-type", "application/json", "prefer", "respond-async")
		}}, `^202 location="/async;cid=async-[^"]+"`,
			`^201 location="" body=.*"body":\{"n":2\}`},
		{idemShape{name: "gRPC unary", topic: "idem-grpc", records: 2, send: func(t *testing.T, r *replica, key string) string {
			t.Helper()
			ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", key)
			resp, err := example.NewEchoClient(r.grpcc).Say(ctx, &example.EchoMessage{Message: "once"})
			var msgs []string
			if err == nil {
				msgs = append(msgs, resp.GetMessage())
			}
			return grpcAnswer(msgs, err)
		}}, `^\[\] DeadlineExceeded no reply within limits.reply-timeout \(3s\) on topic "idem-grpc-replies"; is a responder consuming "idem-grpc"\? a retry with the same idempotency-key metadata writes nothing already written and answers as this request would have$`,
			`^\["once"\] OK $`},
		{idemShape{name: "gRPC stream", topic: "idem-grpc", records: 3, send: func(t *testing.T, r *replica, key string) string {
			t.Helper()
			ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", key)
			st := sendAll(ctx, t, r.grpcc, "/example.Echo/Chat", true, "m1", "m2")
			msgs, err := recvAll(st)
			return grpcAnswer(msgs, err)
		}}, `^\[\] DeadlineExceeded no reply within limits.reply-timeout \(3s\) on topic "idem-grpc-replies"; is a responder consuming "idem-grpc"\? a retry with the same idempotency-key metadata writes nothing already written and answers as this request would have$`,
			`^\["m1" "m2"\] OK $`},
	}
	// The two gRPC shapes share a topic: their keys tell them apart.
	keysOf := func(name string) []string {
		k := strings.ReplaceAll(name, " ", "-")
		keys := []string{k + "-in-a-row", k + "-at-once", k + "-two-replicas"}
		if name == "sync" {
			keys = append(keys, "sync-gave-up")
		}
		return keys
	}
	count := func(topic, key string) int { return len(recordsWithPrefix(e, topic, key+"-")) }
	same := func(t *testing.T, how string, answers ...string) {
		t.Helper()
		for _, ans := range answers[1:] {
			if ans != answers[0] {
				t.Errorf("%s: answers differ:\n%s\n%s", how, answers[0], ans)
			}
		}
	}
	atOnce := func(sends ...func() string) []string {
		answers := make([]string, len(sends))
		var wg sync.WaitGroup
		for i, send := range sends {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = send()
			}()
		}
		wg.Wait()
		return answers
	}
	locations := map[string]string{} // async key → its location
	var mu sync.Mutex

	t.Run("no responder", func(t *testing.T) {
		for _, sh := range shapes {
			t.Run(sh.name, func(t *testing.T) {
				t.Parallel()
				keys := keysOf(sh.name)
				check := func(how, key string, answers ...string) {
					t.Helper()
					if !regexp.MustCompile(sh.first).MatchString(answers[0]) {
						t.Errorf("%s: first answer\n%s\nwant\n%s", how, answers[0], sh.first)
					}
					same(t, how, answers...)
					if n := count(sh.topic, key); n != sh.records {
						t.Errorf("%s: %d records with key %s in %s, want %d (one request's)", how, n, key, sh.topic, sh.records)
					}
					if m := regexp.MustCompile(`location="([^"]+)"`).FindStringSubmatch(answers[0]); m != nil {
						mu.Lock()
						locations[key] = m[1]
						mu.Unlock()
					}
				}
				check("twice in a row", keys[0], sh.send(t, a, keys[0]), sh.send(t, a, keys[0]))
				check("twice at once", keys[1], atOnce(
					func() string { return sh.send(t, a, keys[1]) },
					func() string { return sh.send(t, a, keys[1]) })...)
				check("two replicas", keys[2], sh.send(t, a, keys[2]), sh.send(t, b, keys[2]))
			})
		}
		// The first attempt's client gives up before any answer (the
		// processor goes on writing the request): its retry, through
		// another replica, answers as a first attempt would and writes
		// nothing.
		t.Run("sync, the client gave up", func(t *testing.T) {
			t.Parallel()
			key := "sync-gave-up"
			ctx, cancel := context.WithTimeout(context.Background(), time.Second) // below reply-timeout
			defer cancel()
			resp, body, err := e.sendReq(ctx, a.h1, "POST", "/sync", `{"n":1}`, "idempotency-key", key, "content-type", "application/json")
			if err == nil {
				t.Fatalf("the first attempt was answered %d %s before the client gave up", resp.StatusCode, body)
			}
			if got := shapes[0].send(t, b, key); !regexp.MustCompile(shapes[0].first).MatchString(got) {
				t.Errorf("the retry: %s\nwant %s", got, shapes[0].first)
			}
			if n := count("idem-sync", key); n != 1 {
				t.Errorf("%d records with key %s, want 1", n, key)
			}
		})
	})
	if t.Failed() {
		return
	}

	// A responder starts and answers every request in the log: once each,
	// as each was written once.
	start := func(topic string, h responder.Handler, dedup func(*responder.Request) string) *responder.Responder {
		r, err := responder.Start(responder.Options{
			Properties: map[string]string{"bootstrap.servers": e.dev.Broker.Addr()},
			Topic:      topic, Handler: h, DedupKey: dedup,
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	responders := []*responder.Responder{
		start("idem-sync", responder.HTTPEcho(), nil),
		start("idem-async", responder.HTTPEcho(), nil),
		start("idem-grpc", responder.GRPCEcho(), responder.GRPCDedupKey),
	}
	// 3 keys per shape (4 for sync): one record each for HTTP, 2 per unary
	// call, 3 per streamed call.
	wantHandled := []uint64{4, 3, 3*2 + 3*3}
	pollUntil(t, "the responders answered every request", func() bool {
		for i, r := range responders {
			if r.Handled() < wantHandled[i] {
				return false
			}
		}
		return true
	})

	t.Run("responder answers", func(t *testing.T) {
		for _, sh := range shapes {
			t.Run(sh.name, func(t *testing.T) {
				t.Parallel()
				for _, key := range keysOf(sh.name) {
					// The retries (follow-ups for async) through both
					// replicas at once get the one reply.
					send := func(r *replica) string { return sh.send(t, r, key) }
					if sh.name == "async" {
						loc := locations[key]
						if loc == "" {
							t.Fatalf("%s: no location from the first attempt", key)
						}
						send = func(r *replica) string { return sendTo(t, r, host, "GET", loc, "", "prefer", "wait=10") }
					}
					answers := atOnce(func() string { return send(a) }, func() string { return send(b) })
					same(t, key, answers...)
					if !regexp.MustCompile(sh.reply).MatchString(answers[0]) {
						t.Errorf("%s: %s, want the responder's reply (%s)", key, answers[0], sh.reply)
					}
					if n := count(sh.topic, key); n != sh.records {
						t.Errorf("%s: %d records after the retries, want %d (one request's)", key, n, sh.records)
					}
				}
			})
		}
	})
	for i, r := range responders {
		if r.Handled() != wantHandled[i] {
			t.Errorf("the responder of %s handled %d requests, want %d", r.Topic(), r.Handled(), wantHandled[i])
		}
	}
}
