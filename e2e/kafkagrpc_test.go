package e2e_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/testpki"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkagrpc"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// echoService is a real gRPC service behind Kafka: the kafka-grpc binding
// calls it for the records the grpc-kafka route writes.
type echoService struct {
	example.UnimplementedEchoServer
	// slow, when set, holds Say "slow": it receives on entered, then waits
	// for release.
	entered, release chan struct{}
	// active counts the calls of Say in the service now; most is the
	// highest it reached.
	active, most *atomic.Int32
}

func (s echoService) Say(ctx context.Context, m *example.EchoMessage) (*example.EchoMessage, error) {
	if s.active != nil {
		n := s.active.Add(1)
		defer s.active.Add(-1)
		for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
		}
	}
	if m.GetMessage() == "slow" && s.entered != nil {
		s.entered <- struct{}{}
		<-s.release
	}
	if m.GetMessage() == "missing" {
		return nil, status.Error(codes.NotFound, "nothing is called missing")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-served-by", "echo-service", "tenant", strings.Join(md.Get("tenant"), ",")))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-calls", "1"))
	return &example.EchoMessage{Message: m.GetMessage()}, nil
}

// Expand streams the words of the message, one a message.
func (echoService) Expand(m *example.EchoMessage, st grpc.ServerStreamingServer[example.EchoMessage]) error {
	for _, w := range strings.Fields(m.GetMessage()) {
		if err := st.Send(&example.EchoMessage{Message: w}); err != nil {
			return err
		}
	}
	return nil
}

// Collect answers the messages it received, joined by spaces.
func (echoService) Collect(st grpc.ClientStreamingServer[example.EchoMessage, example.EchoMessage]) error {
	var words []string
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&example.EchoMessage{Message: strings.Join(words, " ")})
		}
		if err != nil {
			return err
		}
		words = append(words, m.GetMessage())
	}
}

// Chat echoes each message as it arrives.
func (echoService) Chat(st grpc.BidiStreamingServer[example.EchoMessage, example.EchoMessage]) error {
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := st.Send(m); err != nil {
			return err
		}
	}
}

// startEchoService serves echoService on a loopback port.
func startEchoService(t *testing.T) string {
	t.Helper()
	return serveEcho(t, echoService{})
}

func serveEcho(t *testing.T, svc echoService) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	example.RegisterEchoServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// kafkaGRPCConfig routes example.Echo, example.Nowhere and example.Down
// through Kafka: the kafka-grpc binding answers example.Echo with the
// service at echo, has no route for example.Nowhere, and sends example.Down
// to down, where nothing listens.
func kafkaGRPCConfig(echo, down string) string {
	return `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: example.Echo }, { service: example.Nowhere }, { service: example.Down }]
        exit: kafka0
        with: { capability: produce, topic: svc-requests, reply-to: svc-responses }
  echo-service:
    type: kafka-grpc
    kind: remote_server
    routes:
      - when: [{ topic: svc-requests, reply-to: svc-responses, method: example.Echo/* }]
        exit: kafka0
        with: { scheme: http, authority: "` + echo + `" }
      - when: [{ topic: svc-requests, reply-to: svc-responses, method: example.Down/* }]
        exit: kafka0
        with: { scheme: http, authority: "` + down + `" }
limits: { reply-timeout: 20s }
`
}

