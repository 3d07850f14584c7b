package e2e_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpcwire"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
	"github.com/kafka-ext-proc/kafka-ext-proc/responder"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// grpcHandlerOf captures the grpc-kafka handler the processor runs, to read
// its counters.
func grpcHandlerOf(dst **grpckafka.Handler) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) {
		o.WrapGRPC = func(h handler.GRPCHandler) handler.GRPCHandler {
			if gk, ok := h.(*grpckafka.Handler); ok {
				*dst = gk
			}
			return h
		}
	}
}

// withTopics creates topics (partitions, compaction) before the
// configuration's.
func withTopics(ts ...embedded.Topic) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) { o.BrokerOptions.Topics = append(o.BrokerOptions.Topics, ts...) }
}

// withResponders starts responders against the env's broker.
func withResponders(rs ...responder.Options) func(*stack.DevOptions) {
	return func(o *stack.DevOptions) { o.Responders = append(o.Responders, rs...) }
}

// endOffsets is the sum of a topic's high watermarks.
func (e *env) endOffsets(topic string) int64 {
	e.t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "group.id": "grpc-ends-" + uuid.NewString(), "log_level": 3})
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		e.t.Fatal(err)
	}
	var sum int64
	for _, p := range md.Topics[topic].Partitions {
		_, hi, err := c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			e.t.Fatal(err)
		}
		sum += hi
	}
	return sum
}

// putBatch writes records to explicit partitions in one batch and waits for
// every acknowledgement.
func (e *env) putBatch(topic string, recs []kafka.Message) {
	e.t.Helper()
	if e.prod == nil {
		p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3, "linger.ms": 1})
		if err != nil {
			e.t.Fatal(err)
		}
		e.prod = p // closed by the env
	}
	done := make(chan kafka.Event, len(recs))
	for i := range recs {
		m := recs[i]
		m.TopicPartition.Topic = &topic
		for {
			err := e.prod.Produce(&m, done)
			if err == nil {
				break
			}
			if ke, ok := err.(kafka.Error); !ok || ke.Code() != kafka.ErrQueueFull {
				e.t.Fatal(err)
			}
			e.prod.Flush(10)
		}
	}
	for range recs {
		select {
		case ev := <-done:
			if m := ev.(*kafka.Message); m.TopicPartition.Error != nil {
				e.t.Fatal(m.TopicPartition.Error)
			}
		case <-time.After(30 * time.Second):
			e.t.Fatal("no acknowledgement")
		}
	}
}

// fetched is one message of a fetch stream: the record value and the bytes
// of its reliability field.
type fetched struct {
	value []byte
	id    []byte
}

// splitField cuts the reliability field off a fetch message: the field is
// the message's last bytes (tag, length, id), whatever the value before it.
func splitField(t testing.TB, msg []byte, field int) fetched {
	t.Helper()
	tag := protowire.AppendTag(nil, protowire.Number(field), protowire.BytesType)
	for i := len(msg) - len(tag); i >= 0; i-- {
		if !bytes.Equal(msg[i:i+len(tag)], tag) {
			continue
		}
		id, n := protowire.ConsumeBytes(msg[i+len(tag):])
		if n > 0 && i+len(tag)+n == len(msg) {
			return fetched{value: msg[:i], id: id}
		}
	}
	t.Fatalf("message % x does not end with field %d", msg, field)
	return fetched{}
}

