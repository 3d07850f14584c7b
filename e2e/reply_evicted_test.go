package e2e_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// evictConfig bounds the reply index to 16 KiB, so a few dozen replies
// evict the oldest; the reply timeout is long, so an answer that waited
// for it shows.
const evictConfig = `
bindings:
  kafka0: { type: kafka, kind: client, options: { bootstrap.servers: "localhost:9092" } }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: POST, path: "/ev-sync/{id}" }]
        exit: kafka0
        with: { capability: produce, topic: ev-sync, reply-to: ev-replies }
      - when: [{ method: POST, path: "/ev-async/{id}" }, { method: GET, path: "/ev-async;cid={correlationId}" }]
        exit: kafka0
        with:
          capability: produce
          topic: ev-async
          reply-to: ev-replies
          async: { location: "/ev-async;cid=${correlationId}" }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ method: example.Echo/* }]
        exit: kafka0
        with: { capability: produce, topic: ev-grpc, reply-to: ev-grpc-replies }
limits: { reply-index-bytes: 16KiB, reply-timeout: 20s, kafka-timeout: 5s }
`

// atOnce bounds an answer from a stored reply: far below the reply timeout
// (20s), which an answer that waited for a reply would take.
const atOnce = 5 * time.Second

// evShape is a request shape whose reply a later request asks for again:
// first sends the request (and what it takes to get its reply) and
// returns the answer; again asks for the reply again.
type evShape struct {
	name    string
	topic   string // the request topic
	records int    // records one request writes
	first   func(t *testing.T, r *replica, key string) string
	again   func(t *testing.T, r *replica, key string) string
}

func evShapes(host string) []evShape {
	sync := func(t *testing.T, r *replica, key string) string {
		t.Helper()
		return sendTo(t, r, host, "POST", "/ev-sync/42", `{"n":42}`, "idempotency-key", key, "content-type", "application/json")
	}
	locations := map[string]string{} // key → the async location
	say := func(t *testing.T, r *replica, key string) string {
		t.Helper()
		ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", key)
		resp, err := example.NewEchoClient(r.grpcc).Say(ctx, &example.EchoMessage{Message: "once"})
		return fmt.Sprintf("%q %v", resp.GetMessage(), status.Convert(err))
	}
	chat := func(t *testing.T, r *replica, key string) string {
		t.Helper()
		ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", key)
		st := sendAll(ctx, t, r.grpcc, "/example.Echo/Chat", true, "m1", "m2")
		msgs, err := recvAll(st)
		return fmt.Sprintf("%q %v", msgs, status.Convert(err))
	}
	return []evShape{
		{name: "sync replay", topic: "ev-sync", records: 1, first: sync, again: sync},
		{name: "async follow-up", topic: "ev-async", records: 1,
			first: func(t *testing.T, r *replica, key string) string {
				t.Helper()
				got := sendTo(t, r, host, "POST", "/ev-async/7", `{"n":7}`, "idempotency-key", key, "prefer", "respond-async")
				m := regexp.MustCompile(`^202 location="([^"]+)"`).FindStringSubmatch(got)
				if m == nil {
					t.Fatalf("async request: %s; want 202 with a location", got)
				}
				locations[key] = m[1]
				return sendTo(t, r, host, "GET", m[1], "", "prefer", "wait=10")
			},
			again: func(t *testing.T, r *replica, key string) string {
				t.Helper()
				return sendTo(t, r, host, "GET", locations[key], "") // no wait asked for
			}},
		// An async request replayed with a wait shorter than a read-back
		// (wait=0: the reply only if it is there): the evicted reply is
		// there, in Kafka, and is the answer.
		{name: "async replay", topic: "ev-async", records: 1,
			first: func(t *testing.T, r *replica, key string) string {
				t.Helper()
				return sendTo(t, r, host, "POST", "/ev-async/8", `{"n":8}`, "idempotency-key", key, "prefer", "respond-async, wait=10")
			},
			again: func(t *testing.T, r *replica, key string) string {
				t.Helper()
				return sendTo(t, r, host, "POST", "/ev-async/8", `{"n":8}`, "idempotency-key", key, "prefer", "respond-async, wait=0")
			}},
		{name: "gRPC Say", topic: "ev-grpc", records: 2, first: say, again: say},
		{name: "gRPC Chat", topic: "ev-grpc", records: 3, first: chat, again: chat},
	}
}

