package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkagrpc"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// gate is a service that counts its calls of Say and, when entered is set,
// holds each until the test lets it go: it tells which calls are in it at
// once. A message "group/n" counts towards its group's calls at once.
type gate struct {
	example.UnimplementedEchoServer
	calls   atomic.Int32
	entered chan string // the message of each call as it enters (nil: calls are not held)
	mu      sync.Mutex
	active  map[string]int           // calls in the service now, by group; "" all
	most    map[string]int           // the highest active reached
	gone    map[string]chan struct{} // closed to let the call of that message go
}

func newGate(held int) *gate {
	g := &gate{active: map[string]int{}, most: map[string]int{}, gone: map[string]chan struct{}{}}
	if held > 0 {
		g.entered = make(chan string, held)
	}
	return g
}

// letGo lets the held call of message msg go.
func (g *gate) letGo(msg string) { close(g.door(msg)) }

func (g *gate) door(msg string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone[msg] == nil {
		g.gone[msg] = make(chan struct{})
	}
	return g.gone[msg]
}

// next is the message of the next call to enter.
func (g *gate) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case m := <-g.entered:
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no call reached the service", what)
		return ""
	}
}

func (g *gate) Say(ctx context.Context, m *example.EchoMessage) (*example.EchoMessage, error) {
	g.calls.Add(1)
	group, _, _ := strings.Cut(m.GetMessage(), "/")
	g.mu.Lock()
	for _, k := range []string{"", group} {
		g.active[k]++
		g.most[k] = max(g.most[k], g.active[k])
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.active[""]--
		g.active[group]--
		g.mu.Unlock()
	}()
	if g.entered != nil {
		g.entered <- m.GetMessage()
		select {
		case <-g.door(m.GetMessage()):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return m, nil
}

func (g *gate) highest(group string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most[group]
}

// sayRecords are the request records of a unary Say, as the grpc-kafka
// binding writes them: the message, then the end record, on partition,
// with the record key given (the binding's with.key) and more headers.
func sayRecords(t *testing.T, cid, key string, partition int32, text string, more ...kafka.Header) []kafka.Message {
	t.Helper()
	b, err := proto.Marshal(&example.EchoMessage{Message: text})
	if err != nil {
		t.Fatal(err)
	}
	hs := append([]kafka.Header{{Key: "gateway:service", Value: []byte("example.Echo")}, {Key: "gateway:method", Value: []byte("Say")},
		{Key: "gateway:reply-to", Value: []byte("svc-responses")}, {Key: "gateway:correlation-id", Value: []byte(cid)}}, more...)
	tp := kafka.TopicPartition{Partition: partition}
	return []kafka.Message{{TopicPartition: tp, Key: []byte(key), Value: b, Headers: hs}, {TopicPartition: tp, Key: []byte(key), Headers: hs}}
}

// A request read again whose reply the reply index evicted for
// limits.reply-index-bytes, so that it is only in the reply topic, is not
// sent to the service again: the worker reads the reply back from Kafka
// (the index kept where it lies) and finds its end record.
func TestKafkaGRPCDoesNotCallAgainAnEvictedReply(t *testing.T) {
	t.Parallel()
	svc := newGate(0)
	cfg := strings.Replace(kafkaGRPCConfig(serveGate(t, svc), closedAddr(t)), "limits: { reply-timeout: 20s }",
		"limits: { reply-timeout: 20s, reply-index-bytes: 16KiB }", 1)
	e := startEnv(t, cfg)
	first := sayRecords(t, "c-evicted", "c-evicted", 0, "answered once")
	e.putBatch("svc-requests", first)
	pollUntil(t, "the answer of c-evicted", func() bool {
		return len(recordsWith(e.readTopic("svc-responses"), "gateway:correlation-id", "c-evicted")) == 2
	})
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("the service was called %d times for one call", n)
	}
	// Committed: the worker is done with the call and forgot it (records
	// of a call in flight would be taken as more of it).
	pollUntil(t, "the call committed", func() bool { return committed(t, e, "svc-requests") == 2 })

	// Replies of other calls, written after it, evict it: it is the least
	// recently written.
	var fill []kafka.Message
	for i := range 40 {
		id := []byte(fmt.Sprintf("c-fill-%d", i))
		fill = append(fill, kafka.Message{Key: id, Value: make([]byte, 1024),
			Headers: []kafka.Header{{Key: "gateway:correlation-id", Value: id}}})
	}
	e.putBatch("svc-responses", fill)
	pollUntil(t, "the reply of c-evicted evicted from the reply index", func() bool {
		return e.gauge("kafka_ext_proc_reply_index_locations") >= 1
	})
	found := labelled(t, e.dev.Processor, "kafka_ext_proc_reply_index_read_backs_total", "result", "found")

	// The same request records again: what the partition's next owner
	// reads after a crash or a rebalance.
	e.putBatch("svc-requests", first)
	end := e.endOffsets("svc-requests")
	pollUntil(t, "the request offsets committed", func() bool { return committed(t, e, "svc-requests") == end })
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("the service was called %d times, want 1: the call whose reply was evicted was made again", n)
	}
	if n := len(recordsWith(e.readTopic("svc-responses"), "gateway:correlation-id", "c-evicted")); n != 2 {
		t.Fatalf("%d reply records for c-evicted, want the 2 written the first time", n)
	}
	if got := e.counter("kafka_ext_proc_kafka_grpc_replayed_calls_total"); got != 1 {
		t.Fatalf("kafka_ext_proc_kafka_grpc_replayed_calls_total = %v, want 1", got)
	}
	if n := labelled(t, e.dev.Processor, "kafka_ext_proc_reply_index_read_backs_total", "result", "found"); n <= found {
		t.Fatalf("no read-back found a reply (%v before, %v after): the answer was not read back from Kafka", found, n)
	}
}

