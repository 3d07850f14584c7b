// Package kafkatest holds the helpers kafkaio's tests share, internal and
// external alike: an embedded broker and a bounded context, both released
// when the test ends.
package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/embedded"
)

// Broker starts an embedded broker with topics, closed when the test ends.
func Broker(t testing.TB, topics ...embedded.Topic) *embedded.Broker {
	t.Helper()
	return BrokerWith(t, topics)
}

// BrokerWith is Broker with kfake options (fault injection, listeners).
func BrokerWith(t testing.TB, topics []embedded.Topic, extra ...kfake.Opt) *embedded.Broker {
	t.Helper()
	b, err := embedded.Start(embedded.Options{Topics: topics, Extra: extra})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// Ctx is a context that ends after d, or when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