// A reply the reply index evicted is the answer of a sync
// replay, an async follow-up and gRPC replays (unary and streamed), at
// once, without writing the request again, on the replica that evicted it
// and on a second replica that evicted it while catching up.
func TestEvictedReplyIsTheAnswer(t *testing.T) {
	t.Parallel()
	e := startEnv(t, evictConfig, withResponders(
		responder.Options{Topic: "ev-sync", Handler: responder.HTTPEcho()},
		responder.Options{Topic: "ev-async", Handler: responder.HTTPEcho()},
		responder.Options{Topic: "ev-grpc", Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey},
	))
	a := &replica{proc: e.dev.Processor, base: e.base, h1: e.h1, grpcc: e.grpcConn()}
	host := strings.TrimPrefix(e.base, "http://")
	shapes := evShapes(host)

	firsts := make([]string, len(shapes))
	for i, sh := range shapes {
		firsts[i] = sh.first(t, a, keyOf(sh))
		if !strings.HasPrefix(firsts[i], "201 ") && !strings.Contains(firsts[i], "code = OK ") {
			t.Fatalf("%s: the first answer is a failure: %s", sh.name, firsts[i])
		}
	}
	evictAll(t, e, a.proc, "first")

	check := func(r *replica, where string) {
		t.Helper()
		for i, sh := range shapes {
			start := time.Now()
			got := sh.again(t, r, keyOf(sh))
			took := time.Since(start)
			if got != firsts[i] {
				t.Errorf("%s, %s: answer\n%s\nwant the stored reply\n%s", sh.name, where, got, firsts[i])
			}
			if took > atOnce {
				t.Errorf("%s, %s: answered after %v; want at once", sh.name, where, took)
			}
			if n := len(recordsWithPrefix(e, sh.topic, keyOf(sh)+"-")); n != sh.records {
				t.Errorf("%s, %s: %d request records, want %d (written once)", sh.name, where, n, sh.records)
			}
		}
	}
	check(a, "the replica that evicted it")
	if n := labelled(t, a.proc, "kafka_ext_proc_reply_index_read_backs_total", "result", "found"); n < float64(len(shapes)) {
		t.Errorf("%v replies read back, want at least %d", n, len(shapes))
	}

	b := startReplica(t, e)
	pollUntil(t, "the second replica ready", func() bool { ready, _ := b.proc.Readiness.Ready(); return ready })
	evictAll(t, e, b.proc, "second")
	check(b, "a second replica")
	if n := labelled(t, b.proc, "kafka_ext_proc_reply_index_read_backs_total", "result", "found"); n < float64(len(shapes)) {
		t.Errorf("second replica: %v replies read back, want at least %d", n, len(shapes))
	}
}

func shapeNamed(t *testing.T, shapes []evShape, name string) evShape {
	t.Helper()
	for _, sh := range shapes {
		if sh.name == name {
			return sh
		}
	}
	t.Fatalf("no shape %q", name)
	return evShape{}
}

func keyOf(sh evShape) string { return "ev-" + strings.ReplaceAll(sh.name, " ", "-") }

// evictAll writes replies of other ids to the reply topic until the
// replica's index evicted every id it held before: they are the least
// recently written, and are evicted first.
func evictAll(t *testing.T, e *env, p *stack.Processor, tag string) {
	t.Helper()
	held := counter(t, p, "kafka_ext_proc_reply_index_entries")
	evicted := counter(t, p, "kafka_ext_proc_reply_index_evicted_total")
	value := []byte(`"` + strings.Repeat("f", 1000) + `"`)
	recs := make([]kafka.Message, 40) // 40 KB: more than the 16 KiB bound
	for i := range recs {
		recs[i] = kafka.Message{Key: []byte(fmt.Sprint(i)), Value: value, Headers: []kafka.Header{
			{Key: "gateway:correlation-id", Value: []byte(fmt.Sprintf("filler-%s-%d", tag, i))},
		}}
	}
	e.putBatch("ev-replies", recs)
	pollUntil(t, "the replies held evicted", func() bool {
		return counter(t, p, "kafka_ext_proc_reply_index_evicted_total")-evicted >= held &&
			counter(t, p, "kafka_ext_proc_reply_index_locations") >= held
	})
}