// serveGate serves g on a loopback port.
func serveGate(t *testing.T, g *gate) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	example.RegisterEchoServer(srv, g)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// A call whose idempotency key repeats an earlier one's: the same request
// (the grpc-kafka binding gives it the same correlation id) written again,
// as a second replica writing it at the same instant would, is answered by
// the earlier reply and not sent to the service; another request under the
// same key (another correlation id: here other overrides) is refused
// FAILED_PRECONDITION naming the key, and not sent to the service either.
func TestKafkaGRPCAnswersARepeatedIdempotencyKeyWithoutTheService(t *testing.T) {
	t.Parallel()
	svc := newGate(0)
	e := startEnv(t, kafkaGRPCConfig(serveGate(t, svc), closedAddr(t)))
	ctx := ctxFor(t, 60*time.Second)
	echo := example.NewEchoClient(e.grpcConn())
	keyed := metadata.AppendToOutgoingContext(ctx, "idempotency-key", "order-17")
	if got, err := echo.Say(keyed, &example.EchoMessage{Message: "once"}); err != nil || got.GetMessage() != "once" {
		t.Fatalf("Say: %v, %v", got, err)
	}
	var reqs []*kafka.Message
	var cid string
	for _, m := range e.readTopic("svc-requests") {
		if v, _ := recHeader(m, "gateway:correlation-id"); strings.HasPrefix(v, "order-17-") {
			reqs, cid = append(reqs, m), v
		}
	}
	if len(reqs) != 2 {
		t.Fatalf("%d request records of the keyed call, want its message and its end", len(reqs))
	}
	if _, ok := recHeader(reqs[0], "gateway:fingerprint"); !ok {
		t.Fatal("the keyed call's records carry no gateway:fingerprint")
	}
	pollUntil(t, "the keyed call's end record", func() bool {
		return len(recordsWith(e.readTopic("svc-responses"), "gateway:correlation-id", cid)) == 2
	})
	// The same call again through the processor: answered from the reply.
	if got, err := echo.Say(keyed, &example.EchoMessage{Message: "once"}); err != nil || got.GetMessage() != "once" {
		t.Fatalf("Say repeated: %v, %v", got, err)
	}
	// Committed: the worker is done with the call and forgot it.
	pollUntil(t, "the call committed", func() bool { return committed(t, e, "svc-requests") == 2 })

	again := func(cid string) []kafka.Message {
		out := make([]kafka.Message, len(reqs))
		for i, m := range reqs {
			out[i] = kafka.Message{TopicPartition: kafka.TopicPartition{Partition: m.TopicPartition.Partition}, Key: m.Key, Value: m.Value}
			for _, h := range m.Headers {
				if h.Key == "gateway:correlation-id" {
					h.Value = []byte(cid)
				}
				out[i].Headers = append(out[i].Headers, h)
			}
		}
		return out
	}
	// The same request, written again (a second replica at the same instant).
	e.putBatch("svc-requests", again(cid))
	// Another request under the same key and caller: its correlation id
	// differs, its fingerprint header names the same key's use.
	e.putBatch("svc-requests", again("order-17-another-request"))
	end := e.endOffsets("svc-requests")
	pollUntil(t, "the request offsets committed", func() bool { return committed(t, e, "svc-requests") == end })

	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("the service was called %d times, want 1 for the one request under key order-17", n)
	}
	replies := e.readTopic("svc-responses")
	if n := len(recordsWith(replies, "gateway:correlation-id", cid)); n != 2 {
		t.Fatalf("%d reply records for %s, want the 2 of its one answer", n, cid)
	}
	other := recordsWith(replies, "gateway:correlation-id", "order-17-another-request")
	if len(other) != 1 || other[0].Value != nil {
		t.Fatalf("another request under the key: %d reply records, want one end record", len(other))
	}
	if s, _ := recHeader(other[0], "gateway:status"); s != "9" {
		t.Fatalf("another request under the key: status %s, want 9 (FAILED_PRECONDITION)", s)
	}
	if m, _ := recHeader(other[0], "gateway:message"); !strings.Contains(m, `idempotency key "order-17"`) || !strings.Contains(m, "another request") {
		t.Fatalf("the refusal's message %q does not name the key and say why", m)
	}
	if got := labelled(t, e.dev.Processor, "kafka_ext_proc_kafka_grpc_answered_by_worker_total", "status", "key_reused"); got != 1 {
		t.Fatalf("answered_by_worker_total{status=key_reused} = %v, want 1", got)
	}
	if got := e.counter("kafka_ext_proc_kafka_grpc_replayed_calls_total"); got != 1 {
		t.Fatalf("kafka_ext_proc_kafka_grpc_replayed_calls_total = %v, want 1 (the same request written again)", got)
	}
}

