package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// flowConfig: a non-default reliability field and metadata name, a small
// lag budget, and an HTTP long-poll route to observe the HCM idle timeout.
const flowConfig = `
bindings:
  kafka0:
    type: kafka
    kind: client
    options: { bootstrap.servers: localhost:9092 }
  http0:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{ method: GET, path: "/items/{id}" }]
        exit: kafka0
        with: { capability: fetch, topic: items, filters: [{ key: "${params.id}" }] }
  grpc0:
    type: grpc-kafka
    kind: proxy
    options: { reliability: { field: 9, metadata: resume-from } }
    routes:
      - when: [{ service: example.Fanout }]
        exit: kafka0
        with: { capability: fetch, topic: fanout }
limits: { stream-lag-budget: 50, max-wait: 10s }
`

// shortIdleEnvoy is the shipped envoy.yaml with a 300ms HCM
// stream_idle_timeout; the gRPC route keeps its own idle_timeout.
func shortIdleEnvoy(t *testing.T) func(*stack.DevOptions) {
	y := string(envoy.DefaultYAML())
	if !strings.Contains(y, "stream_idle_timeout: 300s") || !strings.Contains(y, "idle_timeout: 3600s") {
		t.Fatal("envoy.yaml changed: the test's edit no longer applies")
	}
	y = strings.Replace(y, "stream_idle_timeout: 300s", "stream_idle_timeout: 0.3s", 1)
	return func(o *stack.DevOptions) { o.Envoy = []byte(y) }
}

func startFlow(t *testing.T) (*env, *grpckafka.Handler) {
	t.Helper()
	var h *grpckafka.Handler
	e := startEnv(t, flowConfig, grpcHandlerOf(&h), shortIdleEnvoy(t),
		withTopics(embedded.Topic{Name: "fanout", Partitions: 1}, embedded.Topic{Name: "items", Compact: true}))
	return e, h
}

// A quiet stream outlives the HCM stream_idle_timeout (the
// gRPC route's idle_timeout applies to it), with the options' field number
// and metadata name; on drain the stream ends UNAVAILABLE.
func TestGRPCFetchQuietStreamCustomFieldAndDrain(t *testing.T) {
	t.Parallel()
	e, _ := startFlow(t)
	ctx := ctxFor(t, 30*time.Second)
	st := subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe")

	// An HTTP long poll on the same front is cut by the HCM idle timeout...
	resp, _ := e.request(e.h2c, "GET", "/items/missing", "", "prefer", "wait=5")
	if resp.StatusCode != 504 {
		t.Fatalf("HTTP long poll: %d, want the idle timeout's 504", resp.StatusCode)
	}
	// ...while the quiet gRPC stream, open longer than that, still delivers.
	e.put("fanout", 0, "k", []byte{0x0a, 0x01, 'x'})
	var m rawMessage
	if err := st.RecvMsg(&m); err != nil {
		t.Fatalf("the quiet stream ended: %v", err)
	}
	if want := []byte{0x0a, 0x01, 'x', 0x4A, 0x04, 0x01, 0x02, 0x00, 0x02}; !bytes.Equal(m.b, want) {
		t.Fatalf("field 9: % X, want % X", m.b, want)
	}

	// The options name the resume metadata; the default name means nothing here.
	e.put("fanout", 0, "k", []byte("second"))
	id := splitField(t, m.b, 9).id
	resumed := subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe", "resume-from", encodeURL(id))
	if got := receive(t, resumed, 1, 9); string(got[0].value) != "second" {
		t.Fatalf("resume-from: %q", got[0].value)
	}
	ignored := subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe", "last-message-id", encodeURL(id))
	if got := receive(t, ignored, 2, 9); string(got[1].value) != "second" {
		t.Fatalf("last-message-id is not this binding's metadata, yet: %q", got[0].value)
	}

	// Drain: every open stream ends UNAVAILABLE.
	done := make(chan struct{})
	go func() {
		defer close(done)
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.dev.Processor.Shutdown(sctx)
	}()
	for i, s := range []grpc.ClientStream{st, resumed, ignored} {
		if n, s := endStatus(s); s.Code() != codes.Unavailable {
			t.Fatalf("stream %d after drain: %d more messages, %v", i, n, s)
		}
	}
	<-done
}

