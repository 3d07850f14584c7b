package produce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/internal/kafkatest"
)

// These tests are internal (package kafkaio) so they can reach a producer's
// librdkafka instance and a reply index's clock; their helpers are named
// so as not to collide with the package's own identifiers.

func testProducer(t *testing.T, addr string, acks client.Acks, timeout time.Duration, logger *slog.Logger) *Producer {
	t.Helper()
	p, err := New(Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": addr},
		KafkaTimeout: timeout, Acks: acks, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// readBack reads the record at (topic, partition, offset) with a consumer
// of its own.
func readBack(t *testing.T, addr, topic string, partition int32, offset int64) *kafka.Message {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": addr, "group.id": "read-back", "enable.auto.commit": false, "log_level": 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(offset)}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m, ok := c.Poll(100).(*kafka.Message); ok {
			return m
		}
	}
	t.Fatalf("no record at %s[%d]@%d", topic, partition, offset)
	return nil
}

// produceObserver records, per topic, the acks and producer ids of the
// ProduceRequests the broker receives; it only observes.
type produceObserver struct {
	mu   sync.Mutex
	acks map[string][]int16
	pids map[string][]int64
}

func observeProduce(b *embedded.Broker) *produceObserver {
	o := &produceObserver{acks: map[string][]int16{}, pids: map[string][]int64{}}
	b.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, rt := range pr.Topics {
			o.acks[rt.Topic] = append(o.acks[rt.Topic], pr.Acks)
			for _, rp := range rt.Partitions {
				var batch kmsg.RecordBatch
				if err := batch.ReadFrom(rp.Records); err == nil {
					o.pids[rt.Topic] = append(o.pids[rt.Topic], batch.ProducerID)
				}
			}
		}
		return nil, nil, false // not handled: the broker answers as usual
	})
	return o
}

func (o *produceObserver) seen(topic string) ([]int16, []int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int16(nil), o.acks[topic]...), append([]int64(nil), o.pids[topic]...)
}