// boundedWorker starts a worker of kafkaGRPCConfig's binding against the
// env's broker, calling the service at addr, with the bounds given.
func boundedWorker(t *testing.T, e *env, addr string, maxCalls, perPartition int) *kafkagrpc.Worker {
	t.Helper()
	full, err := config.Parse("kafka-grpc.yaml", []byte(kafkaGRPCConfig(addr, closedAddr(t))), nil)
	if err != nil {
		t.Fatal(err)
	}
	full = stack.PointAt(full, e.dev.Broker.Addr())
	w, err := kafkagrpc.Start(kafkagrpc.Options{Binding: full.KafkaGRPC[0], Cluster: full.Kafka["kafka0"],
		KafkaTimeout: 5 * time.Second, Silence: 30 * time.Second, MaxCalls: maxCalls, MaxCallsPerPartition: perPartition,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

// The calls of one request partition in flight are bounded by
// max-calls-per-partition, below max-calls: with a bound of 2 and three
// calls held by the service in each of two partitions, two of each are in
// the service and the third of each waits for a place, while the other
// partition's calls go on; then all are answered, and the service never had
// more than two of a partition at once.
func TestKafkaGRPCBoundsTheCallsOfAPartition(t *testing.T) {
	t.Parallel()
	e := startEnv(t, proxyOnly, withTopics(embedded.Topic{Name: "svc-requests", Partitions: 2}))
	svc := newGate(6)
	w := boundedWorker(t, e, serveGate(t, svc), 10, 2)
	pollUntil(t, "the worker to own both partitions", func() bool { return w.Partitions() == 2 })
	var recs []kafka.Message
	for p := range int32(2) {
		for i := range 3 {
			cid := fmt.Sprintf("c-p%d-%d", p, i)
			recs = append(recs, sayRecords(t, cid, cid, p, fmt.Sprintf("p%d/%d", p, i))...)
		}
	}
	e.putBatch("svc-requests", recs)
	first := map[string]bool{}
	for range 4 {
		first[svc.next(t, "four calls, two of each partition")] = true
	}
	if !first["p0/0"] || !first["p0/1"] || !first["p1/0"] || !first["p1/1"] {
		t.Fatalf("in the service first: %v, want the first two of each partition", first)
	}
	pollUntil(t, "the third call of each partition to wait", func() bool { return w.Waiting() == 2 })
	for m := range first {
		svc.letGo(m)
	}
	for range 2 {
		svc.letGo(svc.next(t, "the third call of a partition"))
	}
	pollUntil(t, "the six calls answered", func() bool { return w.Counts().Answered == 6 })
	for _, g := range []string{"p0", "p1"} {
		if got := svc.highest(g); got != 2 {
			t.Fatalf("partition %s had %d calls in the service at once, want the bound, 2", g, got)
		}
	}
	if got := svc.highest(""); got != 4 {
		t.Fatalf("%d calls in the service at once, want 4: the partitions do not hold each other back", got)
	}
}

// Calls of one record key are made one after another, in the order of
// their records: k/1 is held by the service, k/2 and k/3 wait for it though
// there is room, while the call of another key written after them is made.
func TestKafkaGRPCCallsOfOneKeyInRecordOrder(t *testing.T) {
	t.Parallel()
	e := startEnv(t, proxyOnly)
	svc := newGate(4)
	w := boundedWorker(t, e, serveGate(t, svc), 10, 10)
	pollUntil(t, "the worker to own the partition", func() bool { return w.Partitions() == 1 })
	var recs []kafka.Message
	for _, c := range []struct{ cid, key, text string }{
		{"c-k1", "k", "k/1"}, {"c-k2", "k", "k/2"}, {"c-k3", "k", "k/3"}, {"c-other", "other", "other/1"},
	} {
		recs = append(recs, sayRecords(t, c.cid, c.key, 0, c.text)...)
	}
	e.putBatch("svc-requests", recs)
	entered := map[string]bool{}
	for range 2 {
		entered[svc.next(t, "k/1 and other/1")] = true
	}
	if !entered["k/1"] || !entered["other/1"] {
		t.Fatalf("in the service first: %v, want k/1 and other/1", entered)
	}
	pollUntil(t, "k/2 and k/3 to wait for k/1", func() bool { return w.Waiting() == 2 })
	// Each call of key k let go brings the next one of its key, and only it.
	svc.letGo("k/1")
	if m := svc.next(t, "the call after k/1"); m != "k/2" {
		t.Fatalf("after k/1, %s reached the service, want k/2", m)
	}
	if w.Waiting() != 1 {
		t.Fatalf("%d calls waiting with k/2 in the service, want k/3", w.Waiting())
	}
	svc.letGo("k/2")
	if m := svc.next(t, "the call after k/2"); m != "k/3" {
		t.Fatalf("after k/2, %s reached the service, want k/3", m)
	}
	svc.letGo("k/3")
	svc.letGo("other/1")
	if got := svc.highest("k"); got != 1 {
		t.Fatalf("%d calls of key k in the service at once, want 1", got)
	}
	pollUntil(t, "the four calls answered", func() bool { return w.Counts().Answered == 4 })
}
