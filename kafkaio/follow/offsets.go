package follow

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// What the readers that follow topics from a point in time (the reply index
// and the written-id index) use to choose where to start: how many
// partitions a topic has, and offsets of all its partitions in one request;
// and how every reader assigns partitions added to a topic.

// MetadataClient is a librdkafka client that reads metadata: a consumer or
// a producer.
type MetadataClient interface {
	GetMetadata(topic *string, allTopics bool, timeoutMs int) (*kafka.Metadata, error)
}

// PartitionCount reads the number of partitions of topic; what names
// the topic's role in errors ("reply topic", "request topic").
func PartitionCount(mc MetadataClient, topic, what string, timeout time.Duration) (int, error) {
	ms := int(timeout / time.Millisecond)
	md, err := mc.GetMetadata(&topic, false, ms)
	if err != nil {
		return 0, fmt.Errorf("reading the metadata of %s %s: %w", what, topic, err)
	}
	tm, ok := md.Topics[topic]
	if !ok {
		return 0, fmt.Errorf("reading the metadata of %s %s: not in the answer", what, topic)
	}
	switch tm.Error.Code() {
	case kafka.ErrNoError:
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
		return 0, fmt.Errorf("%w: %s", client.ErrUnknownTopic, topic)
	default:
		return 0, fmt.Errorf("reading the metadata of %s %s: %w", what, topic, tm.Error)
	}
	if len(tm.Partitions) == 0 {
		return 0, fmt.Errorf("%s %s has no partitions yet", what, topic)
	}
	return len(tm.Partitions), nil
}

// ListOffsets looks up spec (kafka.LatestOffsetSpec, or a timestamp in
// milliseconds) for partitions 0..n-1 of topic in one request per leader,
// at read_committed as the consumers read. A timestamp later than every
// record of a partition gives -1 there.
func ListOffsets(ctx context.Context, admin *kafka.AdminClient, topic string, n int, spec kafka.OffsetSpec, timeout time.Duration) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := make(map[kafka.TopicPartition]kafka.OffsetSpec, n)
	for p := 0; p < n; p++ {
		req[kafka.TopicPartition{Topic: &topic, Partition: int32(p)}] = spec
	}
	res, err := admin.ListOffsets(ctx, req,
		kafka.SetAdminRequestTimeout(timeout), kafka.SetAdminIsolationLevel(kafka.IsolationLevelReadCommitted))
	if err != nil {
		return nil, fmt.Errorf("listing the offsets of %s: %w", topic, err)
	}
	out := make([]int64, n)
	found := 0
	for tp, info := range res.ResultInfos {
		if info.Error.Code() != kafka.ErrNoError {
			return nil, fmt.Errorf("listing the offset of %s[%d]: %w", topic, tp.Partition, info.Error)
		}
		if int(tp.Partition) < n {
			out[tp.Partition] = int64(info.Offset)
			found++
		}
	}
	if found != n {
		return nil, fmt.Errorf("listing the offsets of %s: %d of %d partitions answered", topic, found, n)
	}
	return out, nil
}

// AssignAdded assigns partitions old to n-1 of topic at their beginning: a
// partition added later holds only records written since it was created,
// so none is missed. what names the topic's role in the error.
func AssignAdded(cons *kafka.Consumer, topic, what string, old, n int) error {
	assign := make([]kafka.TopicPartition, 0, n-old)
	for p := old; p < n; p++ {
		assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: kafka.OffsetBeginning})
	}
	if err := cons.IncrementalAssign(assign); err != nil {
		return fmt.Errorf("assigning partitions %d to %d added to %s %s: %w", old, n-1, what, topic, err)
	}
	return nil
}