func TestProduceEachAcksMode(t *testing.T) {
	modes := []struct {
		acks    client.Acks
		wire    int16
		idempot bool
	}{{client.AcksNone, 0, false}, {client.AcksLeader, 1, false}, {client.AcksAll, -1, true}}
	var topics []embedded.Topic
	for _, m := range modes {
		topics = append(topics, embedded.Topic{Name: "acks-" + m.acks.String()})
	}
	b := kafkatest.BrokerWith(t, topics)
	obs := observeProduce(b)
	for _, m := range modes {
		t.Run(m.acks.String(), func(t *testing.T) {
			topic := "acks-" + m.acks.String()
			p := testProducer(t, b.Addr(), m.acks, 5*time.Second, nil)
			headers := []client.Header{
				{Key: "content-type", Value: []byte("application/json")},
				{Key: "gateway:correlation-id", Value: []byte("cid-" + m.acks.String())},
				{Key: "empty", Value: []byte{}},
				{Key: "content-type", Value: []byte("repeated")},
			}
			value := []byte(`{"acks":"` + m.acks.String() + `"}`)
			start := time.Now()
			part, off, err := p.Produce(kafkatest.Ctx(t, 10*time.Second), &client.Record{
				Topic: topic, Key: []byte("key-1"), Value: value, Headers: headers,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("acks=%s: acknowledged in %v at %d@%d", m.acks, time.Since(start), part, off)
			if m.acks == client.AcksNone {
				if off != -1 {
					t.Errorf("offset = %d with acks=0, want -1 (unknown)", off)
				}
				off = 0 // the topic's first record
			}
			got := readBack(t, b.Addr(), topic, part, off)
			if string(got.Key) != "key-1" || !bytes.Equal(got.Value, value) {
				t.Errorf("read back key %q value %q", got.Key, got.Value)
			}
			if len(got.Headers) != len(headers) {
				t.Fatalf("read back %d headers, want %d: %v", len(got.Headers), len(headers), got.Headers)
			}
			for i, h := range headers {
				if got.Headers[i].Key != h.Key || !bytes.Equal(got.Headers[i].Value, h.Value) {
					t.Errorf("header %d = %s=%q, want %s=%q", i, got.Headers[i].Key, got.Headers[i].Value, h.Key, h.Value)
				}
			}
			acks, pids := obs.seen(topic)
			if len(acks) == 0 {
				t.Fatal("the broker saw no ProduceRequest")
			}
			for i, a := range acks {
				if a != m.wire {
					t.Errorf("ProduceRequest %d had acks=%d, want %d", i, a, m.wire)
				}
			}
			if len(pids) == 0 {
				t.Fatal("no record batch could be read from the ProduceRequests")
			}
			for _, pid := range pids {
				if (pid >= 0) != m.idempot {
					t.Errorf("batch producer id %d; idempotent = %v", pid, m.idempot)
				}
			}
		})
	}
}

// A null header value and a null record value (tombstone) survive too.
func TestProduceNullsRoundTrip(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "nulls"}})
	p := testProducer(t, b.Addr(), client.AcksAll, 5*time.Second, nil)
	part, off, err := p.Produce(kafkatest.Ctx(t, 10*time.Second), &client.Record{
		Topic: "nulls", Key: []byte("k"), Value: nil, Headers: []client.Header{{Key: "null", Value: nil}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := readBack(t, b.Addr(), "nulls", part, off)
	if got.Value != nil {
		t.Errorf("value = %q, want null", got.Value)
	}
	if len(got.Headers) != 1 || got.Headers[0].Key != "null" || got.Headers[0].Value != nil {
		t.Errorf("headers = %#v, want one null-valued header", got.Headers)
	}
}

// An unknown topic fails at once, and no request creates it even on a
// broker that auto-creates topics for clients that ask.
func TestProduceUnknownTopicFailsFastAndCreatesNothing(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "exists"}}, kfake.AllowAutoTopicCreation())
	var mu sync.Mutex
	askedToCreate, metadataRequests := 0, 0
	b.Cluster().ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		metadataRequests++
		if req.(*kmsg.MetadataRequest).AllowAutoTopicCreation {
			askedToCreate++
		}
		return nil, nil, false
	})
	const timeout = 5 * time.Second
	p := testProducer(t, b.Addr(), client.AcksAll, timeout, nil)
	p.negTopicTT = 50 * time.Millisecond
	for i := 0; i < 3; i++ {
		start := time.Now()
		_, _, err := p.Produce(kafkatest.Ctx(t, 10*time.Second), &client.Record{Topic: "missing", Value: []byte("x")})
		took := time.Since(start)
		t.Logf("attempt %d: unknown topic failed in %v: %v", i, took, err)
		if !errors.Is(err, ErrNotEnqueued) || !errors.Is(err, client.ErrUnknownTopic) {
			t.Fatalf("err = %v, want ErrNotEnqueued and ErrUnknownTopic", err)
		}
		if took >= timeout/2 {
			t.Errorf("failing took %v, want well within the Kafka timeout %v", took, timeout)
		}
	}
	if b.Cluster().TopicInfo("missing") != nil {
		t.Fatal("producing created the topic")
	}
	mu.Lock()
	if askedToCreate > 0 {
		t.Errorf("%d of %d metadata requests asked the broker to create topics", askedToCreate, metadataRequests)
	}
	if metadataRequests == 0 {
		t.Error("the broker saw no metadata request")
	}
	mu.Unlock()

	// Created later, the topic becomes usable without a restart.
	if err := b.CreateTopics(embedded.Topic{Name: "missing"}); err != nil {
		t.Fatal(err)
	}
	ctx := kafkatest.Ctx(t, 20*time.Second)
	for {
		_, _, err := p.Produce(ctx, &client.Record{Topic: "missing", Value: []byte("x")})
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrUnknownTopic) || ctx.Err() != nil {
			t.Fatalf("after creating the topic: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// With no broker at all, the first produce to a topic cannot get metadata:
// nothing was handed over, and the answer comes within the Kafka timeout.
func TestProduceNoBrokerNotEnqueued(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	const timeout = 2 * time.Second
	p := testProducer(t, addr, client.AcksAll, timeout, nil)
	start := time.Now()
	_, _, err = p.Produce(kafkatest.Ctx(t, 10*time.Second), &client.Record{Topic: "t", Value: []byte("x")})
	took := time.Since(start)
	t.Logf("no broker: failed in %v: %v", took, err)
	if !errors.Is(err, ErrNotEnqueued) {
		t.Fatalf("err = %v, want ErrNotEnqueued", err)
	}
	if took > timeout+200*time.Millisecond {
		t.Errorf("took %v, want within the Kafka timeout %v", took, timeout)
	}
}

// A broker that went away after the producer knew the topic: the record
// is queued but never sent, so it is not enqueued as far as Kafka goes.
func TestProduceBrokerGoneNotEnqueued(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "t"}})
	const timeout = 3 * time.Second
	p := testProducer(t, b.Addr(), client.AcksLeader, timeout, nil)
	ctx := kafkatest.Ctx(t, 20*time.Second)
	if _, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	// Wait for librdkafka's "all brokers down" to reach the producer.
	for !p.current().link.snapshot().down {
		select {
		case <-ctx.Done():
			t.Fatal("the producer never saw the brokers go down")
		case <-time.After(10 * time.Millisecond):
		}
	}
	start := time.Now()
	_, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("after")})
	took := time.Since(start)
	t.Logf("broker gone: failed in %v: %v", took, err)
	if !errors.Is(err, ErrNotEnqueued) {
		t.Fatalf("err = %v, want ErrNotEnqueued", err)
	}
	if took > timeout+250*time.Millisecond {
		t.Errorf("took %v, want within the Kafka timeout %v", took, timeout)
	}
}