// labelled is the value of one series of a labelled counter.
func labelled(t *testing.T, p *stack.Processor, name, label, value string) float64 {
	t.Helper()
	mfs, err := p.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

// An evicted reply that its topic no longer holds (deleted
// below its offset) is answered as expired, saying why: 410 for HTTP,
// FAILED_PRECONDITION for gRPC; nothing is written again.
func TestEvictedReplyRemovedFromItsTopicIsExpired(t *testing.T) {
	t.Parallel()
	e, a, sync, say, _ := evictedSyncAndSay(t, "gone")
	for _, topic := range []string{"ev-replies", "ev-grpc-replies"} {
		deleteAll(t, e, topic)
	}

	for _, c := range []struct {
		sh   evShape
		want string
	}{{sync, "410 "}, {say, `"" rpc error: code = FailedPrecondition desc = expired: `}} {
		got := c.sh.again(t, a, keyOf(c.sh))
		if !strings.HasPrefix(got, c.want) || !strings.Contains(got, "removed from topic") || !strings.Contains(got, "by its retention") {
			t.Errorf("%s: %s\nwant %s… saying the reply was removed from its topic by retention", c.sh.name, got, c.want)
		}
		if n := len(recordsWithPrefix(e, c.sh.topic, keyOf(c.sh)+"-")); n != c.sh.records {
			t.Errorf("%s: %d request records, want %d (not written again)", c.sh.name, n, c.sh.records)
		}
	}
	if n := labelled(t, a.proc, "kafka_ext_proc_reply_index_read_backs_total", "result", "expired"); n != 2 {
		t.Errorf("%v read-backs expired, want 2", n)
	}
}

// evictedSyncAndSay starts the evicting configuration with its responders,
// answers a sync request and a gRPC Say once each (firsts, by shape name)
// and evicts their replies from the index (tag names the fillers).
func evictedSyncAndSay(t *testing.T, tag string) (e *env, a *replica, sync, say evShape, firsts map[string]string) {
	t.Helper()
	e = startEnv(t, evictConfig, withResponders(
		responder.Options{Topic: "ev-sync", Handler: responder.HTTPEcho()},
		responder.Options{Topic: "ev-grpc", Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey},
	))
	a = &replica{proc: e.dev.Processor, base: e.base, h1: e.h1, grpcc: e.grpcConn()}
	shapes := evShapes(strings.TrimPrefix(e.base, "http://"))
	sync, say = shapeNamed(t, shapes, "sync replay"), shapeNamed(t, shapes, "gRPC Say")
	firsts = map[string]string{}
	for _, sh := range []evShape{sync, say} {
		firsts[sh.name] = sh.first(t, a, keyOf(sh))
		if !strings.HasPrefix(firsts[sh.name], "201 ") && !strings.Contains(firsts[sh.name], "code = OK ") {
			t.Fatalf("%s: %s", sh.name, firsts[sh.name])
		}
	}
	evictAll(t, e, a.proc, tag)
	return e, a, sync, say, firsts
}

// deleteAll deletes every record of topic (DeleteRecords to the end of
// each partition), as retention would.
func deleteAll(t *testing.T, e *env, topic string) {
	t.Helper()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	md, err := admin.GetMetadata(&topic, false, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetEnd})
	}
	res, err := admin.DeleteRecords(ctxFor(t, 20*time.Second), tps)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil {
			t.Fatal(r.TopicPartition.Error)
		}
	}
}

// At a small scale: with the reply index bounded to 16 KiB,
// 400 orders, then a keyed replay of every one (8 at a time, so reads of
// one partition overlap). Every replay answers its order's reply at once,
// nothing is written twice, most replies are read back from Kafka, and the
// index's bytes stay within the bound throughout.
func TestEvictedRepliesEveryReplayAnswered(t *testing.T) {
	t.Parallel()
	e := startEnv(t, evictConfig, withResponders(responder.Options{Topic: "ev-sync", Handler: responder.HTTPEcho()}))
	a := &replica{proc: e.dev.Processor, base: e.base, h1: e.h1, grpcc: e.grpcConn()}
	host := strings.TrimPrefix(e.base, "http://")
	const orders, parallel, bound = 400, 8, 16 << 10
	order := func(i int) string {
		return sendTo(t, a, host, "POST", fmt.Sprint("/ev-sync/", i), fmt.Sprintf(`{"order":%d}`, i),
			"idempotency-key", fmt.Sprint("soak-", i), "content-type", "application/json")
	}
	overBound := func(when string) {
		if b := counter(t, a.proc, "kafka_ext_proc_reply_index_bytes"); b > bound {
			t.Errorf("%s: the reply index holds %v bytes, over its bound %d", when, b, bound)
		}
	}
	firsts := make([]string, orders)
	inParallel(orders, parallel, func(i int) { firsts[i] = order(i) })
	for i, f := range firsts {
		if !strings.HasPrefix(f, "201 ") || !strings.Contains(f, fmt.Sprintf(`"path":"/ev-sync/%d"`, i)) {
			t.Fatalf("order %d: %s", i, f)
		}
	}
	overBound("after the orders")
	readBefore := labelled(t, a.proc, "kafka_ext_proc_reply_index_read_backs_total", "result", "found")

	start := time.Now()
	again := make([]string, orders)
	for from := 0; from < orders; from += 50 {
		inParallel(50, parallel, func(i int) { again[from+i] = order(from + i) })
		overBound(fmt.Sprint("after replaying order ", from+49))
	}
	took := time.Since(start)
	for i := range again {
		if again[i] != firsts[i] {
			t.Errorf("order %d: replay answered\n%s\nwant\n%s", i, again[i], firsts[i])
		}
	}
	overBound("after the replays")
	if n := len(e.readTopic("ev-sync")); n != orders {
		t.Errorf("%d request records, want %d (each order written once)", n, orders)
	}
	read := labelled(t, a.proc, "kafka_ext_proc_reply_index_read_backs_total", "result", "found") - readBefore
	held := counter(t, a.proc, "kafka_ext_proc_reply_index_entries")
	if read < orders-2*held {
		t.Errorf("%v replies read back for %d replays with %v held: the bound did not evict", read, orders, held)
	}
	t.Logf("%d replays in %v (%v each, %d at a time): %v read back from Kafka; index %v bytes (bound %d), %v ids held, %v located",
		orders, took.Round(time.Millisecond), (took / orders).Round(time.Microsecond), parallel, read,
		counter(t, a.proc, "kafka_ext_proc_reply_index_bytes"), bound, held, counter(t, a.proc, "kafka_ext_proc_reply_index_locations"))
}

