package kafkaio

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	Name            string            // the kafka binding's name
	Properties      map[string]string // librdkafka properties of the binding
	KafkaTimeout    time.Duration
	ReplyRetention  time.Duration
	ReplyIndexBytes int64
	ViewIdle        time.Duration // see ClientOptions
	MaxViews        int
	MaxViewBytes    int64
	Readiness       Readiness
	Logger          *slog.Logger
	// PartitionCheck is how often partition counts are read to follow
	// partitions added to topics (views, reply index, log tail); 0 = 30s.
	PartitionCheck time.Duration
}

// Cluster is everything held for one kafka binding, shared by every route
// and request that exits to it: the views, the reply index, and one producer
// per acks mode (created on first use).
type Cluster struct {
	*Client
	Replies *ReplyIndex

	opts      ClusterOptions
	mu        sync.Mutex
	producers map[Acks]*Producer
	results   ProduceCounts
	rdStats   *RdStats
}

// NewCluster connects a kafka binding's shared consumers.
func NewCluster(opts ClusterOptions) (*Cluster, error) {
	rdStats := NewRdStats()
	client, err := NewClient(ClientOptions{
		Name: opts.Name, Properties: opts.Properties, KafkaTimeout: opts.KafkaTimeout,
		Logger: opts.Logger, Readiness: opts.Readiness,
		ViewIdle: opts.ViewIdle, MaxViews: opts.MaxViews, MaxViewBytes: opts.MaxViewBytes,
		Stats: rdStats, PartitionCheck: opts.PartitionCheck,
	})
	if err != nil {
		return nil, err
	}
	replies, err := NewReplyIndex(ReplyIndexOptions{
		Name: opts.Name, Properties: opts.Properties, KafkaTimeout: opts.KafkaTimeout,
		Retention: opts.ReplyRetention, MaxBytes: opts.ReplyIndexBytes,
		Readiness: opts.Readiness, Logger: opts.Logger, Stats: rdStats, PartitionCheck: opts.PartitionCheck,
	})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &Cluster{Client: client, Replies: replies, opts: opts, producers: map[Acks]*Producer{}, rdStats: rdStats}, nil
}

// ProduceResults counts the outcomes of the produces of every producer of
// the cluster, by ProduceResults entry.
func (c *Cluster) ProduceResults() map[string]uint64 { return c.results.Snapshot() }

// RdStats returns the latest librdkafka statistics of the cluster's
// long-lived clients, by role.
func (c *Cluster) RdStats() map[string]*ClientStats { return c.rdStats.Snapshot() }

// Producer returns the cluster's producer for an acks mode.
func (c *Cluster) Producer(acks Acks) (*Producer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.producers[acks]; ok {
		return p, nil
	}
	p, err := NewProducer(ProducerOptions{
		Name: c.opts.Name, Properties: c.opts.Properties, KafkaTimeout: c.opts.KafkaTimeout,
		Acks: acks, Logger: c.opts.Logger, Results: &c.results, Stats: c.rdStats,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the producer of kafka binding %q: %w", c.opts.Name, err)
	}
	c.producers[acks] = p
	return p, nil
}

// Close flushes the producers (each within the kafka timeout) and stops the
// consumers.
func (c *Cluster) Close() {
	c.mu.Lock()
	producers := c.producers
	c.producers = map[Acks]*Producer{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Close()
		}()
	}
	wg.Wait()
	c.Replies.Close()
	c.Client.Close()
}

// AcksFromName maps the acks names of the configuration (none, leader_only,
// in_sync_replicas) to a mode; anything else is the safest, all replicas.
func AcksFromName(name string) Acks {
	switch name {
	case "none":
		return AcksNone
	case "leader_only":
		return AcksLeader
	default:
		return AcksAll
	}
}
