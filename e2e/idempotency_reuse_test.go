package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
)

// calls counts the requests a responder was called with, by correlation
// id prefix (the idempotency key and its dash).
type calls struct{ n atomic.Int64 }

func (c *calls) wrap(h responder.Handler) responder.Handler {
	return func(ctx context.Context, req *responder.Request) ([]responder.Reply, error) {
		c.n.Add(1)
		return h(ctx, req)
	}
}

// reuseShape is one produce shape: its first request under a key, the same
// request again, and requests that differ from it; each returns its answer
// as a comparable string. A refusal starts with refused.
type reuseShape struct {
	name     string
	topic    string
	replies  string // the reply topic; "" for oneway
	first    func(t *testing.T, r *replica, key string) string
	differs  map[string]func(t *testing.T, r *replica, key string) string
	refused  string
	mentions string // what the refusal names besides the key
}

func reuseShapes(host string) []reuseShape {
	http := func(method, path, body string, hdr ...string) func(t *testing.T, r *replica, key string) string {
		return func(t *testing.T, r *replica, key string) string {
			t.Helper()
			return sendTo(t, r, host, method, path, body, append([]string{"idempotency-key", key, "content-type", "application/json"}, hdr...)...)
		}
	}
	grpcCall := func(method string, serverStreams bool, msgs ...string) func(t *testing.T, r *replica, key string) string {
		return func(t *testing.T, r *replica, key string) string {
			t.Helper()
			ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", key)
			got, err := recvAll(sendAll(ctx, t, r.grpcc, method, serverStreams, msgs...))
			s := status.Convert(err)
			return fmt.Sprintf("%s %q %s", s.Code(), got, s.Message())
		}
	}
	say := func(msg string, md ...string) func(t *testing.T, r *replica, key string) string {
		return func(t *testing.T, r *replica, key string) string {
			t.Helper()
			ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), append([]string{"idempotency-key", key}, md...)...)
			resp, err := example.NewEchoClient(r.grpcc).Say(ctx, &example.EchoMessage{Message: msg})
			s := status.Convert(err)
			return fmt.Sprintf("%s %q %s", s.Code(), resp.GetMessage(), s.Message())
		}
	}
	refusedHTTP, refusedGRPC := "422 ", codes.FailedPrecondition.String()+" "
	return []reuseShape{
		{name: "HTTP oneway", topic: "idem-oneway", first: http("POST", "/oneway", `{"n":1}`),
			differs: map[string]func(t *testing.T, r *replica, key string) string{
				"another body": http("POST", "/oneway", `{"n":2}`),
			}, refused: refusedHTTP, mentions: "the record it writes"},
		{name: "HTTP sync", topic: "idem-sync", replies: "idem-http-replies", first: http("POST", "/sync", `{"n":1}`),
			differs: map[string]func(t *testing.T, r *replica, key string) string{
				"another body":   http("POST", "/sync", `{"n":2}`),
				"another header": http("POST", "/sync", `{"n":1}`, "x-attempt", "2"),
				"another path":   http("POST", "/sync?x=1", `{"n":1}`),
			}, refused: refusedHTTP, mentions: "method, path, body"},
		// respond-async with a wait: the answer comes once the reply is
		// stored, so what the service was called with can be counted.
		{name: "HTTP async", topic: "idem-async", replies: "idem-http-replies", first: http("POST", "/async", `{"n":1}`, "prefer", "respond-async, wait=5"),
			differs: map[string]func(t *testing.T, r *replica, key string) string{
				"another body":          http("POST", "/async", `{"n":2}`, "prefer", "respond-async, wait=5"),
				"another body, no wait": http("POST", "/async", `{"n":2}`, "prefer", "respond-async"),
			}, refused: refusedHTTP, mentions: "method, path, body"},
		{name: "gRPC oneway", topic: "idem-grpc-oneway", first: grpcCall("/example.Oneway/Send", false, "m1", "m2"),
			differs: map[string]func(t *testing.T, r *replica, key string) string{
				"another message": grpcCall("/example.Oneway/Send", false, "m1", "m3"),
				"fewer messages":  grpcCall("/example.Oneway/Send", false, "m1"),
			}, refused: refusedGRPC, mentions: "messages"},
		{name: "gRPC unary", topic: "idem-grpc", replies: "idem-grpc-replies", first: say("one"),
			differs: map[string]func(t *testing.T, r *replica, key string) string{
				"another message":  say("two"),
				"other metadata":   say("one", "x-attempt", "2"),
				"another method":   grpcCall("/example.Echo/Chat", true, "\x0a\x03one"),
				"a second message": grpcCall("/example.Echo/Say", false, "\x0a\x03one", "\x0a\x03one"),
			}, refused: refusedGRPC, mentions: "messages"},
		{name: "gRPC streamed", topic: "idem-grpc", replies: "idem-grpc-replies", first: grpcCall("/example.Echo/Chat", true, "\x0a\x01a", "\x0a\x01b"),
			differs: map[string]func(t *testing.T, r *replica, key string) string{
				"a third message": grpcCall("/example.Echo/Chat", true, "\x0a\x01a", "\x0a\x01b", "\x0a\x01c"),
				"one message":     grpcCall("/example.Echo/Chat", true, "\x0a\x01a"),
				"another second":  grpcCall("/example.Echo/Chat", true, "\x0a\x01a", "\x0a\x01c"),
			}, refused: refusedGRPC, mentions: "messages"},
	}
}

