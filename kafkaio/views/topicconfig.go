package views

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// TopicConfig returns a topic's configuration as the broker describes it
// (name → value, defaults included), through the cluster's admin handle:
// one DescribeConfigs request, bounded by the Kafka timeout and ctx. A topic
// that does not exist fails with ErrUnknownTopic. Callers cache the answer:
// this is a broker round trip.
func (c *Views) TopicConfig(ctx context.Context, topic string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.KafkaTimeout)
	defer cancel()
	res, err := c.admin.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic}})
	if err != nil {
		return nil, fmt.Errorf("describing the configuration of topic %s: %w", topic, err)
	}
	if len(res) != 1 {
		return nil, fmt.Errorf("describing the configuration of topic %s: %d results", topic, len(res))
	}
	switch res[0].Error.Code() {
	case kafka.ErrNoError:
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
		return nil, fmt.Errorf("%w: %s", client.ErrUnknownTopic, topic)
	default:
		return nil, fmt.Errorf("describing the configuration of topic %s: %w", topic, res[0].Error)
	}
	out := make(map[string]string, len(res[0].Config))
	for name, e := range res[0].Config {
		out[name] = e.Value
	}
	return out, nil
}