// A broker that takes the ProduceRequest and never answers: the record may
// have been written, so the outcome is unknown.
func TestProduceNoAnswerUnacknowledged(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "t"}})
	const timeout = 2 * time.Second
	p := testProducer(t, b.Addr(), client.AcksAll, timeout, nil)
	ctx := kafkatest.Ctx(t, 20*time.Second)
	// Warm up: the idempotent producer's first record waits for its
	// producer id, which on a busy machine can take longer than this
	// short timeout's record timeout (about 0.7 s); only then is the broker
	// made to swallow records.
	for {
		_, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("warm")})
		if err == nil {
			break
		}
		timedOut := errors.Is(err, ErrUnacknowledged) || errors.Is(err, ErrNotEnqueued)
		if !timedOut || ctx.Err() != nil {
			t.Fatal(err)
		}
		t.Logf("warm-up record: %v; again", err)
	}
	swallowed := make(chan struct{}, 16)
	b.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		select {
		case swallowed <- struct{}{}:
		default:
		}
		return nil, nil, true // handled, and no answer
	})
	start := time.Now()
	_, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("lost")})
	took := time.Since(start)
	t.Logf("no answer: failed in %v: %v", took, err)
	if !errors.Is(err, ErrUnacknowledged) {
		t.Fatalf("err = %v, want ErrUnacknowledged", err)
	}
	if took > timeout+250*time.Millisecond { // Produce's own bound, plus scheduling
		t.Errorf("took %v, want within the Kafka timeout %v", took, timeout)
	}
	select {
	case <-swallowed:
	default:
		t.Error("the broker never received the record")
	}
}