// For every produce shape, an idempotency key reused with a different
// request is refused — 422 problem+json or FAILED_PRECONDITION, naming the
// key — on the replica that wrote the first request and on another one;
// nothing is written and the service is not called; the first request
// repeated still gets its answer from either replica.
func TestIdempotencyKeyReusedForAnotherRequest(t *testing.T) {
	t.Parallel()
	var httpCalls, grpcCalls calls
	e := startEnv(t, idemConfig, withResponders(
		responder.Options{Topic: "idem-sync", Handler: httpCalls.wrap(responder.HTTPEcho())},
		responder.Options{Topic: "idem-async", Handler: httpCalls.wrap(responder.HTTPEcho())},
		responder.Options{Topic: "idem-grpc", Handler: grpcCalls.wrap(responder.GRPCEcho()), DedupKey: responder.GRPCDedupKey},
	))
	a := &replica{base: e.base, h1: e.h1, grpcc: e.grpcConn()}
	b := startReplica(t, e)
	host := strings.TrimPrefix(e.base, "http://")
	served := map[string]*calls{"idem-sync": &httpCalls, "idem-async": &httpCalls, "idem-grpc": &grpcCalls}

	for _, sh := range reuseShapes(host) {
		t.Run(sh.name, func(t *testing.T) {
			key := "reuse-" + strings.ReplaceAll(sh.name, " ", "-")
			// A oneway write is done once acknowledged; a request-reply once
			// its last reply is stored, which its answer says. So after each
			// answer the topics hold what the requests wrote and the service
			// was called with every record.
			state := func() (records, replies, called int64) {
				records = int64(len(e.readTopic(sh.topic)))
				if sh.replies != "" {
					replies, called = int64(len(e.readTopic(sh.replies))), served[sh.topic].n.Load()
				}
				return records, replies, called
			}
			records0, replies0, called0 := state()
			first := sh.first(t, a, key)
			if strings.HasPrefix(first, sh.refused) || strings.HasPrefix(first, "5") {
				t.Fatalf("first request: %s", first)
			}
			records, replies, called := state()
			if records == records0 || sh.replies != "" && (replies == replies0 || called == called0) {
				t.Fatalf("the first request: %d records, %d replies, %d calls of the service", records-records0, replies-replies0, called-called0)
			}

			for what, send := range sh.differs {
				for _, r := range []struct {
					name string
					r    *replica
				}{{"the same replica", a}, {"another replica", b}} {
					got := send(t, r.r, key)
					if !strings.HasPrefix(got, sh.refused) || !strings.Contains(got, "idempotency key") || !strings.Contains(got, key) || !strings.Contains(got, sh.mentions) {
						t.Errorf("%s through %s: %s, want %s naming key %q and saying it differs in %s", what, r.name, got, sh.refused, key, sh.mentions)
					}
					if !strings.Contains(got, "new idempotency key") || sh.refused == "422 " && !strings.Contains(got, `"detail":`) {
						t.Errorf("%s through %s: %s, want a problem whose detail says what to do", what, r.name, got)
					}
				}
			}
			for _, r := range []*replica{a, b} {
				if again := sh.first(t, r, key); again != first {
					t.Errorf("the first request repeated: %s, want its answer %s", again, first)
				}
			}
			if r, p, c := state(); r != records || p != replies || c != called {
				t.Errorf("after the reused keys and the repeats: %d records, %d replies, %d calls more, want none: nothing written, the service not called", r-records, p-replies, c-called)
			}
			if sh.replies == "" {
				return
			}
			// Nothing late either: a request with a new key, answered after
			// anything written before it (one partition, one responder),
			// adds what the first one did and no more.
			if got := sh.first(t, a, key+"-new"); strings.HasPrefix(got, sh.refused) || strings.HasPrefix(got, "5") {
				t.Fatalf("a new key: %s", got)
			}
			if r, p, c := state(); r-records != records-records0 || p-replies != replies-replies0 || c-called != called-called0 {
				t.Errorf("a new key added %d records, %d replies, %d calls; the first request %d, %d, %d",
					r-records, p-replies, c-called, records-records0, replies-replies0, called-called0)
			}
		})
	}
}

// A repeated bidi call gets no reply before it has sent the messages in the
// log: one that waits for a reply first ends after limits.reply-timeout
// with a status saying why, and writes nothing.
func TestIdempotencyKeyBidiReplayWaitsForTheMessages(t *testing.T) {
	t.Parallel()
	e := startEnv(t, strings.Replace(idemConfig, "reply-timeout: 10s", "reply-timeout: 2s", 1), withResponders(
		responder.Options{Topic: "idem-grpc", Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey},
	))
	ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", "bidi-1")
	if got, err := recvAll(sendAll(ctx, t, e.grpcConn(), "/example.Echo/Chat", true, "\x0a\x01a", "\x0a\x01b")); err != nil || len(got) != 2 {
		t.Fatalf("first call: %q %v", got, err)
	}
	written := len(e.readTopic("idem-grpc"))
	st, err := e.grpcConn().NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/example.Echo/Chat", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&rawMessage{b: []byte("\x0a\x01a")}); err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(st) // waits for a reply before sending "b"
	s := status.Convert(err)
	if len(got) != 0 || s.Code() != codes.DeadlineExceeded || !strings.Contains(s.Message(), "repeats one whose 3 records are in topic") {
		t.Errorf("the repeated call, waiting for a reply: %q %v, want DEADLINE_EXCEEDED saying it repeats a call in the log", got, s)
	}
	if n := len(e.readTopic("idem-grpc")); n != written {
		t.Errorf("%d records written by the waiting repeat, want none", n-written)
	}
}
