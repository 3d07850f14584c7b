package kafkaroute

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/route"
)

func TestIdempotencyKeyGrammar(t *testing.T) {
	for k, want := range map[string]bool{
		"a":                               true,
		"59410e57-3e0f-4b61-9328-f645a79": true,
		"A.b_c~d-9":                       true,
		strings.Repeat("k", 128):          true,
		strings.Repeat("k", 129):          false,
		"":                                false,
		"has space":                       false,
		"semi;colon":                      false,
		"slash/":                          false,
		"é":                               false,
		"new\nline":                       false,
	} {
		if got := ValidIdempotencyKey(k); got != want {
			t.Errorf("ValidIdempotencyKey(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestCheckTopic(t *testing.T) {
	for topic, want := range map[string]error{
		"tenant-a":                           nil,
		"tenant-a.b_c":                       nil,
		"other":                              ErrTopicPattern,
		"":                                   ErrInternalTopic,
		"_tenant-x":                          ErrInternalTopic,
		"tenant-a/b":                         ErrIllegalTopic,
		"secret\x00-tenant-a":                ErrIllegalTopic,
		"tenant-" + strings.Repeat("x", 243): ErrIllegalTopic,
	} {
		err := CheckTopic(topic, "tenant-*")
		if !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("CheckTopic(%q) = %v, want %v", topic, err, want)
		}
		var te *TopicError
		if want != nil && (!errors.As(err, &te) || te.Topic != topic || !strings.Contains(err.Error(), strconv.Quote(topic))) {
			t.Errorf("CheckTopic(%q) = %v: not a TopicError naming the topic", topic, err)
		}
	}
	static := &config.With{Topic: config.Template{Raw: "_anything", Parts: []config.TemplatePart{{Literal: "_anything"}}}}
	if got, err := Topic(static, (&Refs{}).Resolve); got != "_anything" || err != nil {
		t.Errorf("a static topic is the loader's to check: %q %v", got, err)
	}
}

func TestRefsResolve(t *testing.T) {
	refs := RefsOf(&route.Match{Params: map[string]string{"id": "7"}, Identities: map[string]route.Identity{"jwt0": {Subject: "alice"}}})
	refs.IdempotencyKey, refs.CorrelationID = "k", "k-abc"
	for part, want := range map[config.TemplatePart]string{
		{Ref: config.RefParam, Name: "id"}:           "7",
		{Ref: config.RefParam, Name: "other"}:        "",
		{Ref: config.RefGuardIdentity, Name: "jwt0"}: "alice",
		{Ref: config.RefIdempotencyKey}:              "k",
		{Ref: config.RefCorrelationID}:               "k-abc",
	} {
		if got := refs.Resolve(part); got != want {
			t.Errorf("Resolve(%+v) = %q, want %q", part, got, want)
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	if k, given, err := IdempotencyKey(nil); err != nil || given || !ValidIdempotencyKey(k) {
		t.Errorf("none: %q %v %v, want a generated valid key", k, given, err)
	}
	if k, given, err := IdempotencyKey([]string{"a-1"}); err != nil || !given || k != "a-1" {
		t.Errorf("one: %q %v %v", k, given, err)
	}
	if _, _, err := IdempotencyKey([]string{"a", "b"}); !errors.Is(err, ErrRepeatedKey) {
		t.Errorf("two: %v, want ErrRepeatedKey", err)
	}
	if _, _, err := IdempotencyKey([]string{"a b"}); !errors.Is(err, ErrMalformedKey) {
		t.Errorf("malformed: %v, want ErrMalformedKey", err)
	}
}

// probes counts TopicConfig calls; each blocks until release is closed.
type probes struct {
	mu      sync.Mutex
	n       int
	err     error
	release chan struct{}
}

func (p *probes) TopicConfig(ctx context.Context, topic string) (map[string]string, error) {
	p.mu.Lock()
	p.n++
	err := p.err
	p.mu.Unlock()
	<-p.release
	if err != nil {
		return nil, err
	}
	return map[string]string{"cleanup.policy": "compact,delete"}, nil
}

func (p *probes) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// Requests asking at once share one probe; an answer is kept, an error is
// not (a topic created after a refusal is seen at once).
func TestCompactionSharesProbesAndForgetsErrors(t *testing.T) {
	var c Compaction
	p := &probes{release: make(chan struct{})}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, err := c.Compacted(context.Background(), p, "c", "t", time.Minute); !ok || err != nil {
				t.Errorf("Compacted = %v, %v", ok, err)
			}
		}()
	}
	for c.probing("c", "t") == nil {
		runtime.Gosched()
	}
	close(p.release)
	wg.Wait()
	if _, err := c.Compacted(context.Background(), p, "c", "t", time.Minute); err != nil || p.calls() != 1 {
		t.Fatalf("%d probes for one topic (err %v), want 1", p.calls(), err)
	}

	p.err = client.ErrUnknownTopic
	if _, err := c.Compacted(context.Background(), p, "c", "missing", time.Minute); !errors.Is(err, client.ErrUnknownTopic) {
		t.Fatalf("missing topic: %v", err)
	}
	p.err = nil
	if ok, err := c.Compacted(context.Background(), p, "c", "missing", time.Minute); !ok || err != nil || p.calls() != 3 {
		t.Fatalf("after the topic was created: %v %v after %d probes, want a fresh probe", ok, err, p.calls())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Compacted(ctx, &probes{release: make(chan struct{})}, "c", "slow", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller that left: %v", err)
	}
}

// probing is the probe of a topic in the cache, if any (for tests).
func (c *Compaction) probing(cluster, topic string) *probe {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[compactionKey{cluster, topic}]
}
