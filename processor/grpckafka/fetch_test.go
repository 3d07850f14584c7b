package grpckafka

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/logtails"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

// A stream whose topic gained partitions ends with UNAVAILABLE, telling the
// client the counts and to resume by id.
func TestStreamEndPartitionsChanged(t *testing.T) {
	h := New(nil, nil)
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("reading: %w", &logtails.PartitionsChangedError{Topic: "orders", Was: 1, Now: 3}),
			`topic "orders" gained partitions (1 → 3); reconnect with the id of the last message received to resume`},
		{logtails.ErrPartitionsChanged,
			`topic "orders" gained partitions; reconnect with the id of the last message received to resume`},
	} {
		st := h.streamEnd(c.err, context.Background(), &fetchStream{topic: "orders", static: true}, config.Limits{})
		if st.Code != codes.Unavailable || st.Message != c.want {
			t.Errorf("%v: %v %q, want UNAVAILABLE %q", c.err, st.Code, st.Message, c.want)
		}
	}
}