// inParallel calls f(0) … f(n-1), k at a time.
func inParallel(n, k int, f func(i int)) {
	next := make(chan int)
	done := make(chan struct{})
	for range k {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	for range k {
		<-done
	}
}

// An evicted reply that Kafka does not give back within the Kafka timeout
// (fetches of the reply topics refused) answers 503 for HTTP and
// UNAVAILABLE for gRPC, saying nothing was written again and to retry;
// once Kafka answers, the same retry gets the stored reply. Nothing is
// written again either time.
func TestEvictedReplyUnreadableIsUnavailable(t *testing.T) {
	t.Parallel()
	e, a, sync, say, firsts := evictedSyncAndSay(t, "unreadable")

	refuse := refuseFetches(t, e, "ev-replies", "ev-grpc-replies")
	for _, c := range []struct {
		sh   evShape
		want string
	}{{sync, "503 "}, {say, `"" rpc error: code = Unavailable desc = `}} {
		got := c.sh.again(t, a, keyOf(c.sh))
		if !strings.HasPrefix(got, c.want) || !strings.Contains(got, "could not be read back") || !strings.Contains(got, "nothing was written again") {
			t.Errorf("%s while Kafka refuses: %s\nwant %s… saying the reply could not be read back and nothing was written again", c.sh.name, got, c.want)
		}
	}
	if n := labelled(t, a.proc, "kafka_ext_proc_reply_index_read_backs_total", "result", "failed"); n < 2 {
		t.Errorf("%v read-backs failed, want 2", n)
	}
	refuse.Store(false)

	for _, sh := range []evShape{sync, say} {
		if got := sh.again(t, a, keyOf(sh)); got != firsts[sh.name] {
			t.Errorf("%s once Kafka answers: %s\nwant the stored reply %s", sh.name, got, firsts[sh.name])
		}
		if n := len(recordsWithPrefix(e, sh.topic, keyOf(sh)+"-")); n != sh.records {
			t.Errorf("%s: %d request records, want %d (not written again)", sh.name, n, sh.records)
		}
	}
}

// refuseFetches makes the broker refuse fetches of the named topics (by
// name or, for the fetch versions that carry them, by topic id) while the
// returned switch is on; other fetches are served.
func refuseFetches(t *testing.T, e *env, topics ...string) *atomic.Bool {
	t.Helper()
	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	res, err := admin.DescribeTopics(ctxFor(t, 20*time.Second), kafka.NewTopicCollectionOfTopicNames(topics))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	ids := map[[16]byte]bool{}
	for _, d := range res.TopicDescriptions {
		if d.Error.Code() != kafka.ErrNoError {
			t.Fatalf("describing %s: %v", d.Name, d.Error)
		}
		names[d.Name] = true
		var id [16]byte
		binary.BigEndian.PutUint64(id[:8], uint64(d.TopicID.GetMostSignificantBits()))
		binary.BigEndian.PutUint64(id[8:], uint64(d.TopicID.GetLeastSignificantBits()))
		ids[id] = true
	}
	on := new(atomic.Bool)
	on.Store(true)
	cluster := e.dev.Broker.Cluster()
	cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			if names[tp.Topic] || ids[tp.TopicID] {
				return nil, errors.New("fetches of the reply topics refused by the test"), true
			}
		}
		return nil, nil, false
	})
	return on
}