// gRPC client → emulator → processor (grpc-kafka) → Kafka → kafka-grpc →
// a real gRPC service → Kafka → client: all four call shapes, the
// service's status, response metadata and trailers, and the reply records
// as they are in the reply topic.
func TestKafkaGRPCCallsTheService(t *testing.T) {
	t.Parallel()
	e := startEnv(t, kafkaGRPCConfig(startEchoService(t), closedAddr(t)))
	ctx := ctxFor(t, 60*time.Second)
	echo := example.NewEchoClient(e.grpcConn())

	var header, trailer metadata.MD
	got, err := echo.Say(metadata.AppendToOutgoingContext(ctx, "tenant", "acme"), &example.EchoMessage{Message: "hello"},
		grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil || got.GetMessage() != "hello" {
		t.Fatalf("Say: %v, %v", got, err)
	}
	if header.Get("x-served-by")[0] != "echo-service" || strings.Join(header.Get("tenant"), ",") != "acme" ||
		strings.Join(trailer.Get("x-calls"), ",") != "1" {
		t.Fatalf("header %v, trailer %v: want the service's x-served-by, the caller's tenant passed on, and x-calls", header, trailer)
	}

	_, err = echo.Say(ctx, &example.EchoMessage{Message: "missing"})
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "nothing is called missing" {
		t.Fatalf("Say missing: %v, want the service's NOT_FOUND and message", err)
	}

	ex, err := echo.Expand(ctx, &example.EchoMessage{Message: "a b c"})
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for {
		m, err := ex.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Expand: %v", err)
		}
		words = append(words, m.GetMessage())
	}
	if strings.Join(words, ",") != "a,b,c" {
		t.Fatalf("Expand: %q", words)
	}

	col, err := echo.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"x", "y"} {
		if err := col.Send(&example.EchoMessage{Message: w}); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := col.CloseAndRecv(); err != nil || m.GetMessage() != "x y" {
		t.Fatalf("Collect: %v, %v", m, err)
	}

	chat, err := echo.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each echo comes back before the next message is sent: the call is
	// made as the records arrive, not once the call is complete.
	for _, w := range []string{"one", "two"} {
		if err := chat.Send(&example.EchoMessage{Message: w}); err != nil {
			t.Fatal(err)
		}
		if m, err := chat.Recv(); err != nil || m.GetMessage() != w {
			t.Fatalf("Chat %s: %v, %v", w, m, err)
		}
	}
	if err := chat.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := chat.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Chat end: %v", err)
	}

	// The reply records of Say "hello": one message and the end record,
	// keyed and headed by the request's correlation id.
	var cid string
	for _, m := range e.readTopic("svc-requests") {
		var em example.EchoMessage
		if m.Value != nil && proto.Unmarshal(m.Value, &em) == nil && em.GetMessage() == "hello" {
			cid, _ = recHeader(m, "gateway:correlation-id")
		}
	}
	if cid == "" {
		t.Fatal("no request record of Say hello")
	}
	replies := recordsWith(e.readTopic("svc-responses"), "gateway:correlation-id", cid)
	if len(replies) != 2 {
		t.Fatalf("%d reply records for %s, want the message and the end record", len(replies), cid)
	}
	if string(replies[0].Key) != cid || replies[0].Value == nil {
		t.Fatalf("first reply: key %q value %v", replies[0].Key, replies[0].Value)
	}
	if v, _ := recHeader(replies[0], "meta:x-served-by"); v != "echo-service" {
		t.Fatalf("first reply: meta:x-served-by %q", v)
	}
	if s, _ := recHeader(replies[1], "gateway:status"); replies[1].Value != nil || s != "0" {
		t.Fatalf("end record: value %v, gateway:status %q", replies[1].Value, s)
	}
	if v, _ := recHeader(replies[1], "meta:x-calls"); v != "1" {
		t.Fatalf("end record: meta:x-calls %q", v)
	}
	// Every request record is committed once its call's replies are in.
	end := e.endOffsets("svc-requests")
	pollUntil(t, "the request offsets committed", func() bool { return committed(t, e, "svc-requests") == end })
}

// A method the kafka-grpc binding has no route for is answered
// UNIMPLEMENTED; a service nothing listens on is retried, then answered
// UNAVAILABLE: the caller gets a status, not a hang.
func TestKafkaGRPCFaults(t *testing.T) {
	t.Parallel()
	e := startEnv(t, kafkaGRPCConfig(startEchoService(t), closedAddr(t)))
	ctx := ctxFor(t, 60*time.Second)
	call := func(method string) error {
		var out rawMessage
		return e.grpcConn().Invoke(ctx, method, &rawMessage{b: []byte{0x0a, 0x01, 'x'}}, &out, grpc.ForceCodecV2(rawCodec{}))
	}
	err := call("/example.Nowhere/Call")
	if st := status.Convert(err); st.Code() != codes.Unimplemented ||
		st.Message() != `kafka-grpc binding "echo-service" has no route for example.Nowhere/Call on topic svc-requests` {
		t.Fatalf("unknown method: %v", err)
	}
	err = call("/example.Down/Call")
	if st := status.Convert(err); st.Code() != codes.Unavailable ||
		!strings.Contains(st.Message(), "unavailable after 5 attempts") {
		t.Fatalf("service down: %v, want UNAVAILABLE after 5 attempts", err)
	}
	end := e.endOffsets("svc-requests")
	pollUntil(t, "the request offsets committed", func() bool { return committed(t, e, "svc-requests") == end })
	if got := e.counter("kafka_ext_proc_kafka_grpc_answered_by_worker_total"); got != 2 {
		t.Fatalf("kafka_ext_proc_kafka_grpc_answered_by_worker_total = %v, want 2 (one unimplemented, one unavailable)", got)
	}
	if got := e.counter("kafka_ext_proc_kafka_grpc_calls_total"); got != 2 {
		t.Fatalf("kafka_ext_proc_kafka_grpc_calls_total = %v, want the 2 calls answered", got)
	}
}