// positions decodes a message id.
func positions(t testing.TB, id []byte) map[int32]int64 {
	t.Helper()
	p, err := grpcwire.DecodeMessageID(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var fetchDesc = &grpc.StreamDesc{ServerStreams: true}

// subscribe opens a fetch stream with raw messages and returns it once the
// response headers arrived.
func subscribe(ctx context.Context, t testing.TB, cc *grpc.ClientConn, method string, md ...string) grpc.ClientStream {
	t.Helper()
	st, err := subscribeErr(ctx, cc, method, nil, md...)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return st
}

func subscribeErr(ctx context.Context, cc *grpc.ClientConn, method string, request []byte, md ...string) (grpc.ClientStream, error) {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	st, err := cc.NewStream(ctx, fetchDesc, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(&rawMessage{b: request}); err != nil {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	if _, err := st.Header(); err != nil {
		return nil, err
	}
	return st, nil
}

// sendAll opens a client-streaming call (bidi when serverStreams) with raw
// messages, sends msgs and half-closes; the caller reads the answer.
func sendAll(ctx context.Context, t testing.TB, cc *grpc.ClientConn, method string, serverStreams bool, msgs ...string) grpc.ClientStream {
	t.Helper()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: serverStreams}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range msgs {
		if err := st.SendMsg(&rawMessage{b: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return st
}

// receive reads n messages of a fetch stream.
func receive(t testing.TB, st grpc.ClientStream, n, field int) []fetched {
	t.Helper()
	out := make([]fetched, 0, n)
	for len(out) < n {
		var m rawMessage
		if err := st.RecvMsg(&m); err != nil {
			t.Fatalf("after %d of %d messages: %v", len(out), n, err)
		}
		out = append(out, splitField(t, m.b, field))
	}
	return out
}

// endStatus reads a stream to its end and returns its status.
func endStatus(st grpc.ClientStream) (int, *status.Status) {
	msgs, err := recvAll(st)
	if err == nil {
		return len(msgs), status.New(codes.OK, "")
	}
	return len(msgs), status.Convert(err)
}

// recvAll reads a stream to its end: its messages, and nil for an OK end
// or the error it ended with.
func recvAll(st grpc.ClientStream) ([]string, error) {
	var msgs []string
	for {
		var m rawMessage
		err := st.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			return msgs, nil
		}
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, string(m.b))
	}
}

func encodeURL(id []byte) string { return base64.RawURLEncoding.EncodeToString(id) }

// runtimeStats are the process's allocation counters.
type runtimeStats struct{ mallocs, bytes uint64 }

func (s *runtimeStats) read() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.mallocs, s.bytes = m.Mallocs, m.TotalAlloc
}

// idEncodings are the ways a client may send a message id back.
func idEncodings(id []byte) map[string][]string {
	return map[string][]string{
		"text url-safe padded":   {"last-message-id", base64.URLEncoding.EncodeToString(id)},
		"text url-safe unpadded": {"last-message-id", base64.RawURLEncoding.EncodeToString(id)},
		"text standard padded":   {"last-message-id", base64.StdEncoding.EncodeToString(id)},
		"text standard unpadded": {"last-message-id", base64.RawStdEncoding.EncodeToString(id)},
		// grpc-go base64-encodes -bin values itself (standard alphabet).
		"binary": {"last-message-id-bin", string(id)},
	}
}

// grpcConns opens n connections to the front (HTTP/2 bounds the streams of
// one connection).
func (e *env) grpcConns(n int) []*grpc.ClientConn {
	e.t.Helper()
	out := make([]*grpc.ClientConn, n)
	for i := range out {
		c, err := grpc.NewClient(e.dev.Front(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { c.Close() })
		out[i] = c
	}
	return out
}

// statusResponder answers each request message "<code>:<message>" with the
// end of the call (a message "partial:<text>" gets <text> and no end); the
// half-close gets an OK end unless the call was partial.
func statusResponder() responder.Handler {
	var mu sync.Mutex
	partial := map[string]bool{}
	return func(_ context.Context, req *responder.Request) ([]responder.Reply, error) {
		mu.Lock()
		defer mu.Unlock()
		v := string(req.Value)
		switch {
		case req.Value == nil:
			if partial[req.CorrelationID] {
				return nil, nil
			}
			return []responder.Reply{responder.GRPCEnd(0, "")}, nil
		case strings.HasPrefix(v, "partial:"):
			partial[req.CorrelationID] = true
			return []responder.Reply{responder.GRPCReply([]byte(strings.TrimPrefix(v, "partial:")))}, nil
		}
		code, msg, _ := strings.Cut(v, ":")
		n, err := strconv.Atoi(code)
		if err != nil {
			return nil, fmt.Errorf("status responder: %q", v)
		}
		return []responder.Reply{responder.GRPCEnd(n, msg)}, nil
	}
}

// sameBytes reports whether two message lists carry the same values.
func sameValues(a, b []fetched) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].value, b[i].value) {
			return false
		}
	}
	return true
}