// A stream whose reader stops is ended RESOURCE_EXHAUSTED once
// more than limits.stream-lag-budget records behind; the processor never
// queued records for it (the frames the reader finds when it reads again
// are those that were in flight), the ring stays within its bound, and the
// client resumes by id with exactly the rest, history read from Kafka.
//
// Envoy reads ext_proc streams whatever its downstream does, so the stall
// is made where the processor can see it: an ext_proc client (Envoy's part)
// that stops reading, so HTTP/2 flow control blocks the processor's sends.
func TestGRPCFetchLagBudget(t *testing.T) {
	// Serial: a lag budget is a time budget: other tests' load would cut the fast stream too.
	e, h := startFlow(t)
	cc, err := grpc.NewClient(e.dev.Processor.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := ctxFor(t, 60*time.Second)
	px, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	if err := px.Send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			hv(":method", "POST"), hv(":path", "/example.Fanout/Subscribe"), hv(":scheme", "http"), hv(":authority", "front"),
			hv("content-type", "application/grpc"), hv("te", "trailers"),
		}}}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
	}); err != nil {
		t.Fatal(err)
	}
	if err := px.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: grpcwire.Frame(nil), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	first, err := px.Recv()
	if err != nil || first.GetStreamedImmediateResponse().GetHeadersResponse() == nil {
		t.Fatalf("the stream did not start: %v %v", first, err)
	}
	pollUntil(t, "the stream", func() bool { return h.Stats().Streams == 1 })

	// The reader stops here. Records come in batches, each a tail batch.
	const total, size = 1500, 4 << 10
	value := func(i int) []byte {
		return append([]byte(fmt.Sprintf("%06d", i)), bytes.Repeat([]byte{'v'}, size-6)...)
	}
	for i := 0; i < total; i += 50 {
		var batch []kafka.Message
		for j := i; j < i+50; j++ {
			batch = append(batch, kafka.Message{TopicPartition: kafka.TopicPartition{Partition: 0}, Value: value(j)})
		}
		e.putBatch("fanout", batch)
	}
	pollUntil(t, "the stream ended for its lag", func() bool { st := h.Stats(); return st.Lagged == 1 && st.Streams == 0 })
	st := h.Stats()
	ringCap := max(50, 1024) // the ring of a topic holds max(lag budget, 1024) records
	t.Logf("after %d records of %d bytes with the reader stopped: ring %d records, %d bytes; streams %d", total, size, st.Logs.RingRecords, st.Logs.RingBytes, st.Streams)
	if st.Logs.RingRecords > ringCap || st.Logs.RingBytes > int64(ringCap)*(size+256) {
		t.Fatalf("the ring outgrew its bound: %+v", st.Logs)
	}

	// The reader reads again: the frames that were in flight, then the end.
	var frames []byte
	var trailers *corev3.HeaderMap
	for trailers == nil {
		r, err := px.Recv()
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(frames), err)
		}
		s := r.GetStreamedImmediateResponse()
		frames = append(frames, s.GetBodyResponse().GetBody()...)
		trailers = s.GetTrailersResponse()
	}
	var got []fetched
	for len(frames) > 0 {
		n := int(frames[1])<<24 | int(frames[2])<<16 | int(frames[3])<<8 | int(frames[4])
		got = append(got, splitField(t, frames[5:5+n], 9))
		frames = frames[5+n:]
	}
	code, msg := "", ""
	for _, hd := range trailers.GetHeaders() {
		switch hd.GetKey() {
		case "grpc-status":
			code = string(hd.GetRawValue())
		case "grpc-message":
			msg = grpcwire.DecodeMessage(string(hd.GetRawValue()))
		}
	}
	if code != fmt.Sprint(int(codes.ResourceExhausted)) || !strings.Contains(msg, "stream-lag-budget") {
		t.Fatalf("trailers %v", trailers)
	}
	// Only what HTTP/2 flow control and the stream's batches hold was ever
	// sent: the client's 64 KiB stream window, gRPC's 64 KiB write quota, a
	// send that overshoots that quota (grpc-go admits a message while any
	// quota is left), and the batch the stream holds; a batch is at most
	// 64 KiB plus the frame that filled it. Under load batches run full, so
	// the count moves between 48 and 51: 1,500 written is what it must not
	// approach.
	inFlight := (64<<10 + 64<<10 + 2*(64<<10+size)) / size
	t.Logf("the stalled stream had sent %d of %d records (flow-control windows and two batches hold %d)", len(got), total, inFlight)
	if len(got) == 0 || len(got) > inFlight {
		t.Fatalf("%d records were sent to the stalled stream", len(got))
	}
	for i, f := range got {
		if !bytes.Equal(f.value, value(i)) {
			t.Fatalf("record %d: %.6s", i, f.value)
		}
	}

	// The client resumes after the last record it got: exactly the rest,
	// the part the ring no longer holds read from Kafka.
	resumed := subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe", "resume-from", encodeURL(got[len(got)-1].id))
	rest := receive(t, resumed, total-len(got), 9)
	for i, f := range rest {
		if !bytes.Equal(f.value, value(len(got)+i)) {
			t.Fatalf("resumed record %d: %.6s, want %06d", i, f.value, len(got)+i)
		}
	}
}