// committed is the sum of the kafka-grpc group's committed offsets on topic.
func committed(t *testing.T, e *env, topic string) int64 {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(),
		"group.id": "kafka-ext-proc.kafka-grpc.echo-service", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID})
	}
	got, err := c.Committed(tps, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, tp := range got {
		if tp.Offset >= 0 {
			sum += int64(tp.Offset)
		}
	}
	return sum
}

// proxyOnly routes example.Echo to Kafka and runs no kafka-grpc binding.
const proxyOnly = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ service: example.Echo }]
        exit: kafka0
        with: { capability: produce, topic: svc-requests, reply-to: svc-responses }
limits: { reply-timeout: 20s }
`

// workerStarter starts kafka-grpc workers of kafkaGRPCConfig's binding,
// calling the service at echo, against the env's broker: replicas apart
// from the env's processor (which runs none with proxyOnly).
func workerStarter(t *testing.T, e *env, echo string, maxCalls ...int) func() *kafkagrpc.Worker {
	full, err := config.Parse("kafka-grpc.yaml", []byte(kafkaGRPCConfig(echo, closedAddr(t))), nil)
	if err != nil {
		t.Fatal(err)
	}
	full = stack.PointAt(full, e.dev.Broker.Addr())
	return func() *kafkagrpc.Worker {
		w, err := kafkagrpc.Start(kafkagrpc.Options{Binding: full.KafkaGRPC[0], Cluster: full.Kafka["kafka0"],
			KafkaTimeout: 5 * time.Second, Silence: 20 * time.Second, MaxCalls: append(maxCalls, 0)[0],
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
}

// Two workers of one binding share the request topic's partitions (one
// consumer group); when one stops, its partitions move to the other and no
// request goes unanswered.
func TestKafkaGRPCReplicasSharePartitions(t *testing.T) {
	t.Parallel()
	e := startEnv(t, proxyOnly, withTopics(embedded.Topic{Name: "svc-requests", Partitions: 4}))
	start := workerStarter(t, e, startEchoService(t))
	a, b := start(), start()
	t.Cleanup(func() { a.Close(context.Background()) })
	pollUntil(t, "the group to split the partitions", func() bool {
		return a.Partitions() > 0 && b.Partitions() > 0 && a.Partitions()+b.Partitions() == 4
	})

	echo := example.NewEchoClient(e.grpcConn())
	ctx := ctxFor(t, 60*time.Second)
	say := func(n int, prefix string) {
		for i := range n {
			msg := fmt.Sprintf("%s-%d", prefix, i)
			if got, err := echo.Say(ctx, &example.EchoMessage{Message: msg}); err != nil || got.GetMessage() != msg {
				t.Fatalf("Say %s: %v, %v", msg, got, err)
			}
		}
	}
	// 20 calls with random correlation ids, keyed by them: each worker's two
	// partitions get some (all 20 in two partitions: about 1 in a million).
	say(20, "both")
	// A worker counts a call once its end record is acknowledged, which
	// may be just after the caller has the answer.
	pollUntil(t, "both workers to count the calls they answered", func() bool {
		return a.Counts().Answered > 0 && b.Counts().Answered > 0 && a.Counts().Answered+b.Counts().Answered >= 20
	})

	drain, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.Close(drain)
	pollUntil(t, "b's partitions to move to a", func() bool { return a.Partitions() == 4 })
	before := a.Counts().Answered
	say(20, "after")
	pollUntil(t, "a to count the 20 calls after b stopped", func() bool { return a.Counts().Answered-before >= 20 })
	end := e.endOffsets("svc-requests")
	pollUntil(t, "every request offset committed", func() bool { return committed(t, e, "svc-requests") == end })
}

// Records the worker cannot answer are skipped and committed: one without a
// correlation id, one whose reply-to no route answers on. A record written
// twice (the same fingerprint) is sent to the service once. A call whose
// end record never comes is answered DEADLINE_EXCEEDED after
// limits.reply-timeout of silence, and then committed.
func TestKafkaGRPCSkipsDeduplicatesAndEndsSilentCalls(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(kafkaGRPCConfig(startEchoService(t), closedAddr(t)), "reply-timeout: 20s", "reply-timeout: 2s", 1)
	// elsewhere exists, so that a reply written there would be found.
	e := startEnv(t, cfg, withTopics(embedded.Topic{Name: "elsewhere", Partitions: 1}))
	msg := func(s string) []byte {
		b, err := proto.Marshal(&example.EchoMessage{Message: s})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rec := func(cid, replyTo, fingerprint string, value []byte) kafka.Message {
		hs := []kafka.Header{{Key: "gateway:service", Value: []byte("example.Echo")}, {Key: "gateway:method", Value: []byte("Collect")},
			{Key: "gateway:reply-to", Value: []byte(replyTo)}}
		if cid != "" {
			hs = append(hs, kafka.Header{Key: "gateway:correlation-id", Value: []byte(cid)})
		}
		if fingerprint != "" {
			hs = append(hs, kafka.Header{Key: "gateway:fingerprint", Value: []byte(fingerprint)})
		}
		return kafka.Message{TopicPartition: kafka.TopicPartition{Partition: 0}, Key: []byte(cid), Value: value, Headers: hs}
	}
	e.putBatch("svc-requests", []kafka.Message{
		rec("", "svc-responses", "", msg("no id")),
		rec("c-elsewhere", "elsewhere", "", msg("no route answers there")),
		rec("c-dup", "svc-responses", "f1", msg("x")),
		rec("c-dup", "svc-responses", "f1", msg("x")), // the same record, written twice
		rec("c-dup", "svc-responses", "f2", msg("y")),
		rec("c-dup", "svc-responses", "f3", nil),
		rec("c-silent", "svc-responses", "", msg("and then nothing")),
	})
	var dup, silent []*kafka.Message
	pollUntil(t, "the answers of c-dup and c-silent", func() bool {
		all := e.readTopic("svc-responses")
		dup, silent = recordsWith(all, "gateway:correlation-id", "c-dup"), recordsWith(all, "gateway:correlation-id", "c-silent")
		return len(dup) == 2 && len(silent) == 1
	})
	var got example.EchoMessage
	if err := proto.Unmarshal(dup[0].Value, &got); err != nil || got.GetMessage() != "x y" {
		t.Fatalf("c-dup: %q, %v; want \"x y\": the record written twice sent once", got.GetMessage(), err)
	}
	if s, _ := recHeader(dup[1], "gateway:status"); s != "0" || dup[1].Value != nil {
		t.Fatalf("c-dup end record: status %q", s)
	}
	if s, _ := recHeader(silent[0], "gateway:status"); s != "4" || silent[0].Value != nil {
		t.Fatalf("c-silent: status %q, want 4 (DEADLINE_EXCEEDED) on an end record", s)
	}
	if m, _ := recHeader(silent[0], "gateway:message"); !strings.Contains(m, "limits.reply-timeout") {
		t.Fatalf("c-silent: message %q", m)
	}
	if n := len(recordsWith(e.readTopic("elsewhere"), "gateway:correlation-id", "c-elsewhere")); n != 0 {
		t.Fatalf("%d records written to a reply-to no route names", n)
	}
	end := e.endOffsets("svc-requests")
	pollUntil(t, "every request offset committed", func() bool { return committed(t, e, "svc-requests") == end })
	if got := e.counter("kafka_ext_proc_kafka_grpc_skipped_records_total"); got != 2 {
		t.Fatalf("kafka_ext_proc_kafka_grpc_skipped_records_total = %v, want 2", got)
	}
	if got := e.gauge("kafka_ext_proc_kafka_grpc_partitions"); got != 1 {
		t.Fatalf("kafka_ext_proc_kafka_grpc_partitions = %v, want the request topic's one partition", got)
	}
}

// A worker that stops drains: the call in flight is answered and committed
// before it leaves the group.
func TestKafkaGRPCDrainAnswersTheCallInFlight(t *testing.T) {
	t.Parallel()
	e := startEnv(t, proxyOnly)
	svc := echoService{entered: make(chan struct{}), release: make(chan struct{})}
	w := workerStarter(t, e, serveEcho(t, svc))()
	ctx := ctxFor(t, 60*time.Second)
	answer := make(chan error, 1)
	go func() {
		got, err := example.NewEchoClient(e.grpcConn()).Say(ctx, &example.EchoMessage{Message: "slow"})
		if err == nil && got.GetMessage() != "slow" {
			err = fmt.Errorf("answer %q", got.GetMessage())
		}
		answer <- err
	}()
	<-svc.entered // the call is in the service
	closed := make(chan struct{})
	go func() {
		drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w.Close(drain)
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("the worker stopped with a call in flight")
	case err := <-answer:
		t.Fatalf("answered before the service: %v", err)
	default:
	}
	close(svc.release)
	if err := <-answer; err != nil {
		t.Fatalf("the call in flight during the drain: %v", err)
	}
	<-closed
	if w.Counts().Answered != 1 {
		t.Fatalf("answered %d", w.Counts().Answered)
	}
	end := e.endOffsets("svc-requests")
	pollUntil(t, "the request offsets committed", func() bool { return committed(t, e, "svc-requests") == end })
}

// A call read again (after a crash or a rebalance) whose end record is
// already in the reply topic is not made again: the reply index knows.
func TestKafkaGRPCDoesNotCallAgainWhatWasAnswered(t *testing.T) {
	t.Parallel()
	e := startEnv(t, kafkaGRPCConfig(startEchoService(t), closedAddr(t)))
	say, err := proto.Marshal(&example.EchoMessage{Message: "answered before"})
	if err != nil {
		t.Fatal(err)
	}
	cid := []byte("c-done")
	idh := kafka.Header{Key: "gateway:correlation-id", Value: cid}
	e.putBatch("svc-responses", []kafka.Message{
		{Key: cid, Value: say, Headers: []kafka.Header{idh}},
		{Key: cid, Headers: []kafka.Header{idh, {Key: "gateway:status", Value: []byte("0")}}},
	})
	pollUntil(t, "the reply index to hold the answer", func() bool { return e.gauge("kafka_ext_proc_reply_index_entries") >= 1 })
	hs := []kafka.Header{idh, {Key: "gateway:service", Value: []byte("example.Echo")}, {Key: "gateway:method", Value: []byte("Say")},
		{Key: "gateway:reply-to", Value: []byte("svc-responses")}}
	e.putBatch("svc-requests", []kafka.Message{{Key: cid, Value: say, Headers: hs}, {Key: cid, Headers: hs}})

	end := e.endOffsets("svc-requests")
	pollUntil(t, "the request offsets committed", func() bool { return committed(t, e, "svc-requests") == end })
	if n := len(recordsWith(e.readTopic("svc-responses"), "gateway:correlation-id", "c-done")); n != 2 {
		t.Fatalf("%d reply records for c-done, want the 2 written before: the call was made again", n)
	}
	if got := e.counter("kafka_ext_proc_kafka_grpc_replayed_calls_total"); got != 1 {
		t.Fatalf("kafka_ext_proc_kafka_grpc_replayed_calls_total = %v, want 1", got)
	}
}

// The calls made to the service at a time are bounded: with MaxCalls 1 a
// second call waits for the first to finish, and both are answered.
func TestKafkaGRPCBoundsTheCallsInFlight(t *testing.T) {
	t.Parallel()
	e := startEnv(t, proxyOnly)
	svc := echoService{entered: make(chan struct{}, 2), release: make(chan struct{}), active: new(atomic.Int32), most: new(atomic.Int32)}
	w := workerStarter(t, e, serveEcho(t, svc), 1)()
	t.Cleanup(func() { w.Close(context.Background()) })
	ctx := ctxFor(t, 60*time.Second)
	answers := make(chan error, 2)
	call := func() {
		got, err := example.NewEchoClient(e.grpcConn()).Say(ctx, &example.EchoMessage{Message: "slow"})
		if err == nil && got.GetMessage() != "slow" {
			err = fmt.Errorf("answer %q", got.GetMessage())
		}
		answers <- err
	}
	go call()
	<-svc.entered // the first call holds the one slot
	go call()
	pollUntil(t, "the second call to wait for a slot", func() bool { return w.Waiting() == 1 })
	close(svc.release)
	for range 2 {
		if err := <-answers; err != nil {
			t.Fatal(err)
		}
	}
	if got := svc.most.Load(); got != 1 {
		t.Fatalf("the service had %d calls at once, want 1", got)
	}
}

// A route's deadline reaches the service as grpc-timeout and ends a call
// that outlasts it DEADLINE_EXCEEDED, on its end record.
func TestKafkaGRPCRouteDeadline(t *testing.T) {
	t.Parallel()
	svc := echoService{entered: make(chan struct{}, 1), release: make(chan struct{})}
	echo := serveEcho(t, svc)
	t.Cleanup(func() { close(svc.release) })
	cfg := strings.Replace(kafkaGRPCConfig(echo, closedAddr(t)), `authority: "`+echo+`" }`, `authority: "`+echo+`", deadline: 300ms }`, 1)
	e := startEnv(t, cfg)
	_, err := example.NewEchoClient(e.grpcConn()).Say(ctxFor(t, 60*time.Second), &example.EchoMessage{Message: "slow"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call past the route's deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	<-svc.entered // the service was called, and gave up with the caller
	var ends []*kafka.Message
	for _, m := range e.readTopic("svc-responses") {
		if s, _ := recHeader(m, "gateway:status"); m.Value == nil && s == "4" {
			ends = append(ends, m)
		}
	}
	if len(ends) != 1 {
		t.Fatalf("%d end records with status 4, want 1", len(ends))
	}
}

// scheme https calls the service over TLS, here mTLS: the CA and the
// client certificate come from the route's with.tls. Without the client
// certificate the service refuses the handshake, and the caller gets
// UNAVAILABLE.
func TestKafkaGRPCCallsTheServiceOverMTLS(t *testing.T) {
	t.Parallel()
	ca, err := testpki.NewCA("kafka-grpc test CA")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Server("echo-service")
	if err != nil {
		t.Fatal(err)
	}
	clientLeaf, err := ca.Client("kafka-ext-proc")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, err := ca.Write(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := clientLeaf.Write(dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey, err := server.Write(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), MinVersion: tls.VersionTLS12})))
	example.RegisterEchoServer(srv, echoService{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()

	withTLS := func(files string) string {
		return strings.Replace(kafkaGRPCConfig(addr, closedAddr(t)), `{ scheme: http, authority: "`+addr+`" }`,
			`{ scheme: https, authority: "`+addr+`", tls: { `+files+` } }`, 1)
	}
	e := startEnv(t, withTLS("ca-file: "+caFile+", cert-file: "+certFile+", key-file: "+keyFile))
	ctx := ctxFor(t, 60*time.Second)
	got, err := example.NewEchoClient(e.grpcConn()).Say(ctx, &example.EchoMessage{Message: "over mTLS"})
	if err != nil || got.GetMessage() != "over mTLS" {
		t.Fatalf("Say over mTLS: %v, %v", got, err)
	}

	noCert := startEnv(t, withTLS("ca-file: "+caFile))
	_, err = example.NewEchoClient(noCert.grpcConn()).Say(ctx, &example.EchoMessage{Message: "no client certificate"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("without a client certificate: %v, want UNAVAILABLE", err)
	}
}

// A processor whose file has a kafka-grpc binding and no proxy runs the
// worker alone: the halves of request-reply can run as two serve
// processes, each with its own file.
func TestKafkaGRPCRunsWithoutAProxy(t *testing.T) {
	t.Parallel()
	echo := startEchoService(t)
	e := startEnv(t, `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  echo-service:
    type: kafka-grpc
    kind: remote_server
    routes:
      - when: [{ topic: svc-requests, reply-to: svc-responses, method: example.Echo/* }]
        exit: kafka0
        with: { scheme: http, authority: "`+echo+`" }
`, withTopics(embedded.Topic{Name: "svc-requests", Partitions: 1}, embedded.Topic{Name: "svc-responses", Partitions: 1}))
	say, err := proto.Marshal(&example.EchoMessage{Message: "alone"})
	if err != nil {
		t.Fatal(err)
	}
	hs := []kafka.Header{{Key: "gateway:correlation-id", Value: []byte("c-alone")}, {Key: "gateway:service", Value: []byte("example.Echo")},
		{Key: "gateway:method", Value: []byte("Say")}, {Key: "gateway:reply-to", Value: []byte("svc-responses")}}
	e.putBatch("svc-requests", []kafka.Message{{Key: []byte("c-alone"), Value: say, Headers: hs}, {Key: []byte("c-alone"), Headers: hs}})
	var replies []*kafka.Message
	pollUntil(t, "the reply and the end record", func() bool {
		replies = recordsWith(e.readTopic("svc-responses"), "gateway:correlation-id", "c-alone")
		return len(replies) == 2
	})
	var got example.EchoMessage
	if err := proto.Unmarshal(replies[0].Value, &got); err != nil || got.GetMessage() != "alone" {
		t.Fatalf("reply %q, %v", got.GetMessage(), err)
	}
}
