package grpckafka

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
)

// readBackStatus answers a repeated call whose stored replies the reply
// index evicted and could not read back from their topic: expired, as a
// call past the idempotency window is, when the topic no longer holds them;
// else UNAVAILABLE, as when Kafka is (nothing was written again, and a
// retry reads them again).
func readBackStatus(err error, replyTo string) handler.Status {
	var removed *replies.RemovedError
	if errors.As(err, &removed) {
		return handler.NewStatus(codes.FailedPrecondition, fmt.Sprintf(
			"expired: the replies of this call were written, but they are no longer stored: %v; the call was not written again", removed))
	}
	return handler.NewStatus(codes.Unavailable, fmt.Sprintf(
		"the replies of this call are stored in topic %q but could not be read back from Kafka (%v); nothing was written again: retry to get them", replyTo, err))
}
