package grpckafka

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
)

// A repeated call whose stored replies could not be read back: expired
// (FAILED_PRECONDITION, as past the idempotency window) when the topic no
// longer holds them; UNAVAILABLE when Kafka did not answer.
func TestReadBackStatus(t *testing.T) {
	removed := readBackStatus(&replies.RemovedError{Topic: "replies", Partition: 0, Offset: 3, LogStart: 10}, "replies")
	if removed.Code != codes.FailedPrecondition || !strings.HasPrefix(removed.Message, "expired: ") ||
		!strings.Contains(removed.Message, `removed from topic "replies" by its retention`) {
		t.Errorf("removed: %v %q", removed.Code, removed.Message)
	}
	failed := readBackStatus(fmt.Errorf("%w: no answer", client.ErrNotReady), "replies")
	if failed.Code != codes.Unavailable || !strings.Contains(failed.Message, "nothing was written again: retry") {
		t.Errorf("failed: %v %q", failed.Code, failed.Message)
	}
}
