package kafkaio

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func TestReconnectBackoffCapped(t *testing.T) {
	// The default, unless the binding sets it: see baseConfig.
	if got := (*baseConfig(nil, 5*time.Second))["reconnect.backoff.max.ms"]; got != 1000 {
		t.Errorf("reconnect.backoff.max.ms = %v, want 1000", got)
	}
	set := map[string]string{"reconnect.backoff.max.ms": "5000"}
	if got := (*baseConfig(set, 5*time.Second))["reconnect.backoff.max.ms"]; got != "5000" {
		t.Errorf("reconnect.backoff.max.ms set by the binding = %v, want 5000", got)
	}
	for name, cm := range map[string]kafka.ConfigMap{
		"producer": *producerConfig(ProducerOptions{Acks: AcksLeader, KafkaTimeout: 5 * time.Second}),
		"consumer": *consumerConfig(nil, 5*time.Second, "g"),
	} {
		if cm["reconnect.backoff.max.ms"] != 1000 {
			t.Errorf("%s: reconnect.backoff.max.ms = %v, want 1000", name, cm["reconnect.backoff.max.ms"])
		}
	}
}