func TestProduceTooLargeRejected(t *testing.T) {
	b := kafkatest.BrokerWith(t, nil)
	if err := b.Cluster().CreateTopic("small", 1, map[string]string{"max.message.bytes": "1000"}); err != nil {
		t.Fatal(err)
	}
	p := testProducer(t, b.Addr(), client.AcksAll, 5*time.Second, nil)
	ctx := kafkatest.Ctx(t, 10*time.Second)

	// The broker refuses a batch above the topic's max.message.bytes.
	_, _, err := p.Produce(ctx, &client.Record{Topic: "small", Value: bytes.Repeat([]byte("x"), 5000)})
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.TooLarge() {
		t.Fatalf("err = %v, want a RejectedError for size", err)
	}
	t.Logf("broker refusal: %v (code %d)", err, rej.Code)
	if !strings.Contains(rej.Reason, "too large") {
		t.Errorf("reason %q does not say why", rej.Reason)
	}

	// librdkafka refuses a record above message.max.bytes before sending it.
	_, _, err = p.Produce(ctx, &client.Record{Topic: "small", Value: bytes.Repeat([]byte("x"), 1_100_000)})
	if !errors.As(err, &rej) || !rej.TooLarge() {
		t.Fatalf("err = %v, want a RejectedError for size", err)
	}
	t.Logf("client refusal: %v", err)
	if !strings.Contains(rej.Reason, "message.max.bytes") {
		t.Errorf("reason %q does not say why", rej.Reason)
	}

	// A small record still goes through.
	if _, _, err := p.Produce(ctx, &client.Record{Topic: "small", Value: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
}

// An ACL refusal (injected as a kfake fault) is final: the broker's reason.
func TestProduceNotAuthorizedRejected(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "t"}})
	p := testProducer(t, b.Addr(), client.AcksLeader, 5*time.Second, nil)
	ctx := kafkatest.Ctx(t, 10*time.Second)
	if _, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("allowed")}); err != nil {
		t.Fatal(err)
	}
	b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Err: kerr.TopicAuthorizationFailed})
	start := time.Now()
	_, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("refused")})
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.NotAuthorized() || rej.TooLarge() {
		t.Fatalf("err = %v, want a RejectedError for authorization", err)
	}
	t.Logf("refused in %v: %v", time.Since(start), err)
}

func TestProduceCanceledContext(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "t"}})
	p := testProducer(t, b.Addr(), client.AcksAll, 5*time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("x")})
	if !errors.Is(err, ErrNotEnqueued) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrNotEnqueued wrapping context.Canceled", err)
	}
}

// A fatal error of the idempotent producer retires it; the next produce
// goes to a new instance.
func TestProduceFatalErrorReplacesProducer(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "t"}})
	sink := &kafkatest.LogSink{}
	p := testProducer(t, b.Addr(), client.AcksAll, 5*time.Second, slog.New(sink))
	ctx := kafkatest.Ctx(t, 20*time.Second)
	if _, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	old := p.current()
	old.kp.TestFatalError(kafka.ErrOutOfOrderSequenceNumber, "injected by the test")
	for p.Replaced() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the producer was not replaced")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if p.current() == old {
		t.Fatal("the current producer is still the failed one")
	}
	part, off, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("two")})
	if err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, b.Addr(), "t", part, off); string(got.Value) != "two" {
		t.Fatalf("read back %q", got.Value)
	}
	if !sink.Has("fatal producer error; the producer was replaced") {
		t.Errorf("the replacement was not logged: %v", sink.Messages())
	}
}

// Many concurrent requests share one producer and its one events loop.
func TestProduceConcurrentRequests(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "t", Partitions: 3}})
	p := testProducer(t, b.Addr(), client.AcksAll, 5*time.Second, nil)
	ctx := kafkatest.Ctx(t, 20*time.Second)
	const n = 300
	type pos struct {
		part int32
		off  int64
	}
	var mu sync.Mutex
	seen := map[pos]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part, off, err := p.Produce(ctx, &client.Record{Topic: "t", Key: []byte(fmt.Sprint("k", i%10)), Value: []byte(fmt.Sprint(i))})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[pos{part, off}] {
				errs <- fmt.Errorf("two records acknowledged at %d@%d", part, off)
			}
			seen[pos{part, off}] = true
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d concurrent produces in %v", n, time.Since(start))
	if len(seen) != n {
		t.Errorf("%d distinct positions, want %d", len(seen), n)
	}
}

// Every error librdkafka can fail a record with is sorted as librdkafka's
// rd_kafka_err_action sorts it: not persisted (503), possibly persisted
// (504), or final.
func TestProduceErrorPersistence(t *testing.T) {
	for code, want := range map[kafka.ErrorCode]persistenceStatus{
		kafka.ErrNotEnoughReplicas:            notPersisted,
		kafka.ErrKafkaStorageError:            notPersisted,
		kafka.ErrTimedOutQueue:                notPersisted,
		kafka.ErrNotLeaderForPartition:        notPersisted,
		kafka.ErrTimedOut:                     possiblyPersisted,
		kafka.ErrRequestTimedOut:              possiblyPersisted,
		kafka.ErrNotEnoughReplicasAfterAppend: possiblyPersisted,
		kafka.ErrTransport:                    possiblyPersisted,
		kafka.ErrMsgSizeTooLarge:              persistenceOther,
		kafka.ErrTopicAuthorizationFailed:     persistenceOther,
	} {
		if got := persistence(code); got != want {
			t.Errorf("%v: %d, want %d", code, got, want)
		}
	}
}

