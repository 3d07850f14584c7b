// Command service-responder is a service behind kafka-ext-proc written with
// nothing but a Kafka client (confluent-kafka-go): it reads the request
// records of the routes in config.yaml and writes their replies, as
// docs/service-contract.md describes. It answers
//
//   - POST /orders/{id} (topic orders-requests): 201 with a location and a
//     JSON body; 404 problem+json for order 0; a body with "slow": true is
//     answered after -late (longer than the route's reply-timeout), so the
//     client's first attempt times out and its retry gets the late reply;
//   - example.Echo (topic echo-requests): every message echoed, then OK; the
//     message "missing" ends the call NOT_FOUND with a message and trailers.
//
// It prints "ready" once its consumer group gave it its partitions.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka bootstrap servers")
	late := flag.Duration("late", 4*time.Second, "how long a \"slow\" order's reply waits")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *brokers, *late); err != nil {
		log.Fatal(err)
	}
}

// The names every record uses: the binding's defaults
// (options.correlation.headers).
const (
	correlationHeader = "gateway:correlation-id"
	replyToHeader     = "gateway:reply-to"
	fingerprintHeader = "gateway:fingerprint"
	statusHeader      = "gateway:status"
	messageHeader     = "gateway:message"
)

func run(ctx context.Context, brokers string, late time.Duration) error {
	consumer, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": brokers,
		"group.id":          "service-responder",
		// Requests written before the service first joined are answered
		// too: a client may be waiting for them.
		"auto.offset.reset": "earliest",
	})
	if err != nil {
		return fmt.Errorf("creating the consumer: %w", err)
	}
	defer consumer.Close()
	producer, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":  brokers,
		"enable.idempotence": true, // a retried batch is not written twice
		"linger.ms":          1,
	})
	if err != nil {
		return fmt.Errorf("creating the producer: %w", err)
	}
	defer producer.Close()
	// Ready once the group gave this instance its partitions: a request
	// sent after that is read (one sent before is too, from the earliest
	// offset, once the group has formed). The client assigns them itself
	// after the callback.
	var ready sync.Once
	err = consumer.SubscribeTopics([]string{"orders-requests", "echo-requests"}, func(_ *kafka.Consumer, ev kafka.Event) error {
		if _, ok := ev.(kafka.AssignedPartitions); ok {
			ready.Do(func() { fmt.Println("ready") })
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}

	s := &service{out: producer, late: late, seen: newSeen(10_000), ended: newSeen(10_000)}
	for ctx.Err() == nil {
		m, err := consumer.ReadMessage(100 * time.Millisecond)
		if err != nil {
			if e, ok := err.(kafka.Error); ok && e.IsTimeout() {
				continue
			}
			log.Printf("reading: %v", err)
			continue
		}
		if err := s.handle(ctx, m); err != nil {
			log.Printf("answering %s: %v", header(m, correlationHeader), err)
		}
	}
	return nil
}

// service answers request records.
type service struct {
	out  *kafka.Producer
	late time.Duration
	// seen holds the records answered, to skip a duplicate; ended the
	// gRPC calls this service ended before their end record came.
	seen, ended *seen
}

func (s *service) handle(ctx context.Context, m *kafka.Message) error {
	cid := header(m, correlationHeader)
	if cid == "" {
		return nil // not a request of the processor's
	}
	// A record is a duplicate when its correlation id and its fingerprint
	// were answered: the fingerprint differs for every record of a call,
	// identical messages of one call included. Only requests with an
	// idempotency key carry one, and only they can be written twice (by
	// two replicas at one instant); the records of a request without a key
	// are written once each.
	if fp := header(m, fingerprintHeader); fp != "" && !s.seen.add(cid+" "+fp) {
		return nil
	}
	if *m.TopicPartition.Topic == "orders-requests" {
		return s.order(ctx, m, cid)
	}
	return s.echo(ctx, m, cid)
}

// reply writes one reply record: to the topic the request names, keyed by
// the correlation id (so a call's replies stay in order in one partition),
// with the correlation header, which is what identifies the reply.
func (s *service) reply(ctx context.Context, req *kafka.Message, value []byte, headers ...kafka.Header) error {
	topic := header(req, replyToHeader)
	cid := header(req, correlationHeader)
	rec := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Key:            []byte(cid),
		Value:          value,
		Headers:        append([]kafka.Header{{Key: correlationHeader, Value: []byte(cid)}}, headers...),
	}
	done := make(chan kafka.Event, 1)
	if err := s.out.Produce(rec, done); err != nil {
		return fmt.Errorf("writing the reply: %w", err)
	}
	select {
	case ev := <-done:
		if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error != nil {
			return fmt.Errorf("writing the reply: %w", m.TopicPartition.Error)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func header(m *kafka.Message, name string) string {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// seen is a bounded set: the oldest entries go first.
type seen struct {
	set   map[string]struct{}
	order []string
	max   int
}

func newSeen(n int) *seen { return &seen{set: map[string]struct{}{}, max: n} }

// add adds id and says whether it was new.
func (s *seen) add(id string) bool {
	if _, ok := s.set[id]; ok {
		return false
	}
	s.set[id] = struct{}{}
	s.order = append(s.order, id)
	if len(s.order) > s.max {
		delete(s.set, s.order[0])
		s.order = s.order[1:]
	}
	return true
}

func (s *seen) has(id string) bool {
	_, ok := s.set[id]
	return ok
}
