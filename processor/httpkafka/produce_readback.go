package httpkafka

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/capability"
)

// A stored reply the reply index evicted is read back from its topic when
// a replay or a follow-up asks for it (kafkaio.ReplyWatch.Evicted): the
// request waits for that read, which ends within the Kafka timeout, and is
// answered from it as from a reply held in memory.

// readBackWait is how long a request waits for its reply: wait, or, while
// the stored reply is being read back, long enough for the read to end
// (a follow-up without prefer: wait would otherwise answer 202 for a
// reply that was written).
func readBackWait(watch *kafkaio.ReplyWatch, wait, kafkaTimeout time.Duration) time.Duration {
	if watch.Evicted() {
		return max(wait, kafkaTimeout+time.Second)
	}
	return wait
}

// readBackFailure answers a request whose stored reply could not be read
// back: 410 when its topic no longer holds it (its result expired), else
// 503 as for Kafka unavailable (nothing was written again; a retry reads
// again).
func readBackFailure(err error, replyTo string) *capability.HTTPResponse {
	var removed *kafkaio.ReplyRemovedError
	if errors.As(err, &removed) {
		return capability.ProblemResponse(http.StatusGone, fmt.Sprintf(
			"the reply to this request was written, but it is no longer stored: %v; its result expired and the request was not written again", removed))
	}
	if err == nil { // another request started a new read meanwhile
		err = kafkaio.ErrNotReady
	}
	return unavailable(fmt.Sprintf(
		"the reply to this request is stored in topic %q but could not be read back from Kafka (%v); nothing was written again: retry to get it", replyTo, err))
}