// A Send whose first Wait ends with its caller can be waited on again: the
// second Wait gets the broker's real answer, the record is in the log once,
// and the outcome is counted once, as acked.
func TestSendWaitAgainAfterTheCallerLeft(t *testing.T) {
	b := kafkatest.BrokerWith(t, []embedded.Topic{{Name: "t"}})
	counts := &Counts{}
	p, err := New(Options{
		Name: "kafka0", Properties: map[string]string{"bootstrap.servers": b.Addr()},
		KafkaTimeout: 10 * time.Second, Acks: client.AcksLeader, Results: counts,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx := kafkatest.Ctx(t, 30*time.Second)
	if _, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("warm")}); err != nil {
		t.Fatal(err)
	}

	held, wake := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cluster := b.Cluster()
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() {
			close(held)
			cluster.SleepControl(func() { <-wake })
		})
		return nil, nil, false // the broker answers it (after the wake-up)
	})
	s, err := p.Send(ctx, &client.Record{Topic: "t", Key: []byte("k"), Value: []byte("held"),
		Headers: []client.Header{{Key: "h", Value: []byte("v")}}})
	if err != nil {
		t.Fatal(err)
	}
	caller, leave := context.WithCancel(ctx)
	go func() {
		<-held
		leave()
	}()
	_, _, err = s.Wait(caller)
	if !errors.Is(err, ErrUnacknowledged) || !errors.Is(err, context.Canceled) {
		t.Fatalf("first Wait: %v, want ErrUnacknowledged wrapping context.Canceled", err)
	}
	close(wake)
	part, off, err := s.Wait(ctx)
	if err != nil {
		t.Fatalf("second Wait: %v", err)
	}
	got := readBack(t, b.Addr(), "t", part, off)
	if string(got.Value) != "held" || string(got.Key) != "k" || len(got.Headers) != 1 || string(got.Headers[0].Value) != "v" {
		t.Errorf("read back key %q value %q headers %v", got.Key, got.Value, got.Headers)
	}
	snap := counts.Snapshot()
	if snap["acked"] != 2 {
		t.Errorf("counts %v, want 2 acked (the warm-up and the held record) and nothing else", snap)
	}
	for r, n := range snap {
		if r != "acked" && n != 0 {
			t.Errorf("counts %v: %s counted", snap, r)
		}
	}
}

// A record written to a topic deleted and created again since the producer
// last wrote to it is refused out of sequence (the new partition does not
// know the producer): that is "not written", not "may or may not", and the
// next record, through the replacement producer, is written.
func TestProduceToRecreatedTopicIsNotWritten(t *testing.T) {
	topic := embedded.Topic{Name: "t"}
	b := kafkatest.BrokerWith(t, []embedded.Topic{topic})
	p := testProducer(t, b.Addr(), client.AcksAll, 5*time.Second, nil)
	ctx := kafkatest.Ctx(t, 20*time.Second)
	for range 3 {
		if _, _, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("old")}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": b.Addr(), "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if res, err := a.DeleteTopics(ctx, []string{"t"}); err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("deleting the topic: %v %v", err, res)
	}
	if err := b.CreateTopics(topic); err != nil {
		t.Fatal(err)
	}
	_, _, err = p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("new")})
	if !errors.Is(err, ErrNotEnqueued) || !errors.Is(err, errSequence) {
		t.Fatalf("the first record after the recreation: %v, want ErrNotEnqueued wrapping errSequence", err)
	}
	part, off, err := p.Produce(ctx, &client.Record{Topic: "t", Value: []byte("new")})
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if off != 0 {
		t.Errorf("the retry was written at offset %d, want 0: the refused record is not in the log", off)
	}
	if got := readBack(t, b.Addr(), "t", part, off); string(got.Value) != "new" {
		t.Fatalf("read back %q", got.Value)
	}
}
