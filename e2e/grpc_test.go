package e2e_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/proto/example"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// grpcConfig has a produce route per call shape under test and fetch routes
// over log and compacted topics. The produce routes share one reply topic:
// correlation ids keep their replies apart (and the reply index assigns one
// topic, see the report on concurrent IncrementalAssign).
const grpcConfig = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  grpc0:
    type: grpc-kafka
    kind: proxy
    routes:
      - when: [{ method: example.Echo/* }]
        exit: kafka0
        with: { capability: produce, topic: echo-requests, reply-to: replies, acks: leader_only, overrides: { x-origin: e2e } }
      - when: [{ service: example.Status }]
        exit: kafka0
        with: { capability: produce, topic: status-requests, reply-to: replies }
      - when: [{ service: example.Silent }]
        exit: kafka0
        with: { capability: produce, topic: silent-requests, reply-to: replies }
      - when: [{ service: example.Oneway }]
        exit: kafka0
        with: { capability: produce, topic: oneway-requests, key: "${idempotencyKey}", overrides: { x-kind: oneway } }
      - when: [{ service: example.Fanout }]
        exit: kafka0
        with: { capability: fetch, topic: fanout }
      - when: [{ method: example.Multi/Subscribe }]
        exit: kafka0
        with: { capability: fetch, topic: multi }
      - when: [{ method: example.Snapshots/Subscribe }]
        exit: kafka0
        with: { capability: fetch, topic: snapshots }
      - when: [{ method: example.Filtered/Subscribe }]
        exit: kafka0
        with: { capability: fetch, topic: multi, filters: [{ key: k1 }, { headers: { kind: special } }] }
      - when: [{ method: example.Tenant/Subscribe, metadata: { tenant: acme } }]
        exit: kafka0
        with: { capability: fetch, topic: fanout }
limits: { reply-timeout: 2s }
`

func startGRPC(t *testing.T, opts ...func(*stack.DevOptions)) (*env, *grpckafka.Handler) {
	t.Helper()
	var h *grpckafka.Handler
	all := []func(*stack.DevOptions){
		grpcHandlerOf(&h),
		withTopics(
			embedded.Topic{Name: "fanout", Partitions: 1},
			embedded.Topic{Name: "multi", Partitions: 3},
			embedded.Topic{Name: "snapshots", Partitions: 2, Compact: true},
		),
		withResponders(
			responder.Options{Topic: "echo-requests", Handler: responder.GRPCEcho(), DedupKey: responder.GRPCDedupKey},
			responder.Options{Topic: "status-requests", Handler: statusResponder(), DedupKey: responder.GRPCDedupKey},
		),
	}
	e := startEnv(t, grpcConfig, append(all, opts...)...)
	return e, h
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The exact bytes of the reliability field for {p0:1}; the
// shipped Fanout proto reads it as an unknown field; `meta:*` headers of the
// first history record are the response metadata.
func TestGRPCFetchReliabilityFieldBytes(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	ev, _ := proto.Marshal(&example.Event{Id: "1", Text: "hello"})
	e.put("fanout", 0, "k0", ev, "meta:tenant", "acme", "other", "x")

	st := subscribe(ctxFor(t, 20*time.Second), t, e.grpcConn(), "/example.Fanout/Subscribe")
	md, _ := st.Header()
	if got := md.Get("tenant"); len(got) != 1 || got[0] != "acme" || len(md.Get("other")) != 0 {
		t.Fatalf("response metadata: tenant %q, other %q", md.Get("tenant"), md.Get("other"))
	}
	var m rawMessage
	if err := st.RecvMsg(&m); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), ev...), 0xFA, 0xFF, 0x0F, 0x04, 0x01, 0x02, 0x00, 0x02)
	if !bytes.Equal(m.b, want) {
		t.Fatalf("message % X\nwant    % X", m.b, want)
	}

	typed, err := example.NewFanoutClient(e.grpcConn()).Subscribe(ctxFor(t, 20*time.Second), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := typed.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got.GetText() != "hello" || hex.EncodeToString(got.ProtoReflect().GetUnknown()) != "faff0f0401020002" {
		t.Fatalf("typed client: %v, unknown % X", got, got.ProtoReflect().GetUnknown())
	}
}

// Resume with every encoding of the id delivers exactly the
// records after it (a record written afterwards comes next, nothing
// before it); an id beyond the end of the log (of a deleted generation) is
// refused OUT_OF_RANGE, and the id it carries reads the whole log again.
func TestGRPCFetchResumeEveryEncoding(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	var recs []kafka.Message
	for i := 0; i < 30; i++ {
		recs = append(recs, kafka.Message{TopicPartition: kafka.TopicPartition{Partition: int32(i % 3)}, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("r%02d", i))})
	}
	e.putBatch("multi", recs)
	ctx := ctxFor(t, 60*time.Second)
	all := receive(t, subscribe(ctx, t, e.grpcConn(), "/example.Multi/Subscribe"), 30, 32767)
	checkPerPartition(t, all, nil)

	sentinel := 0
	for _, cut := range []int{0, 13, 29} {
		for name, md := range idEncodings(all[cut].id) {
			st := subscribe(ctx, t, e.grpcConn(), "/example.Multi/Subscribe", md...)
			rest := receive(t, st, len(all)-cut-1, 32767)
			if !samePerPartition(rest, all[cut+1:]) {
				t.Fatalf("cut %d, %s: got %s\nwant %s", cut, name, valuesOf(rest), valuesOf(all[cut+1:]))
			}
			// Nothing else was held back: the next message is a new record.
			sentinel++
			s := fmt.Sprintf("s%d", sentinel)
			e.put("multi", int32(sentinel%3), "s", []byte(s))
			if next := receive(t, st, 1, 32767); string(next[0].value) != s {
				t.Fatalf("cut %d, %s: after the history came %q, want %q", cut, name, next[0].value, s)
			}
			all = append(all, fetched{value: []byte(s)})
		}
	}

	// An id beyond the end (a recreated topic): refused, and its resume id
	// reads the whole log again.
	beyond := []byte{0x01, 0x02, 0x00, 0xd0, 0x0f} // {p0: 1000}
	st := subscribe(ctx, t, e.grpcConn(), "/example.Multi/Subscribe", "last-message-id-bin", string(beyond))
	resume := gapEnd(t, st, "partition 0 asked offset 1000")
	st = subscribe(ctx, t, e.grpcConn(), "/example.Multi/Subscribe", "last-message-id", resume)
	if again := receive(t, st, len(all), 32767); !samePerPartition(again, all) {
		t.Fatalf("restart: %s", valuesOf(again))
	}
}

// Resuming while records are produced continuously loses
// nothing and repeats nothing.
func TestGRPCFetchResumeUnderContinuousProduction(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	const total = 600
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < total; i += 20 {
			var batch []kafka.Message
			for j := i; j < i+20; j++ {
				batch = append(batch, kafka.Message{TopicPartition: kafka.TopicPartition{Partition: int32(j % 3)}, Value: []byte(fmt.Sprintf("c%04d", j))})
			}
			e.putBatch("multi", batch)
		}
	}()
	ctx := ctxFor(t, 120*time.Second)
	var got []fetched
	var last []byte
	for reconnects := 0; len(got) < total; reconnects++ {
		var md []string
		if last != nil {
			md = []string{"last-message-id", encodeURL(last)}
		}
		sctx, cancel := context.WithCancel(ctx)
		st := subscribe(sctx, t, e.grpcConn(), "/example.Multi/Subscribe", md...)
		n := min(37+reconnects%11, total-len(got)) // read a few, then drop the stream
		for _, f := range receive(t, st, n, 32767) {
			got = append(got, f)
			last = f.id
		}
		cancel()
	}
	<-done
	checkPerPartition(t, got, func(v string) int {
		var i int
		fmt.Sscanf(v, "c%d", &i)
		return i
	})
	seen := map[string]bool{}
	for _, f := range got {
		if seen[string(f.value)] {
			t.Fatalf("%s delivered twice", f.value)
		}
		seen[string(f.value)] = true
	}
	if len(seen) != total {
		t.Fatalf("%d distinct records, want %d", len(seen), total)
	}
}

// On a compacted topic the history is the view (current values
// in partition and offset order, tombstones removing keys) and resume after
// any message gives exactly the rest of the view, then live updates.
func TestGRPCFetchCompactedResume(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	e.put("snapshots", 0, "a", []byte("a1"))
	e.put("snapshots", 1, "b", []byte("b1"))
	e.put("snapshots", 0, "a", []byte("a2"))
	e.put("snapshots", 1, "c", []byte("c1"))
	e.put("snapshots", 0, "d", []byte("d1"))
	e.put("snapshots", 1, "c", nil)
	ctx := ctxFor(t, 30*time.Second)
	view := receive(t, subscribe(ctx, t, e.grpcConn(), "/example.Snapshots/Subscribe"), 3, 32767)
	if v := valuesOf(view); v != "a2 d1 b1" {
		t.Fatalf("view %s, want a2 d1 b1", v)
	}
	var resumed []grpc.ClientStream
	for cut := range view {
		st := subscribe(ctx, t, e.grpcConn(), "/example.Snapshots/Subscribe", "last-message-id", encodeURL(view[cut].id))
		rest := receive(t, st, 2-cut, 32767)
		if !sameValues(rest, view[cut+1:]) {
			t.Fatalf("resume after %s: %s", view[cut].value, valuesOf(rest))
		}
		resumed = append(resumed, st)
	}
	e.put("snapshots", 1, "b", []byte("b2"))
	for i, st := range resumed {
		if live := receive(t, st, 1, 32767); string(live[0].value) != "b2" {
			t.Fatalf("stream %d, live after the view: %s", i, live[0].value)
		}
	}
}

// Filters select records by key or header (ORed), in history and live.
func TestGRPCFetchFilters(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	e.put("multi", 0, "k1", []byte("yes-key"))
	e.put("multi", 1, "k2", []byte("no"))
	e.put("multi", 2, "k3", []byte("yes-header"), "kind", "special")
	e.put("multi", 2, "k1", nil) // a tombstone is never sent
	st := subscribe(ctxFor(t, 20*time.Second), t, e.grpcConn(), "/example.Filtered/Subscribe")
	got := receive(t, st, 2, 32767)
	e.put("multi", 1, "k9", []byte("no"))
	e.put("multi", 0, "k1", []byte("yes-live"))
	got = append(got, receive(t, st, 1, 32767)...)
	if !samePerPartition(got, []fetched{{value: []byte("yes-key")}, {value: []byte("yes-header")}, {value: []byte("yes-live")}}) {
		t.Fatalf("filtered: %s", valuesOf(got))
	}
}

// UNIMPLEMENTED without a route or with a metadata mismatch;
// INVALID_ARGUMENT for a non-empty fetch request and a malformed id.
func TestGRPCFetchRefusals(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	e.put("fanout", 0, "k", []byte("v"))
	ctx := ctxFor(t, 20*time.Second)
	for _, tc := range []struct {
		name, method string
		request      []byte
		md           []string
		code         codes.Code
	}{
		{"no route", "/example.Nowhere/Subscribe", nil, nil, codes.Unimplemented},
		{"metadata missing", "/example.Tenant/Subscribe", nil, nil, codes.Unimplemented},
		{"metadata differs", "/example.Tenant/Subscribe", nil, []string{"tenant", "other"}, codes.Unimplemented},
		{"non-empty request", "/example.Fanout/Subscribe", []byte{0x0a, 0x01, 'x'}, nil, codes.InvalidArgument},
		{"malformed id", "/example.Fanout/Subscribe", nil, []string{"last-message-id", "not-an-id"}, codes.InvalidArgument},
		{"malformed binary id", "/example.Fanout/Subscribe", nil, []string{"last-message-id-bin", "\x02\x02\x00\x02"}, codes.InvalidArgument},
	} {
		st, err := subscribeErr(ctx, e.grpcConn(), tc.method, tc.request, tc.md...)
		if err == nil {
			_, s := endStatus(st)
			err = s.Err()
		}
		if status.Code(err) != tc.code || status.Convert(err).Message() == "" {
			t.Errorf("%s: %v, want %v with a message", tc.name, err, tc.code)
		}
	}
	// The metadata that matches takes the route.
	st := subscribe(ctx, t, e.grpcConn(), "/example.Tenant/Subscribe", "tenant", "acme")
	if got := receive(t, st, 1, 32767); string(got[0].value) != "v" {
		t.Fatalf("tenant route: %q", got[0].value)
	}
}

// Every call shape of the echo route, with the records it
// wrote read back: one per message, then the null-value record, keyed by
// the correlation id, with the overrides, correlation headers and `meta:*`
// request metadata (minus transport and credential headers).
func TestGRPCProduceCallShapes(t *testing.T) {
	t.Parallel()
	e, h := startGRPC(t)
	echo := example.NewEchoClient(e.grpcConn())
	ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "custom", "v1", "authorization", "Bearer secret", "trace-bin", "\x00\x01")

	var hdr metadata.MD
	r, err := echo.Say(ctx, &example.EchoMessage{Message: "hi"}, grpc.Header(&hdr))
	if err != nil || r.GetMessage() != "hi" {
		t.Fatalf("Say: %v %v", r, err)
	}
	if got := hdr.Get("custom"); len(got) != 1 || got[0] != "v1" {
		t.Fatalf("response metadata %v", hdr)
	}

	ex, err := echo.Expand(ctx, &example.EchoMessage{Message: "stream"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := ex.Recv(); err != nil || m.GetMessage() != "stream" {
		t.Fatalf("Expand: %v %v", m, err)
	}
	if _, err := ex.Recv(); err != io.EOF {
		t.Fatalf("Expand end: %v", err)
	}

	co, err := echo.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := co.Send(&example.EchoMessage{Message: "one"}); err != nil {
		t.Fatal(err)
	}
	if m, err := co.CloseAndRecv(); err != nil || m.GetMessage() != "one" {
		t.Fatalf("Collect: %v %v", m, err)
	}

	chat, err := echo.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"a", "b", "c"} {
		if err := chat.Send(&example.EchoMessage{Message: w}); err != nil {
			t.Fatal(err)
		}
		if m, err := chat.Recv(); err != nil || m.GetMessage() != w {
			t.Fatalf("Chat %s: %v %v", w, m, err)
		}
	}
	if err := chat.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := chat.Recv(); err != io.EOF {
		t.Fatalf("Chat end: %v", err)
	}

	// Read the requests back, grouped by correlation id in order.
	byCall := map[string][]*kafka.Message{}
	var order []string
	for _, m := range e.readTopic("echo-requests") {
		cid, ok := recHeader(m, "gateway:correlation-id")
		if !ok {
			t.Fatalf("record without correlation id: %v", m.Headers)
		}
		if _, seen := byCall[cid]; !seen {
			order = append(order, cid)
		}
		byCall[cid] = append(byCall[cid], m)
	}
	want := []struct {
		method string
		values []string
	}{{"Say", []string{"hi"}}, {"Expand", []string{"stream"}}, {"Collect", []string{"one"}}, {"Chat", []string{"a", "b", "c"}}}
	if len(order) != len(want) {
		t.Fatalf("%d calls in echo-requests, want %d", len(order), len(want))
	}
	for i, w := range want {
		cid := order[i]
		recs := byCall[cid]
		if len(recs) != len(w.values)+1 {
			t.Fatalf("%s: %d records, want %d and the terminal one", w.method, len(recs), len(w.values))
		}
		for j, m := range recs {
			var msg example.EchoMessage
			if j < len(w.values) {
				if err := proto.Unmarshal(m.Value, &msg); err != nil || msg.GetMessage() != w.values[j] {
					t.Fatalf("%s record %d: %q %v", w.method, j, m.Value, err)
				}
			} else if m.Value != nil {
				t.Fatalf("%s: the last record has a value %q", w.method, m.Value)
			}
			if string(m.Key) != cid {
				t.Fatalf("%s record %d: key %q, want the correlation id %q", w.method, j, m.Key, cid)
			}
			var names []string
			for _, hd := range m.Headers {
				names = append(names, hd.Key)
			}
			if got := strings.Join(names[:5], " "); got != "x-origin gateway:service gateway:method gateway:reply-to gateway:correlation-id" {
				t.Fatalf("%s record %d: headers start %s", w.method, j, got)
			}
			for name, v := range map[string]string{"x-origin": "e2e", "gateway:service": "example.Echo", "gateway:method": w.method,
				"gateway:reply-to": "replies", "meta:custom": "v1", "meta:trace-bin": "AAE"} {
				if got, _ := recHeader(m, name); got != v {
					t.Fatalf("%s record %d: %s = %q, want %q (headers %v)", w.method, j, name, got, v, names)
				}
			}
			for _, name := range names {
				if slices.Contains([]string{"meta:authorization", "meta:user-agent", "meta:te", "meta:content-type"}, name) ||
					strings.HasPrefix(name, "meta:grpc-") || strings.HasPrefix(name, "meta::") {
					t.Fatalf("%s record %d carries %s", w.method, j, name)
				}
			}
		}
	}
	if h.Stats().Calls != 0 {
		t.Fatalf("calls still in progress: %+v", h.Stats())
	}
}

// The terminal reply's gateway:status and gateway:message are
// the call's status (the message percent-encoded on the wire, decoded by the
// client); no reply within limits.reply-timeout is DEADLINE_EXCEEDED, and so
// is a grpc-timeout that elapses first.
func TestGRPCProduceStatusAndTimeouts(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	ctx := ctxFor(t, 30*time.Second)
	call := func(ctx context.Context, method, msg string) error {
		return e.grpcConn().Invoke(ctx, method, &rawMessage{b: []byte(msg)}, &rawMessage{}, grpc.ForceCodecV2(rawCodec{}))
	}
	for _, tc := range []struct {
		msg  string
		code codes.Code
		text string
	}{
		{"9:Custom Error Message", codes.FailedPrecondition, "Custom Error Message"},
		{"5:Ünïcödé 100% · done", codes.NotFound, "Ünïcödé 100% · done"},
		{"16:", codes.Unauthenticated, ""},
	} {
		err := call(ctx, "/example.Status/Call", tc.msg)
		if st := status.Convert(err); st.Code() != tc.code || st.Message() != tc.text {
			t.Errorf("%q: %v %q, want %v %q", tc.msg, st.Code(), st.Message(), tc.code, tc.text)
		}
	}

	start := time.Now()
	err := call(ctx, "/example.Silent/Call", "anyone?")
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), "reply-timeout") ||
		!strings.HasSuffix(status.Convert(err).Message(), "this request has no idempotency-key metadata, so a retry may write it a second time (send one to make a retry safe)") {
		t.Fatalf("no responder: %v, want DEADLINE_EXCEEDED saying a retry without a key may write again", err)
	}
	if took := time.Since(start); took < 2*time.Second || took > 10*time.Second {
		t.Fatalf("the reply timeout took %v, want about 2s", took)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := call(short, "/example.Silent/Call", "quick?"); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("grpc-timeout: %v", err)
	}
	// Both calls were written, each with its terminal record.
	pollUntil(t, "silent requests", func() bool { return len(e.readTopic("silent-requests")) == 4 })
}

// A replay (same idempotency key) attaches to the stored reply
// and produces nothing, whether the reply is complete or still partial.
func TestGRPCProduceReplayProducesNothing(t *testing.T) {
	t.Parallel()
	e, h := startGRPC(t)
	echo := example.NewEchoClient(e.grpcConn())
	ctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", "replay-1")
	first, err := echo.Say(ctx, &example.EchoMessage{Message: "once"})
	if err != nil {
		t.Fatal(err)
	}
	written := e.endOffsets("echo-requests")
	again, err := echo.Say(ctx, &example.EchoMessage{Message: "once"})
	if err != nil || !proto.Equal(first, again) {
		t.Fatalf("replay: %v %v", again, err)
	}
	if now := e.endOffsets("echo-requests"); now != written {
		t.Fatalf("the replay wrote %d records", now-written)
	}
	if h.Stats().Replays != 1 {
		t.Fatalf("stats %+v", h.Stats())
	}

	// A partial reply: the responder answered a message but not the end.
	bidi := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	pctx := metadata.AppendToOutgoingContext(ctxFor(t, 30*time.Second), "idempotency-key", "partial-1")
	c1ctx, cancel1 := context.WithCancel(pctx)
	st, err := e.grpcConn().NewStream(c1ctx, bidi, "/example.Status/Call", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&rawMessage{b: []byte("partial:hello")}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var m rawMessage
	if err := st.RecvMsg(&m); err != nil || string(m.b) != "hello" {
		t.Fatalf("first call: %q %v", m.b, err)
	}
	// The client goes: the message's record and the end record are written
	// all the same, whether or not the half-close reached the processor.
	cancel1()
	pollUntil(t, "the first call's records", func() bool { return e.endOffsets("status-requests") == 2 })
	written = e.endOffsets("status-requests")
	cid, _ := recHeader(e.readTopic("status-requests")[0], "gateway:correlation-id")

	st2, err := e.grpcConn().NewStream(pctx, bidi, "/example.Status/Call", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.SendMsg(&rawMessage{b: []byte("partial:hello")}); err != nil {
		t.Fatal(err)
	}
	if err := st2.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := st2.RecvMsg(&m); err != nil || string(m.b) != "hello" {
		t.Fatalf("replay of the partial reply: %q %v", m.b, err)
	}
	// The reply completes: the replay ends with it.
	e.put("replies", 0, cid, nil, "gateway:correlation-id", cid, "gateway:status", "0")
	if n, s := endStatus(st2); n != 0 || s.Code() != codes.OK {
		t.Fatalf("replay end: %d more, %v", n, s)
	}
	if now := e.endOffsets("status-requests"); now != written {
		t.Fatalf("the replay of a partial reply wrote %d records", now-written)
	}
}

// Oneway routes: each message is a record with the overrides, the
// correlation id (a call with an idempotency key only) and `meta:*`,
// no terminal record; after the acknowledgement one empty message and
// OK.
func TestGRPCProduceOneway(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	ctx := metadata.AppendToOutgoingContext(ctxFor(t, 20*time.Second), "idempotency-key", "ow-1", "custom", "c")
	st, err := e.grpcConn().NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/example.Oneway/Send", grpc.ForceCodecV2(rawCodec{}))
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
	if err := st.RecvMsg(&m); err != nil || len(m.b) != 0 {
		t.Fatalf("oneway answer: %q %v", m.b, err)
	}
	if err := st.RecvMsg(&m); err != io.EOF {
		t.Fatalf("oneway end: %v", err)
	}
	recs := e.readTopic("oneway-requests")
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2 (no terminal record)", len(recs))
	}
	for i, r := range recs {
		var names []string
		for _, hd := range r.Headers {
			names = append(names, hd.Key)
			// The correlation id and the fingerprint come with the
			// idempotency key: how a retry finds the call's records and
			// is compared with them.
			if !strings.HasPrefix(hd.Key, "meta:") && hd.Key != "x-kind" && hd.Key != "gateway:correlation-id" && hd.Key != "gateway:fingerprint" {
				t.Fatalf("record %d: header %s on a oneway record", i, hd.Key)
			}
		}
		cid, _ := recHeader(r, "gateway:correlation-id")
		if string(r.Key) != "ow-1" || string(r.Value) != fmt.Sprintf("m%d", i+1) || names[0] != "x-kind" || !strings.HasPrefix(cid, "ow-1-") ||
			!slices.Contains(names, "meta:custom") || !slices.Contains(names, "meta:idempotency-key") {
			t.Fatalf("record %d: key %q value %q headers %v", i, r.Key, r.Value, names)
		}
	}
}

// 1,000 fetch streams on one topic each receive every record of
// a 1,000-record burst, in order per partition. Reports the delivery time
// and allocations per delivered record per stream (whole process: broker,
// emulator, processor and clients; the processor's own path is measured in
// kafkaio's TestFanoutAllocationsPerRecordPerStream).
func TestGRPCThousandStreamsBurst(t *testing.T) {
	// Serial: it measures the process's allocations and needs the CPU to itself for its no-lag check.
	if testing.Short() {
		t.Skip("load")
	}
	e, h := startGRPC(t)
	const streams, records = 1000, 1000
	conns := e.grpcConns(8)
	ctx := ctxFor(t, 5*time.Minute)
	type result struct {
		n   int
		err error
	}
	results := make(chan result, streams)
	var opened sync.WaitGroup
	opened.Add(streams)
	for i := 0; i < streams; i++ {
		go func() {
			st, err := subscribeErr(ctx, conns[i%len(conns)], "/example.Multi/Subscribe", nil)
			opened.Done()
			if err != nil {
				results <- result{err: err}
				return
			}
			last := map[byte]int{}
			for n := 0; n < records; n++ {
				var m rawMessage
				if err := st.RecvMsg(&m); err != nil {
					results <- result{n, err}
					return
				}
				// Values are "p<partition>-<seq>"; the field follows.
				p, seq := m.b[1], 0
				for _, d := range m.b[3:9] {
					seq = 10*seq + int(d-'0')
				}
				if prev, ok := last[p]; ok && seq <= prev {
					results <- result{n, fmt.Errorf("partition %c: %d after %d", p, seq, prev)}
					return
				}
				last[p] = seq
			}
			results <- result{n: records}
		}()
	}
	opened.Wait()
	pollUntil(t, "1,000 open streams", func() bool { return h.Stats().Streams == streams })

	burst := make([]kafka.Message, records)
	for i := range burst {
		p := int32(i % 3)
		burst[i] = kafka.Message{TopicPartition: kafka.TopicPartition{Partition: p}, Value: []byte(fmt.Sprintf("p%d-%06d-payload", p, i))}
	}
	var before, after runtimeStats
	before.read()
	start := time.Now()
	e.putBatch("multi", burst)
	for i := 0; i < streams; i++ {
		r := <-results
		if r.err != nil || r.n != records {
			t.Fatalf("a stream got %d of %d records: %v", r.n, records, r.err)
		}
	}
	took := time.Since(start)
	after.read()
	delivered := float64(streams * records)
	t.Logf("%d streams × %d records: delivered in %v (%.0f records/s); %.3f allocations and %.0f bytes allocated per delivered record per stream (whole process)",
		streams, records, took, delivered/took.Seconds(), float64(after.mallocs-before.mallocs)/delivered, float64(after.bytes-before.bytes)/delivered)
	if st := h.Stats(); st.Lagged != 0 {
		t.Fatalf("streams ended for lag during the burst: %+v", st)
	}
}

// checkPerPartition checks that values of each partition (by id position
// growth) come in increasing order of seq (when given) and that positions
// never go back.
func checkPerPartition(t *testing.T, fs []fetched, seq func(string) int) {
	t.Helper()
	lastPos := map[int32]int64{}
	lastSeq := map[int32]int{}
	for i, f := range fs {
		pos := positions(t, f.id)
		moved := int32(-1)
		for p, off := range pos {
			if off < lastPos[p] {
				t.Fatalf("message %d (%s): position of partition %d went back from %d to %d", i, f.value, p, lastPos[p], off)
			}
			if off > lastPos[p] {
				moved = p
			}
			lastPos[p] = off
		}
		if seq != nil && moved >= 0 {
			s := seq(string(f.value))
			if prev, ok := lastSeq[moved]; ok && s <= prev {
				t.Fatalf("partition %d: %s after seq %d", moved, f.value, prev)
			}
			lastSeq[moved] = s
		}
	}
}

// samePerPartition: the same values, and in the same order within each
// partition (values name their partition: index % 3, or the sentinel's).
func samePerPartition(a, b []fetched) bool {
	group := func(fs []fetched) map[string][]string {
		out := map[string][]string{}
		for _, f := range fs {
			out[partitionKey(string(f.value))] = append(out[partitionKey(string(f.value))], string(f.value))
		}
		return out
	}
	return len(a) == len(b) && maps.EqualFunc(group(a), group(b), slices.Equal)
}

func partitionKey(v string) string {
	var i int
	if _, err := fmt.Sscanf(v[1:], "%d", &i); err != nil {
		return v
	}
	return fmt.Sprint(i % 3)
}

func valuesOf(fs []fetched) string {
	var s []string
	for _, f := range fs {
		s = append(s, string(f.value))
	}
	return strings.Join(s, " ")
}
