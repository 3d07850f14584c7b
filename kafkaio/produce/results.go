package produce

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
)

// ProduceResults are the outcomes of Produce calls counted by
// Counts: acked, or the cause of the failure. The set is fixed, so a
// metric labelled by it stays bounded whatever librdkafka reports.
var Results = produceResults[:]

var produceResults = [...]string{
	"acked",              // acknowledged under the producer's acks mode
	"timeout",            // no acknowledgement (or no metadata) within the Kafka timeout
	"broker_unreachable", // no broker answered: never sent, or transport failure
	"queue_full",         // librdkafka's local queue was full
	"message_too_large",  // larger than the producer's or the topic's limit
	"unknown_topic",      // the topic does not exist
	"not_authorized",     // refused by an ACL
	"rejected",           // another broker error, final after librdkafka's retries
	"cancelled",          // the caller stopped waiting (client gone, drain)
	"other",              // anything else (producer closed, purged, fatal)
}

// Counts counts Produce outcomes by ProduceResults entry.
type Counts struct {
	n [len(produceResults)]atomic.Uint64
}

func (c *Counts) count(err error) {
	if c == nil {
		return
	}
	cause := produceCause(err)
	for i, r := range Results {
		if r == cause {
			c.n[i].Add(1)
			return
		}
	}
}

// Snapshot returns the counts of every result, zeros included.
func (c *Counts) Snapshot() map[string]uint64 {
	out := make(map[string]uint64, len(Results))
	for i, r := range Results {
		out[r] = c.n[i].Load()
	}
	return out
}

// Causes some failures carry, beside ErrNotEnqueued.
var (
	errNoBroker   = errors.New("no broker was reachable")
	errNoMetadata = errors.New("no metadata for the topic")
	// errSequence: the broker refused the record as out of sequence, having
	// lost the idempotent producer's state on the partition (see outcome).
	errSequence = errors.New("the partition lost the producer's sequence, as when its topic is deleted and created again, and refused the record")
)

// produceCause maps a Produce error to one of ProduceResults.
func produceCause(err error) string {
	if err == nil {
		return "acked"
	}
	var rej *RejectedError
	if errors.As(err, &rej) {
		switch {
		case rej.TooLarge():
			return "message_too_large"
		case rej.NotAuthorized():
			return "not_authorized"
		}
		return "rejected"
	}
	switch {
	case errors.Is(err, client.ErrUnknownTopic):
		return "unknown_topic"
	case errors.Is(err, errNoBroker):
		return "broker_unreachable"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	case errors.Is(err, errNoMetadata):
		return "timeout"
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke.Code() {
		case kafka.ErrQueueFull:
			return "queue_full"
		case kafka.ErrMsgTimedOut, kafka.ErrTimedOut, kafka.ErrTimedOutQueue:
			return "timeout"
		case kafka.ErrAllBrokersDown, kafka.ErrTransport:
			return "broker_unreachable"
		case kafka.ErrMsgSizeTooLarge:
			return "message_too_large"
		}
	}
	if errors.Is(err, ErrUnacknowledged) {
		return "timeout"
	}
	return "other"
}
