// Package kafkaio is everything that touches librdkafka: client settings,
// and per cluster (Cluster) the views of compacted topics (Views), the reply
// index, the log tails gRPC fetch streams read (LogTails), and the
// producers. librdkafka's own log lines are forwarded to slog
// (librdkafka_logs.go). It knows nothing of HTTP, gRPC or Envoy.
package kafkaio

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// DefaultKafkaTimeout bounds Kafka calls of a client given no KafkaTimeout.
// The processor always passes its limits.kafka-timeout; this serves callers
// of the package on their own (the responder, tests).
const DefaultKafkaTimeout = 5 * time.Second

// Settings we own on every client (DESIGN §7). User properties pass through
// unless they collide with these.
func baseConfig(props map[string]string, kafkaTimeout time.Duration) *kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range props {
		cm[k] = v
	}
	// Producers default to creating topics on metadata requests; a request must
	// never create a topic.
	cm["allow.auto.create.topics"] = false
	ms := int(kafkaTimeout / time.Millisecond)
	if ms <= 0 {
		ms = int(DefaultKafkaTimeout / time.Millisecond)
	}
	cm["topic.metadata.propagation.max.ms"] = ms
	// Brokers log and quota by client id; librdkafka's default is "rdkafka".
	if _, ok := props["client.id"]; !ok {
		cm["client.id"] = DefaultClientID()
	}
	// librdkafka logs go through one channel per client into slog.
	cm["go.logs.channel.enable"] = true
	if _, ok := props["log_level"]; !ok {
		cm["log_level"] = 4 // warnings and worse
	}
	// librdkafka's reconnect backoff grows to 10 s while a broker is down,
	// and a producer's records time out only when its broker threads wake:
	// a record that never left was reported up to 6 s late, after the
	// answer had to go out as "may or may not have been written" (504)
	// rather than "not written, retry" (503). At 1 s a record's timeout is
	// reported within about a second of it, and a broker that comes back is
	// found within a second.
	if _, ok := props["reconnect.backoff.max.ms"]; !ok {
		cm["reconnect.backoff.max.ms"] = 1000
	}
	// Statistics feed the metrics (broker round trips, queues, lag); each
	// client folds them in where it reads its events.
	if _, ok := props["statistics.interval.ms"]; !ok {
		cm["statistics.interval.ms"] = int(DefaultStatisticsInterval / time.Millisecond)
	}
	return &cm
}

// withoutStatistics is for short-lived consumers: nobody reads their
// statistics.
func withoutStatistics(cm *kafka.ConfigMap) *kafka.ConfigMap {
	(*cm)["statistics.interval.ms"] = 0
	return cm
}

// consumerConfig is for assignment-only consumers: a per-replica group id is
// required by the Go client, but the group is never joined and nothing is
// committed.
func consumerConfig(props map[string]string, kafkaTimeout time.Duration, groupID string) *kafka.ConfigMap {
	cm := baseConfig(props, kafkaTimeout)
	(*cm)["group.id"] = groupID
	(*cm)["enable.auto.commit"] = false
	(*cm)["enable.auto.offset.store"] = false
	(*cm)["enable.partition.eof"] = true
	(*cm)["auto.offset.reset"] = "earliest"
	// Wake-ups travel on the live consumer: keep its fetch wait short so an
	// idle broker answers quickly after a write.
	if _, ok := props["fetch.wait.max.ms"]; !ok {
		(*cm)["fetch.wait.max.ms"] = 100
	}
	return cm
}

// lookupConfig is the configuration of a client that only looks things up
// (metadata, offsets): a producer that never produces.
func lookupConfig(props map[string]string, kafkaTimeout time.Duration) *kafka.ConfigMap {
	cm := baseConfig(props, kafkaTimeout)
	(*cm)["go.delivery.reports"] = false
	return cm
}
