package client

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func TestReconnectBackoffCapped(t *testing.T) {
	// The default, unless the binding sets it: see Config.
	if got := (*Config(nil, 5*time.Second))["reconnect.backoff.max.ms"]; got != 1000 {
		t.Errorf("reconnect.backoff.max.ms = %v, want 1000", got)
	}
	set := map[string]string{"reconnect.backoff.max.ms": "5000"}
	if got := (*Config(set, 5*time.Second))["reconnect.backoff.max.ms"]; got != "5000" {
		t.Errorf("reconnect.backoff.max.ms set by the binding = %v, want 5000", got)
	}
	for name, cm := range map[string]kafka.ConfigMap{
		"producer": *ProducerConfig(nil, 5*time.Second, AcksLeader, 0),
		"consumer": *ConsumerConfig(nil, 5*time.Second, "g"),
	} {
		if cm["reconnect.backoff.max.ms"] != 1000 {
			t.Errorf("%s: reconnect.backoff.max.ms = %v, want 1000", name, cm["reconnect.backoff.max.ms"])
		}
	}
}

func TestProducerConfigOwnsItsSettings(t *testing.T) {
	cm := ProducerConfig(map[string]string{
		"bootstrap.servers": "x", "acks": "1", "request.required.acks": "0", "enable.idempotence": "false",
		"delivery.timeout.ms": "60000", "linger.ms": "7", "partitioner": "consistent_random",
		"allow.auto.create.topics": "true", "retries": "0", "message.send.max.retries": "3",
	}, 5*time.Second, AcksAll, 0)
	want := map[string]any{
		// The record times out 2 s before the Kafka timeout; a request a third
		// of that, so one retry fits.
		"acks": "all", "enable.idempotence": true, "message.timeout.ms": 3000,
		"request.timeout.ms": 1000, "socket.timeout.ms": 1000,
		"linger.ms": "7", "partitioner": "consistent_random", "allow.auto.create.topics": false,
		"topic.metadata.propagation.max.ms": 5000, "go.delivery.report.fields": "none",
	}
	for k, v := range want {
		if (*cm)[k] != v {
			t.Errorf("%s = %v, want %v", k, (*cm)[k], v)
		}
	}
	// The idempotent producer keeps librdkafka's own retries.
	for _, k := range []string{"request.required.acks", "delivery.timeout.ms", "max.in.flight.requests.per.connection",
		"retries", "message.send.max.retries"} {
		if _, ok := (*cm)[k]; ok {
			t.Errorf("%s is set (%v)", k, (*cm)[k])
		}
	}
	// Without idempotence a possibly written batch is never re-sent: a user's
	// retries setting loses.
	for acks, name := range map[Acks]string{AcksLeader: "1", AcksNone: "0"} {
		cm = ProducerConfig(map[string]string{"retries": "5", "message.send.max.retries": "5"}, 5*time.Second, acks, 0)
		for k, v := range map[string]any{
			"acks": name, "max.in.flight.requests.per.connection": 1, "linger.ms": 1, "partitioner": "murmur2_random",
			"message.send.max.retries": 0, "message.timeout.ms": 3000, "request.timeout.ms": 3000,
		} {
			if (*cm)[k] != v {
				t.Errorf("%s acks: %s = %v, want %v", acks, k, (*cm)[k], v)
			}
		}
		for _, k := range []string{"enable.idempotence", "retries", "socket.timeout.ms"} {
			if _, ok := (*cm)[k]; ok {
				t.Errorf("%s acks: %s is set", acks, k)
			}
		}
	}
}

// message.max.bytes is raised to the largest record the limits allow,
// never lowered below the user's value, and kept within librdkafka's range.
func TestProducerRecordLimit(t *testing.T) {
	for _, c := range []struct {
		user string
		want int
		got  any
	}{
		{"", 0, nil},
		{"", 1179648, 1179648},
		{"2000000", 1179648, 2000000},
		{"", 2000000000, 1000000000},
	} {
		props := map[string]string{"bootstrap.servers": "x"}
		if c.user != "" {
			props["message.max.bytes"] = c.user
		}
		cm := ProducerConfig(props, 0, AcksNone, c.want)
		got, _ := cm.Get("message.max.bytes", nil)
		if got != c.got {
			t.Errorf("user %q, limits %d: message.max.bytes %v, want %v", c.user, c.want, got, c.got)
		}
	}
}
