package httpkafka

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/produce"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/kafkaroute"
)

// A reload drops the fetch routes (and their render caches) the new
// configuration no longer has, unless long polls still hold them.
func TestRetainDropsRoutesAReloadRemoved(t *testing.T) {
	kept, gone, held := &config.With{}, &config.With{}, &config.With{}
	h := New(nil, nil)
	for _, w := range []*config.With{kept, gone, held} {
		h.fetches.Store(w, NewFetch(w, nil))
	}
	f, _ := h.fetches.Load(held)
	f.(*Fetch).waiting.Add(1)

	h.Retain(&config.Config{Bindings: []*config.Binding{{Routes: []*config.Route{{With: kept}, {}}}}})
	for w, want := range map[*config.With]bool{kept: true, gone: false, held: true} {
		if _, ok := h.fetches.Load(w); ok != want {
			t.Errorf("route %p kept = %v, want %v", w, ok, want)
		}
	}
	if h.Waiting() != 1 {
		t.Errorf("Waiting = %d, want the held route's 1", h.Waiting())
	}

	f.(*Fetch).waiting.Add(-1)
	h.Retain(&config.Config{})
	n := 0
	h.fetches.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d routes left after a reload to none, the long poll over", n)
	}
}

// holdWaits records the wait each HoldView is given, and has no topic.
type holdWaits struct{ waits []time.Duration }

func (h *holdWaits) HoldView(_ context.Context, _ string, wait time.Duration) (*views.View, error) {
	h.waits = append(h.waits, wait)
	return nil, client.ErrUnknownTopic
}

// A compiled fetch route answers each request under the limits of the
// snapshot it matched in, not those of the route's first request.
func TestFetchFollowsEachRequestsLimits(t *testing.T) {
	src := &holdWaits{}
	w := &config.With{Capability: config.Fetch, Topic: config.Template{Raw: "items", Parts: []config.TemplatePart{{Literal: "items"}}}}
	f := NewFetch(w, src)
	for _, kt := range []time.Duration{time.Second, 2 * time.Second} {
		if r := f.Serve(context.Background(), context.Background(), FetchRequest{Limits: config.Limits{KafkaTimeout: kt}}); r.Status != 503 {
			t.Fatalf("a missing static topic: %d, want 503", r.Status)
		}
	}
	if len(src.waits) != 2 || src.waits[0] != time.Second || src.waits[1] != 2*time.Second {
		t.Fatalf("HoldView waits %v, want [1s 2s]: each request's kafka-timeout", src.waits)
	}
}

// Every 503, 504 and 410 of a produce says what a retry does, and it
// depends on whether the request carried an idempotency key.
func TestProduceFailureSaysWhatARetryDoes(t *testing.T) {
	keyed := kafkaroute.RetryHint{Name: "idempotency-key header", Given: true}
	keyless := kafkaroute.RetryHint{Name: "idempotency-key header"}
	for _, c := range []struct {
		name   string
		err    error
		retry  kafkaroute.RetryHint
		status int
		says   string
	}{
		{"unacknowledged, keyed", produce.ErrUnacknowledged, keyed, 504, "a retry with the same idempotency-key header writes nothing already written"},
		{"unacknowledged, no key", produce.ErrUnacknowledged, keyless, 504, "this request has no idempotency-key header, so a retry may write it a second time"},
		{"not enqueued", fmt.Errorf("%w: queue full", produce.ErrNotEnqueued), keyless, 503, "was not written to Kafka (queue full); retrying is safe"},
		{"index not ready", fmt.Errorf("%w: reading back t", client.ErrNotReady), keyed, 503, "nothing was written"},
		{"expired", &kafkaroute.ExpiredError{CID: "k-1", First: time.Unix(0, 0), Window: 10 * time.Minute}, keyed, 410, "more than limits.idempotency-window (10m0s) ago: its result expired and it was not written again"},
	} {
		r := produceFailure(context.Background(), c.err, "t", true, c.retry)
		if r.Status != c.status || !strings.Contains(string(r.Body), c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, r.Status, r.Body, c.status, c.says)
		}
	}
}
