package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/stack"
)

// deleteRecords removes the records of a partition below offset before on
// the test's broker, as retention or an operator's DeleteRecords does.
func (e *env) deleteRecords(ctx context.Context, topic string, partition int32, before int64) {
	e.t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.dev.Broker.Addr(), "log_level": 3})
	if err != nil {
		e.t.Fatal(err)
	}
	defer a.Close()
	res, err := a.DeleteRecords(ctx, []kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(before)}})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil {
			e.t.Fatalf("deleting the records of %s[%d] below %d: %v", topic, partition, before, r.TopicPartition.Error)
		}
	}
}

// newProducer closes the env's producer, so the next put starts one that
// knows a recreated topic's partitions (a producer's metadata of a topic
// only grows).
func (e *env) newProducer() {
	if e.prod != nil {
		e.prod.Close()
		e.prod = nil
	}
}

// gapEnd reads a fetch stream to its end and checks it ended OUT_OF_RANGE
// with a message holding every one of want, and a last-message-id trailer:
// the id to resume from knowingly, returned.
func gapEnd(t *testing.T, st grpc.ClientStream, want ...string) string {
	t.Helper()
	n, s := endStatus(st)
	if n != 0 || s.Code() != codes.OutOfRange {
		t.Fatalf("%d messages, then %v %q; want none and OUT_OF_RANGE", n, s.Code(), s.Message())
	}
	for _, w := range want {
		if !strings.Contains(s.Message(), w) {
			t.Errorf("the status %q does not say %q", s.Message(), w)
		}
	}
	ids := st.Trailer().Get("last-message-id")
	if len(ids) != 1 || !strings.Contains(s.Message(), ids[0]) {
		t.Fatalf("trailers %v: want one last-message-id, the one the message names", st.Trailer())
	}
	return ids[0]
}

