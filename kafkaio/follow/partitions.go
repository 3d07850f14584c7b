package follow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Assignment-only consumers are never told of partitions added to a topic:
// every reader of a cluster looks for them every PartitionCheck, with one
// describe request for all its topics — each Follower (the reply index, the
// written-id index), the views and the log tail.

// DefaultPartitionCheck is how often partition counts are read when the
// options leave it out: a record a producer writes to an added partition
// reaches its reader at most this late (added partitions are read from their
// start, so none is missed).
const DefaultPartitionCheck = 30 * time.Second

// CheckEvery calls check every interval until ctx ends. A failed check
// changes nothing (the partitions read so far are still read): it is logged
// at debug and the next one tries again.
func CheckEvery(ctx context.Context, interval time.Duration, logger *slog.Logger, what string, check func() error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := check(); err != nil && ctx.Err() == nil {
			logger.Debug("checking the partition counts of "+what+" failed; retrying at the next check", "err", err)
		}
	}
}

// PartitionCounts describes topics in one request, bounded by timeout, and
// returns the partition count of each topic described without error; the
// errors of the others are joined in err.
func PartitionCounts(ctx context.Context, admin *kafka.AdminClient, topics []string, timeout time.Duration) (map[string]int, error) {
	states, err := Describe(ctx, admin, topics, timeout)
	if len(states) == 0 {
		return nil, err
	}
	counts := make(map[string]int, len(states))
	var errs []error
	for name, st := range states {
		if st.Unknown {
			errs = append(errs, fmt.Errorf("describing topic %s: %w", name, kafka.NewError(kafka.ErrUnknownTopicOrPart, "unknown topic", false)))
			continue
		}
		counts[name] = st.Partitions
	}
	return counts, errors.Join(append(errs, err)...)
}

// TopicState is what a describe request tells of one topic.
type TopicState struct {
	Partitions int
	// ID is the topic's id (KIP-516): a topic deleted and created again
	// under the same name has another, so a reader can tell the two
	// generations apart. Zero when the cluster gives none.
	ID [16]byte
	// Unknown is set when the cluster says the topic does not exist.
	Unknown bool
}

// Describe describes topics in one request, bounded by timeout, and returns
// the state of each topic described without error or found not to exist;
// the errors of the others are joined in err.
func Describe(ctx context.Context, admin *kafka.AdminClient, topics []string, timeout time.Duration) (map[string]TopicState, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := admin.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(topics), kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		return nil, fmt.Errorf("describing %d topics: %w", len(topics), err)
	}
	states := make(map[string]TopicState, len(res.TopicDescriptions))
	var errs []error
	for _, d := range res.TopicDescriptions {
		switch d.Error.Code() {
		case kafka.ErrNoError:
			states[d.Name] = TopicState{Partitions: len(d.Partitions), ID: TopicID(d.TopicID)}
		case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
			states[d.Name] = TopicState{Unknown: true}
		default:
			errs = append(errs, fmt.Errorf("describing topic %s: %w", d.Name, d.Error))
		}
	}
	return states, errors.Join(errs...)
}

// TopicID is a topic id as 16 bytes, most significant first.
func TopicID(u kafka.UUID) [16]byte {
	var id [16]byte
	hi, lo := u.GetMostSignificantBits(), u.GetLeastSignificantBits()
	for i := 0; i < 8; i++ {
		id[i] = byte(uint64(hi) >> (56 - 8*i))
		id[8+i] = byte(uint64(lo) >> (56 - 8*i))
	}
	return id
}
