package httpkafka

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/replies"
)

// A stored reply that could not be read back: 410 when its topic no longer
// holds it, saying so; 503 with retry-after when Kafka did not answer.
func TestReadBackFailureAnswers(t *testing.T) {
	removed := fmt.Errorf("wrapped: %w", &replies.RemovedError{Topic: "replies", Partition: 1, Offset: 7, LogStart: 9})
	for _, c := range []struct {
		err    error
		status int
		says   []string
	}{
		{removed, http.StatusGone, []string{"removed from topic \\\"replies\\\" by its retention", "offset 7", "expired", "not written again"}},
		{fmt.Errorf("%w: no answer within the Kafka timeout", client.ErrNotReady), http.StatusServiceUnavailable,
			[]string{"could not be read back from Kafka", "no answer within the Kafka timeout", "nothing was written again: retry"}},
		{nil, http.StatusServiceUnavailable, []string{"could not be read back from Kafka", "retry"}},
	} {
		resp := readBackFailure(c.err, "replies")
		body := string(resp.Body)
		if resp.Status != c.status {
			t.Errorf("%v: status %d, want %d", c.err, resp.Status, c.status)
		}
		for _, s := range c.says {
			if !strings.Contains(body, s) {
				t.Errorf("%v: %s\ndoes not say %q", c.err, body, s)
			}
		}
		retryAfter := false
		for _, h := range resp.Headers {
			retryAfter = retryAfter || h.Name == "retry-after"
		}
		if c.status == http.StatusServiceUnavailable && !retryAfter {
			t.Errorf("%v: 503 without retry-after", c.err)
		}
	}
}
