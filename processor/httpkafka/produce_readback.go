package httpkafka

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/handler"
)

// Evicted replies read back: see the package documentation.

// readBackWait is how long a request waits for its reply: wait, or, while
// the stored reply is being read back, long enough for the read to end
// (a follow-up without prefer: wait would otherwise answer 202 for a
// reply that was written).
func readBackWait(watch *replies.Watch, wait, kafkaTimeout time.Duration) time.Duration {
	if watch.Evicted() {
		return max(wait, kafkaTimeout+time.Second)
	}
	return wait
}

// readBackFailure answers a request whose stored reply could not be read
// back: 410 when its topic no longer holds it (its result expired), else
// 503 as for Kafka unavailable (nothing was written again; a retry reads
// again).
func readBackFailure(err error, replyTo string) *handler.HTTPResponse {
	var removed *replies.RemovedError
	if errors.As(err, &removed) {
		return handler.ProblemResponse(http.StatusGone, fmt.Sprintf(
			"the reply to this request was written, but it is no longer stored: %v; its result expired and the request was not written again", removed))
	}
	if err == nil { // another request started a new read meanwhile
		err = client.ErrNotReady
	}
	return unavailable(fmt.Sprintf(
		"the reply to this request is stored in topic %q but could not be read back from Kafka (%v); nothing was written again: retry to get it", replyTo, err))
}
