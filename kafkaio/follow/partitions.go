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
	if len(topics) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := admin.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(topics), kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		return nil, fmt.Errorf("describing %d topics: %w", len(topics), err)
	}
	counts := make(map[string]int, len(res.TopicDescriptions))
	var errs []error
	for _, d := range res.TopicDescriptions {
		if d.Error.Code() != kafka.ErrNoError {
			errs = append(errs, fmt.Errorf("describing topic %s: %w", d.Name, d.Error))
			continue
		}
		counts[d.Name] = len(d.Partitions)
	}
	return counts, errors.Join(errs...)
}
