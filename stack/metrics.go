package stack

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
)

// registerCapabilityMetrics exposes what the capabilities hold now: long
// polls, produce waits and replays, gRPC streams and calls.
func registerCapabilityMetrics(reg prometheus.Registerer, h *httpkafka.Handler, g *grpckafka.Handler) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		gauge("kafka_ext_proc_fetch_waiters", "HTTP fetch requests holding a long poll (prefer: wait) now.",
			func() float64 { return float64(h.Waiting()) }),
		gauge("kafka_ext_proc_produce_reply_waiters", "HTTP produce requests waiting for their reply now.",
			func() float64 { return float64(h.ReplyWaiters()) }),
		gauge("kafka_ext_proc_produce_in_flight", "Correlation ids this replica is producing or waiting on.",
			func() float64 { return float64(h.InFlight()) }),
		counter("kafka_ext_proc_produce_replays_total", "HTTP produce requests answered from a stored reply, producing nothing.",
			func() float64 { return float64(h.Replays()) }),
		gauge("kafka_ext_proc_grpc_fetch_streams", "gRPC fetch streams open now.",
			func() float64 { return float64(g.Stats().Streams) }),
		counter("kafka_ext_proc_grpc_fetch_lagged_total", "gRPC fetch streams ended for their lag budget (RESOURCE_EXHAUSTED).",
			func() float64 { return float64(g.Stats().Lagged) }),
		gauge("kafka_ext_proc_grpc_produce_calls", "gRPC produce calls in progress.",
			func() float64 { return float64(g.Stats().Calls) }),
		counter("kafka_ext_proc_grpc_produce_replays_total", "gRPC produce calls answered from stored replies, producing nothing.",
			func() float64 { return float64(g.Stats().Replays) }),
	)
}

// kafkaCollector reports the Kafka side's sizes at scrape time, labelled by
// kafka binding only (topics of templated routes would be unbounded).
type kafkaCollector struct {
	clusters map[string]*kafkaio.Cluster

	views, viewsReady, keys, bytes, nullKeys     *prometheus.Desc
	replyEntries, replyPinned, replyBytes        *prometheus.Desc
	replyEvicted, replyExpired, replySplit, noHd *prometheus.Desc
}

func newKafkaCollector(clusters map[string]*kafkaio.Cluster) *kafkaCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"kafka"}, nil)
	}
	return &kafkaCollector{
		clusters:     clusters,
		views:        d("kafka_ext_proc_views", "Views of topics held (compacted topics read by fetch routes)."),
		viewsReady:   d("kafka_ext_proc_views_ready", "Views caught up with their topic."),
		keys:         d("kafka_ext_proc_view_keys", "Current records (keys) held in views."),
		bytes:        d("kafka_ext_proc_view_bytes", "Bytes accounted to views."),
		nullKeys:     d("kafka_ext_proc_view_null_key_records_total", "Records without a key, left out of views."),
		replyEntries: d("kafka_ext_proc_reply_index_entries", "Correlation ids with stored replies."),
		replyPinned:  d("kafka_ext_proc_reply_index_pinned", "Correlation ids with waiters."),
		replyBytes:   d("kafka_ext_proc_reply_index_bytes", "Bytes accounted to stored replies."),
		replyEvicted: d("kafka_ext_proc_reply_index_evicted_total", "Correlation ids evicted for reply-index-bytes."),
		replyExpired: d("kafka_ext_proc_reply_index_expired_total", "Correlation ids expired for reply-retention."),
		replySplit:   d("kafka_ext_proc_reply_index_split_replies_total", "Correlation ids whose replies came in several partitions (responder not keying by correlation id)."),
		noHd:         d("kafka_ext_proc_reply_index_records_without_correlation_total", "Reply records without the correlation header (not indexed)."),
	}
}

func (c *kafkaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.views, c.viewsReady, c.keys, c.bytes, c.nullKeys,
		c.replyEntries, c.replyPinned, c.replyBytes, c.replyEvicted, c.replyExpired, c.replySplit, c.noHd} {
		ch <- d
	}
}

func (c *kafkaCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, name string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
	}
	counter := func(d *prometheus.Desc, v uint64, name string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
	}
	for name, cl := range c.clusters {
		vs := cl.Stats()
		gauge(c.views, float64(vs.Views), name)
		gauge(c.viewsReady, float64(vs.Ready), name)
		gauge(c.keys, float64(vs.Keys), name)
		gauge(c.bytes, float64(vs.Bytes), name)
		counter(c.nullKeys, vs.NullKeys, name)
		rs := cl.Replies.Stats()
		gauge(c.replyEntries, float64(rs.Entries), name)
		gauge(c.replyPinned, float64(rs.Pinned), name)
		gauge(c.replyBytes, float64(rs.Bytes), name)
		counter(c.replyEvicted, rs.Evicted, name)
		counter(c.replyExpired, rs.Expired, name)
		counter(c.replySplit, rs.SplitReplies, name)
		counter(c.noHd, rs.WithoutHeader, name)
	}
}
