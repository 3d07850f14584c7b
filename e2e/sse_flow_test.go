package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kafka-ext-proc/kafka-ext-proc/envoy"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// A stream whose reader stops is ended once more than
// limits.stream-lag-budget records behind, with a comment saying so; the
// processor never queued records for it; the client resumes by the id of
// the last event it got with exactly the rest.
//
// Envoy reads ext_proc streams whatever its downstream does, so the stall
// is made where the processor can see it: an ext_proc client (Envoy's part)
// that stops reading, so HTTP/2 flow control blocks the processor's sends.
func TestSSELagBudget(t *testing.T) {
	// Serial: a lag budget is a time budget: other tests' load would cut the fast stream too.
	e := startSSE(t, func(o *stack.DevOptions) { o.Config.Limits.StreamLagBudget = 50 })
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
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{EndOfStream: true, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			hv(":method", "GET"), hv(":path", "/events"), hv(":scheme", "http"), hv(":authority", "front"), hv("accept", "text/event-stream"),
		}}}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
	}); err != nil {
		t.Fatal(err)
	}
	first, err := px.Recv()
	if err != nil || first.GetStreamedImmediateResponse().GetHeadersResponse() == nil {
		t.Fatalf("the stream did not start: %v %v", first, err)
	}
	pollUntil(t, "the stream", func() bool { return e.dev.Processor.SSE.Stats().Streams == 1 })

	// The reader stops here.
	const total, size = 1500, 4 << 10
	value := func(i int) []byte {
		return append([]byte(fmt.Sprintf("%06d", i)), bytes.Repeat([]byte{'v'}, size-6)...)
	}
	for i := 0; i < total; i += 50 {
		var batch []kafka.Message
		for j := i; j < i+50; j++ {
			batch = append(batch, kafka.Message{TopicPartition: kafka.TopicPartition{Partition: 0}, Value: value(j)})
		}
		e.putBatch("events", batch)
	}
	pollUntil(t, "the stream ended for its lag", func() bool { return e.dev.Processor.SSE.Stats().Lagged == 1 })

	// The reader reads again: what was in flight, the reason, then the end.
	var body []byte
	for {
		r, err := px.Recv()
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(body), err)
		}
		b := r.GetStreamedImmediateResponse().GetBodyResponse()
		body = append(body, b.GetBody()...)
		if b.GetEndOfStream() {
			break
		}
	}
	s := &sseStream{events: make(chan sseEvent, total), comments: make(chan string, 100), retry: make(chan string, 1), done: make(chan struct{})}
	s.readFrom(bytes.NewReader(body))
	if c := s.comment(t, "stream-lag-budget"); !strings.Contains(c, "(50 records)") {
		t.Fatalf("the end's comment: %q", c)
	}
	var got []sseEvent
	for len(s.events) > 0 {
		got = append(got, <-s.events)
	}
	t.Logf("the stalled stream had sent %d of %d records", len(got), total)
	if len(got) == 0 || len(got) > total/4 {
		t.Fatalf("%d events were sent to the stalled stream", len(got))
	}
	for i, ev := range got {
		if ev.data != string(value(i)) {
			t.Fatalf("event %d: %.6s", i, ev.data)
		}
	}
	resumed := e.openSSE(e.h1, "/events", "last-event-id", got[len(got)-1].id)
	for i, ev := range resumed.take(t, total-len(got)) {
		if ev.data != string(value(len(got)+i)) {
			t.Fatalf("resumed event %d: %.6s, want %06d", i, ev.data, len(got)+i)
		}
	}
}

// On drain every stream says why in a comment and ends (HTTP/1.1 and
// HTTP/2).
func TestSSEDrainEndsStreams(t *testing.T) {
	t.Parallel()
	e := startSSE(t)
	e.put("events", 0, "k", []byte("before"))
	var streams []*sseStream
	for _, c := range e.clients() {
		s := e.openSSE(c, "/events")
		if ev := s.next(t); ev.data != "before" {
			t.Fatalf("%+v", ev)
		}
		streams = append(streams, s)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.dev.Processor.Shutdown(sctx)
	}()
	for _, s := range streams {
		s.comment(t, "shutting down")
		s.ended(t)
	}
	<-done
}

// With two replicas, one draining ends its stream only; the client
// reconnects with its last event id, reaches the other replica, and
// resumes there with nothing missed of what was written meanwhile.
func TestSSEResumeOnAnotherReplica(t *testing.T) {
	t.Parallel()
	e := startSSE(t, func(o *stack.DevOptions) { o.Replicas = 2 })
	e.put("events", 0, "k", []byte("before"))
	a, b := e.openSSE(e.h1, "/events"), e.openSSE(e.h1, "/events")
	last := map[*sseStream]string{}
	for _, s := range []*sseStream{a, b} {
		ev := s.next(t)
		if ev.data != "before" {
			t.Fatalf("%+v", ev)
		}
		last[s] = ev.id
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.dev.Replicas[0].Shutdown(sctx)
	var ended, live *sseStream
	select {
	case <-a.done:
		ended, live = a, b
	case <-b.done:
		ended, live = b, a
	case <-time.After(30 * time.Second):
		t.Fatal("no stream ended with its replica")
	}
	e.put("events", 0, "k", []byte("during"))
	if ev := live.next(t); ev.data != "during" {
		t.Fatalf("the other replica's stream: %+v", ev)
	}
	// The emulator keeps the stopped replica's turn, as EventSource's own
	// retries would meet it: the second try reaches the live one.
	for try := 0; ; try++ {
		r := e.openSSE(e.h1, "/events", "last-event-id", last[ended])
		if r.resp.StatusCode != 200 {
			if try > 0 {
				t.Fatalf("reconnecting: %d %s", r.resp.StatusCode, r.body(t))
			}
			continue
		}
		if ev := r.next(t); ev.data != "during" {
			t.Fatalf("resumed on the other replica: %+v", ev)
		}
		return
	}
}

func (e *env) clients() []*http.Client { return []*http.Client{e.h1, e.h2c} }

// A quiet stream sends heartbeat comments, which keep it open past Envoy's
// stream idle timeout (1s here, heartbeats every 50ms): a record written
// after more silence than the timeout allows still arrives. The margin is
// wide (20 heartbeats per timeout) so that a loaded machine's late timer
// does not look like a missing heartbeat.
func TestSSEHeartbeatOutlivesIdleTimeout(t *testing.T) {
	// Serial: it checks heartbeats against an idle timeout, a time budget.
	y := string(envoy.DefaultYAML())
	if !strings.Contains(y, "stream_idle_timeout: 300s") {
		t.Fatal("envoy.yaml changed: the test's edit no longer applies")
	}
	y = strings.Replace(y, "stream_idle_timeout: 300s", "stream_idle_timeout: 1s", 1)
	e := startSSE(t, func(o *stack.DevOptions) {
		o.Envoy = []byte(y)
		o.Config.Limits.SSEHeartbeat = 50 * time.Millisecond
	})
	for _, c := range e.clients() {
		s := e.openSSE(c, "/events")
		for i := 0; i < 30; i++ { // at least 1.5s of heartbeats: past the idle timeout
			select {
			case <-s.comments:
			case <-s.done:
				t.Fatalf("%s: the stream ended after %d heartbeats", s.resp.Proto, i)
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: no heartbeat", s.resp.Proto)
			}
		}
		e.put("events", 0, "k", []byte(s.resp.Proto))
		for ev := s.next(t); ev.data != s.resp.Proto; ev = s.next(t) {
			// the records the earlier client's turn wrote come first
		}
	}
}
