package main

import (
	"log/slog"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
)

// This file is the load generator's only use of kafkaio (its client settings) and its embedded
// broker, so that a move of those packages changes the imports here alone.

type (
	broker      = embedded.Broker
	brokerTopic = embedded.Topic
)

// startBroker starts an embedded broker on a free loopback port with
// topics.
func startBroker(logger *slog.Logger, topics ...brokerTopic) (*broker, error) {
	return embedded.Start(embedded.Options{Addr: "127.0.0.1:0", Logger: logger, Topics: topics})
}

// liveConsumerConfig is the configuration the processor's live consumer
// runs with (fetch wait, statistics, log channel, …), for props.
func liveConsumerConfig(props map[string]string, groupID string) *kafka.ConfigMap {
	return client.LiveConsumerConfig(props, client.DefaultKafkaTimeout, groupID)
}