// TestGRPCStreamResumedBelowTheLogStart: five messages published to
// fanout, the records below offset 3 deleted (as retention does), and a
// stream resumed after offset 0. The stream does not skip offsets 1 and 2
// silently: it ends OUT_OF_RANGE naming the partition, the offset asked and
// the log start, with the id to continue from; resumed with that id it
// sends offsets 3 and 4, then what is written next.
func TestGRPCStreamResumedBelowTheLogStart(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	ctx := ctxFor(t, 60*time.Second)
	for i := range 5 {
		e.put("fanout", 0, fmt.Sprint(i), []byte(fmt.Sprintf("m%d", i)))
	}
	all := receive(t, subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe"), 5, 32767)
	e.deleteRecords(ctx, "fanout", 0, 3)

	st := subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe", "last-message-id", encodeURL(all[0].id))
	resume := gapEnd(t, st, `topic fanout`, "partition 0 asked offset 1, the log starts at 3", "2 records missed")

	st = subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe", "last-message-id", resume)
	if got := receive(t, st, 2, 32767); string(got[0].value) != "m3" || string(got[1].value) != "m4" {
		t.Fatalf("resumed with the gap's id: %q %q, want m3 m4", got[0].value, got[1].value)
	}
	e.put("fanout", 0, "5", []byte("m5"))
	if got := receive(t, st, 1, 32767); string(got[0].value) != "m5" {
		t.Fatalf("after the history: %q, want m5", got[0].value)
	}
	// A resume at or above the log start is no gap.
	st = subscribe(ctx, t, e.grpcConn(), "/example.Fanout/Subscribe", "last-message-id", encodeURL(all[2].id))
	if got := receive(t, st, 3, 32767); string(got[0].value) != "m3" {
		t.Fatalf("resumed after offset 2: %q first, want m3", got[0].value)
	}
}

// TestGRPCStreamOfADeletedOrRecreatedTopic: the log tail under the three
// operator actions that change a topic's generation. A running stream of a
// deleted topic ends saying it was deleted; an id of the deleted
// generation, once the topic is created again with fewer or more
// partitions, is refused OUT_OF_RANGE (it is past the new log's end, or
// names a partition the topic lacks), with the id that reads the new
// generation from its start; and a running stream whose topic is deleted
// and created again at once ends OUT_OF_RANGE too. No message of the new
// generation is sent as if it followed the old one.
func TestGRPCStreamOfADeletedOrRecreatedTopic(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t, func(o *stack.DevOptions) { o.PartitionCheck = 100 * time.Millisecond })
	ctx := ctxFor(t, 90*time.Second)
	for i := range 6 {
		e.put("multi", int32(i%3), fmt.Sprint(i), []byte(fmt.Sprintf("old%d", i)))
	}
	st := subscribe(ctx, t, e.grpcConn(), "/example.Multi/Subscribe")
	old := receive(t, st, 6, 32767)
	lastID := encodeURL(old[5].id)

	e.deleteTopic(ctx, "multi")
	n, s := endStatus(st)
	if n != 0 || s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "deleted") {
		t.Fatalf("a running stream of a deleted topic: %d messages, %v %q; want UNAVAILABLE saying it was deleted", n, s.Code(), s.Message())
	}

	for _, c := range []struct {
		name       string
		partitions int32
		want       string
	}{
		{"fewer partitions", 1, "the topic has no partition 1"},
		{"more partitions", 4, "partition 0 asked offset 2, the log ends at 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.partitions == 4 {
				e.deleteTopic(ctx, "multi")
			}
			if err := e.dev.Broker.CreateTopics(embedded.Topic{Name: "multi", Partitions: c.partitions}); err != nil {
				t.Fatal(err)
			}
			e.newProducer()
			var want []string
			for p := range c.partitions {
				v := fmt.Sprintf("new%d-%d", c.partitions, p)
				e.put("multi", p, v, []byte(v))
				want = append(want, v)
			}
			st := subscribe(ctx, t, e.grpcConn(), "/example.Multi/Subscribe", "last-message-id", lastID)
			resume := gapEnd(t, st, "past the end of the log", "deleted and created again", c.want, "from the topic's start")
			st = subscribe(ctx, t, e.grpcConn(), "/example.Multi/Subscribe", "last-message-id", resume)
			got := receive(t, st, len(want), 32767)
			if !holdsOnce(got, want) {
				t.Fatalf("resumed with the gap's id: %s, want the new generation %v", valuesOf(got), want)
			}
		})
	}

	// A running stream at the tail of the 4-partition generation; the
	// topic deleted and created again at once, and written to.
	st = subscribe(ctx, t, e.grpcConn(), "/example.Multi/Subscribe")
	receive(t, st, 4, 32767)
	e.deleteTopic(ctx, "multi")
	if err := e.dev.Broker.CreateTopics(embedded.Topic{Name: "multi", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	e.newProducer()
	e.put("multi", 0, "again", []byte("again"))
	msgs, err := recvAll(st)
	s = status.Convert(err)
	if len(msgs) != 0 {
		t.Fatalf("the stream of a topic deleted and created under it sent %q", msgs)
	}
	switch {
	case s.Code() == codes.OutOfRange && strings.Contains(s.Message(), "deleted and created again while the stream read it"):
	case s.Code() == codes.Unavailable && strings.Contains(s.Message(), "deleted"):
		// The partition check ran between the deletion and the creation.
	default:
		t.Fatalf("a running stream of a recreated topic: %v %q; want OUT_OF_RANGE (or UNAVAILABLE, deleted)", s.Code(), s.Message())
	}
	st = subscribe(ctx, t, e.grpcConn(), "/example.Multi/Subscribe")
	if got := receive(t, st, 1, 32767); string(got[0].value) != "again" {
		t.Fatalf("a new stream of the recreated topic: %q, want again", got[0].value)
	}
}

// holdsOnce reports whether got holds the values of want, in any order,
// each once.
func holdsOnce(got []fetched, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	seen := map[string]int{}
	for _, g := range got {
		seen[string(g.value)]++
	}
	for _, w := range want {
		if seen[w] != 1 {
			return false
		}
	}
	return true
}

// sendOneway makes one call of the oneway gRPC route with one message and
// returns its status.
func sendOneway(ctx context.Context, t *testing.T, cc *grpc.ClientConn, msg string) *status.Status {
	t.Helper()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/example.Oneway/Send", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&rawMessage{b: []byte(msg)}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	_, s := endStatus(st)
	return s
}

// TestGRPCWriteToRecreatedTopic: a gRPC oneway route writes, its topic is
// deleted and created again, and the next call's record is refused out of
// sequence by the new generation (the idempotent producer that wrote the
// old one is replaced). The call ends UNAVAILABLE saying it was not
// written, and nothing of it is in the log; its retry, through the
// replacement producer, is written.
func TestGRPCWriteToRecreatedTopic(t *testing.T) {
	t.Parallel()
	e, _ := startGRPC(t)
	ctx := ctxFor(t, 60*time.Second)
	if s := sendOneway(ctx, t, e.grpcConn(), "old"); s.Code() != codes.OK {
		t.Fatalf("the first call: %v %q", s.Code(), s.Message())
	}
	e.deleteTopic(ctx, "oneway-requests")
	if err := e.dev.Broker.CreateTopics(embedded.Topic{Name: "oneway-requests", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if s := sendOneway(ctx, t, e.grpcConn(), "refused"); s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "not written") {
		t.Fatalf("the first call after the recreation: %v %q, want UNAVAILABLE saying it was not written", s.Code(), s.Message())
	}
	if s := sendOneway(ctx, t, e.grpcConn(), "retried"); s.Code() != codes.OK {
		t.Fatalf("the retry after the recreation: %v %q, want OK", s.Code(), s.Message())
	}
	var values []string
	for _, r := range e.readTopic("oneway-requests") {
		values = append(values, string(r.Value))
	}
	if len(values) != 1 || values[0] != "retried" {
		t.Fatalf("the new generation holds %q, want the retried record alone", values)
	}
}
