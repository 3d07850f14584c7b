package produce

import (
	"context"
	"fmt"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

func TestProduceCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "acked"},
		{&RejectedError{Code: int(kafka.ErrMsgSizeTooLarge)}, "message_too_large"},
		{fmt.Errorf("producing: %w", &RejectedError{Code: int(kafka.ErrTopicAuthorizationFailed)}), "not_authorized"},
		{&RejectedError{Code: int(kafka.ErrInvalidRecord)}, "rejected"},
		{fmt.Errorf("%w: %w", ErrNotEnqueued, client.ErrUnknownTopic), "unknown_topic"},
		{fmt.Errorf("%w: %w: %w", ErrNotEnqueued, errNoBroker, kafka.NewError(kafka.ErrMsgTimedOut, "", false)), "broker_unreachable"},
		{fmt.Errorf("%w: %w", ErrUnacknowledged, kafka.NewError(kafka.ErrMsgTimedOut, "", false)), "timeout"},
		{fmt.Errorf("%w: %w", ErrNotEnqueued, kafka.NewError(kafka.ErrQueueFull, "", false)), "queue_full"},
		{fmt.Errorf("%w: %w", ErrUnacknowledged, kafka.NewError(kafka.ErrTransport, "", false)), "broker_unreachable"},
		{fmt.Errorf("%w: no acknowledgement within 5s", ErrUnacknowledged), "timeout"},
		{fmt.Errorf("%w: %w within 5s", ErrNotEnqueued, errNoMetadata), "timeout"},
		{fmt.Errorf("%w: stopped waiting: %w", ErrUnacknowledged, context.Canceled), "cancelled"},
		{fmt.Errorf("%w: the producer is closed", ErrNotEnqueued), "other"},
	} {
		if got := produceCause(c.err); got != c.want {
			t.Errorf("%v: %s, want %s", c.err, got, c.want)
		}
	}
	var n Counts
	n.count(nil)
	n.count(nil)
	n.count(&RejectedError{Code: int(kafka.ErrMsgSizeTooLarge)})
	snap := n.Snapshot()
	if len(snap) != len(Results) || snap["acked"] != 2 || snap["message_too_large"] != 1 || snap["other"] != 0 {
		t.Errorf("counts %v", snap)
	}
}
