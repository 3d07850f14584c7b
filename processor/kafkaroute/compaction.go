package kafkaroute

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
)

// Compaction caches whether topics are compacted (cleanup.policy), per
// cluster: fetch reads a compacted topic's view as its history, and produce
// needs a key for one (it asks only when a request resolves an empty key,
// so routes with keys never pay for it). The zero value is ready to use.
//
// Requests asking about one topic at once share one probe, which runs apart
// from any of them (a client leaving does not fail the others) within the
// Kafka timeout. An answer is believed for compactionTTL; an error is not
// kept, so a topic created after a refusal is seen by the next request.
type Compaction struct {
	mu sync.Mutex
	m  map[compactionKey]*probe
}

type compactionKey struct{ cluster, topic string }

type probe struct {
	done      chan struct{}
	compacted bool
	err       error
	at        time.Time
}

// compactionTTL is how long a topic's cleanup.policy is believed; it is
// rarely changed, and a change is seen within this time.
const compactionTTL = time.Minute

// maxProbes bounds the cache: templated topics come from requests.
const maxProbes = 4096

// TopicConfigs reads a topic's configuration (kafkaio.Cluster does).
type TopicConfigs interface {
	TopicConfig(ctx context.Context, topic string) (map[string]string, error)
}

// Compacted reports whether topic of the named cluster is compacted. A
// missing topic is an error wrapping client.ErrUnknownTopic; ctx ending
// is ctx's error.
func (c *Compaction) Compacted(ctx context.Context, cl TopicConfigs, cluster, topic string, timeout time.Duration) (bool, error) {
	k := compactionKey{cluster, topic}
	c.mu.Lock()
	p := c.m[k]
	if p != nil {
		select {
		case <-p.done:
			if p.err != nil || time.Since(p.at) > compactionTTL {
				p = nil
			}
		default:
		}
	}
	if p == nil {
		if c.m == nil || len(c.m) >= maxProbes {
			c.m = map[compactionKey]*probe{}
		}
		p = &probe{done: make(chan struct{})}
		c.m[k] = p
		go p.run(context.WithoutCancel(ctx), cl, topic, timeout)
	}
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.compacted, p.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (p *probe) run(ctx context.Context, cl TopicConfigs, topic string, timeout time.Duration) {
	defer close(p.done)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := cl.TopicConfig(ctx, topic)
	p.at = time.Now()
	if err != nil {
		p.err = fmt.Errorf("reading the cleanup.policy of topic %q: %w", topic, err)
		return
	}
	p.compacted = strings.Contains(cfg["cleanup.policy"], "compact")
}

var _ TopicConfigs = (*kafkaio.Cluster)(nil)
