// Package kafkatest holds the helpers kafkaio's tests share, internal and
// external alike: an embedded broker and a bounded context, both released
// when the test ends.
package kafkatest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
)

// Broker starts an embedded broker with topics, closed when the test ends.
func Broker(t testing.TB, topics ...embedded.Topic) *embedded.Broker {
	t.Helper()
	return BrokerWith(t, topics)
}

// BrokerWith is Broker with kfake options (fault injection, listeners).
func BrokerWith(t testing.TB, topics []embedded.Topic, extra ...kfake.Opt) *embedded.Broker {
	t.Helper()
	b, err := embedded.Start(embedded.Options{Topics: topics, Extra: extra})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// Ctx is a context that ends after d, or when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Rec is a record Produce writes.
type Rec struct {
	Key, Value []byte
	Headers    []kafka.Header
	Partition  int32
	Timestamp  time.Time // zero: now
}

// Produce writes records and waits for every acknowledgement.
func Produce(t testing.TB, addr, topic string, recs ...Rec) {
	t.Helper()
	msgs := make([]*kafka.Message, len(recs))
	for i, r := range recs {
		msgs[i] = r.message(topic)
	}
	produce(t, addr, msgs)
}

// ProduceToEach writes rec to each of topics with one producer (a
// producer's start and close cost more than the records of a test).
func ProduceToEach(t testing.TB, addr string, topics []string, rec Rec) {
	t.Helper()
	msgs := make([]*kafka.Message, len(topics))
	for i, topic := range topics {
		msgs[i] = rec.message(topic)
	}
	produce(t, addr, msgs)
}

func (r Rec) message(topic string) *kafka.Message {
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: r.Partition},
		Key:            r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp,
	}
}

func produce(t testing.TB, addr string, msgs []*kafka.Message) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": addr, "log_level": 3, "linger.ms": 0})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, len(msgs))
	for _, m := range msgs {
		if err := p.Produce(m, done); err != nil {
			t.Fatal(err)
		}
	}
	for range msgs {
		select {
		case ev := <-done:
			if m := ev.(*kafka.Message); m.TopicPartition.Error != nil {
				t.Fatal(m.TopicPartition.Error)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no acknowledgement")
		}
	}
}

// AddPartitions raises topic's partition count to n.
func AddPartitions(t testing.TB, addr, topic string, n int) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": addr, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.CreatePartitions(Ctx(t, 20*time.Second), []kafka.PartitionsSpecification{{Topic: topic, IncreaseTo: n}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("adding partitions to %s: %v", topic, r.Error)
		}
	}
}

// DeleteTopic deletes topic, as an operator would.
func DeleteTopic(t testing.TB, addr, topic string) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": addr, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.DeleteTopics(Ctx(t, 20*time.Second), []string{topic})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("deleting %s: %v", topic, r.Error)
		}
	}
}

// DeleteRecords removes the records of topic's partition below offset
// before, as retention or an operator's DeleteRecords does.
func DeleteRecords(t testing.TB, addr, topic string, partition int32, before int64) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": addr, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.DeleteRecords(Ctx(t, 20*time.Second), []kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(before)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil {
			t.Fatalf("deleting the records of %s[%d] below %d: %v", topic, partition, before, r.TopicPartition.Error)
		}
	}
}

// BenchValueSize is the size of a BenchValue.
const BenchValueSize = 200

// BenchValue is a JSON object of exactly BenchValueSize bytes, the i-th of a
// benchmark's records.
func BenchValue(i int) []byte {
	v := fmt.Appendf(nil, `{"id":"item-%06d","n":%d,"pad":"`, i, i)
	for len(v) < BenchValueSize-2 {
		v = append(v, 'x')
	}
	return append(v, '"', '}')
}

// LogSink is a slog handler that keeps the messages logged (level and
// message), for assertions.
type LogSink struct {
	mu   sync.Mutex
	msgs []string
	// logged is closed at the next message; nil until someone waits.
	logged chan struct{}
}

func (s *LogSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *LogSink) Handle(_ context.Context, r slog.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, r.Level.String()+" "+r.Message)
	if s.logged != nil {
		close(s.logged)
		s.logged = nil
	}
	return nil
}
func (s *LogSink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *LogSink) WithGroup(string) slog.Handler      { return s }

// Has tells whether a message containing sub was logged.
func (s *LogSink) Has(sub string) bool { return s.Count(sub) > 0 }

// Count is the number of messages containing sub.
func (s *LogSink) Count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.countLocked(sub)
}

func (s *LogSink) countLocked(sub string) int {
	n := 0
	for _, m := range s.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// WaitCount waits until at least n messages contain sub, or ctx ends, and
// returns how many do then.
func (s *LogSink) WaitCount(ctx context.Context, sub string, n int) int {
	for {
		s.mu.Lock()
		got := s.countLocked(sub)
		if got >= n {
			s.mu.Unlock()
			return got
		}
		if s.logged == nil {
			s.logged = make(chan struct{})
		}
		logged := s.logged
		s.mu.Unlock()
		select {
		case <-logged:
		case <-ctx.Done():
			return s.Count(sub)
		}
	}
}

// Messages returns the messages logged so far.
func (s *LogSink) Messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.msgs...)
}

// CIDHeader is the correlation header the tests write and index by.
const CIDHeader = "gateway:correlation-id"

// Reply is a record WriteReplies writes, as a responder would.
type Reply struct {
	ID        string
	Header    string // default CIDHeader
	Value     []byte // nil: terminal
	Partition int32
	TS        time.Time // zero: now
	Extra     []kafka.Header
}

// WriteReplies writes reply records as a responder would, each to the
// given partition, and waits for every acknowledgement.
func WriteReplies(t testing.TB, addr, topic string, rs ...Reply) {
	t.Helper()
	recs := make([]Rec, len(rs))
	for i, r := range rs {
		h := r.Header
		if h == "" {
			h = CIDHeader
		}
		recs[i] = Rec{
			Key: []byte(r.ID), Value: r.Value, Partition: r.Partition, Timestamp: r.TS,
			Headers: append([]kafka.Header{{Key: h, Value: []byte(r.ID)}}, r.Extra...),
		}
	}
	Produce(t, addr, topic, recs...)
}

// BenchPartitions is how many partitions BenchReply spreads replies over.
const BenchPartitions = 12

// BenchCID is a correlation id as the processor issues them:
// <UUID>-<32 hex digits>.
func BenchCID(i int) string {
	return fmt.Sprintf("59410e57-3e0f-4b61-9328-%012x-%032x", i, uint64(i)*0x9e3779b97f4a7c15)
}

// BenchReply is the i-th of a benchmark's replies, at offset.
func BenchReply(topic *string, i int, offset int64) *kafka.Message {
	cid := BenchCID(i)
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: topic, Partition: int32(i % BenchPartitions), Offset: kafka.Offset(offset)},
		Key:            []byte(cid),
		Value:          BenchValue(i),
		Headers: []kafka.Header{
			{Key: CIDHeader, Value: []byte(cid)},
			{Key: "content-type", Value: []byte("application/json")},
		},
		Timestamp: time.UnixMilli(1_760_000_000_000),
	}
}
