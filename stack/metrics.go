package stack

import (
	"path"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/client"
	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/writtenids"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/grpckafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/httpkafka"
	"github.com/kafka-ext-proc/kafka-ext-proc/processor/ssekafka"
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
		counter("kafka_ext_proc_produce_replays_total", "HTTP produce requests answered as replays, producing nothing: from a stored reply, or a keyed write the log already holds.",
			func() float64 { return float64(h.Replays()) }),
		gauge("kafka_ext_proc_grpc_fetch_streams", "gRPC fetch streams open now.",
			func() float64 { return float64(g.Stats().Streams) }),
		counter("kafka_ext_proc_grpc_fetch_lagged_total", "gRPC fetch streams ended for their lag budget (RESOURCE_EXHAUSTED).",
			func() float64 { return float64(g.Stats().Lagged) }),
		gauge("kafka_ext_proc_grpc_produce_calls", "gRPC produce calls in progress.",
			func() float64 { return float64(g.Stats().Calls) }),
		counter("kafka_ext_proc_grpc_produce_replays_total", "gRPC produce calls that repeated a keyed call: answered from stored replies, or writing only the messages the log did not hold.",
			func() float64 { return float64(g.Stats().Replays) }),
	)
}

// registerSSEMetrics exposes the sse-kafka binding's event streams, as the
// gRPC fetch stream's series are (no labels: streams come and go too fast
// to be worth a series each, and their routes are in the request metrics).
func registerSSEMetrics(reg prometheus.Registerer, e *ssekafka.Handler) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		gauge("kafka_ext_proc_sse_streams", "Server-Sent Events streams open now.",
			func() float64 { return float64(e.Stats().Streams) }),
		counter("kafka_ext_proc_sse_events_total", "Events sent on Server-Sent Events streams (records and tombstones, not comments).",
			func() float64 { return float64(e.Stats().Events) }),
		counter("kafka_ext_proc_sse_resumes_total", "Server-Sent Events streams opened with a last-event-id.",
			func() float64 { return float64(e.Stats().Resumes) }),
		counter("kafka_ext_proc_sse_gaps_total", "Resumes refused (410, 400) because the log cannot continue from their last-event-id.",
			func() float64 { return float64(e.Stats().Gaps) }),
		counter("kafka_ext_proc_sse_lagged_total", "Server-Sent Events streams ended for their lag budget.",
			func() float64 { return float64(e.Stats().Lagged) }),
		counter("kafka_ext_proc_sse_drained_total", "Server-Sent Events streams ended by the processor's shutdown.",
			func() float64 { return float64(e.Stats().Drained) }),
	)
}

// kafkaCollector reports the Kafka side's sizes at scrape time, labelled by
// kafka binding; produce results by a fixed set of causes; librdkafka's
// statistics by client role and broker (bounded by the cluster's size); lag
// by topic, where topics of templated routes are summed under the route's
// topic-pattern (see topicLabels).
type kafkaCollector struct {
	clusters map[string]*kafkaio.Cluster
	topics   atomic.Pointer[topicLabels]

	views, viewsReady, keys, bytes, nullKeys     *prometheus.Desc
	diskBytes, diskDebt, storeFailures           *prometheus.Desc
	storeReadFailures                            *prometheus.Desc
	replyEntries, replyPinned, replyBytes        *prometheus.Desc
	replyEvicted, replyExpired, replySplit, noHd *prometheus.Desc
	idemKeys, idemEvicted, idemForgotten         *prometheus.Desc
	idemHits, idemExpired, idemRecords           *prometheus.Desc
	readBack                                     replyReadBackMetrics // metrics_readback.go

	produced, lag, queueMsgs, queueBytes    *prometheus.Desc
	rttAvg, rttP99, txErrs, rxErrs, reqTOut *prometheus.Desc
}

func newKafkaCollector(clusters map[string]*kafkaio.Cluster, cfg *config.Config) *kafkaCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"kafka"}, nil)
	}
	dl := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"kafka"}, labels...), nil)
	}
	c := &kafkaCollector{
		clusters:   clusters,
		views:      d("kafka_ext_proc_views", "Views of topics held (compacted topics read by fetch routes)."),
		viewsReady: d("kafka_ext_proc_views_ready", "Views caught up with their topic."),
		keys:       d("kafka_ext_proc_view_keys", "Current records (keys) held in views."),
		bytes:      d("kafka_ext_proc_view_bytes", "Bytes accounted to views."),
		nullKeys:   d("kafka_ext_proc_view_null_key_records_total", "Records without a key, left out of views."),
		diskBytes:  d("kafka_ext_proc_view_disk_bytes", "Bytes the views kept on disk take there."),
		diskDebt: d("kafka_ext_proc_view_disk_compaction_debt_bytes",
			"Bytes the compactions of the views' stores on disk would still rewrite (their backlog)."),
		storeFailures: d("kafka_ext_proc_view_store_failures_total",
			"Writes the views' stores on disk refused (a full disk), each taking its view out of service until it catches up again; reads that failed count in kafka_ext_proc_view_store_read_failures_total."),
		storeReadFailures: d("kafka_ext_proc_view_store_read_failures_total",
			"Single-key look-ups and merged reads of views on disk whose store could not read; each answered 503 with retry-after, the view kept in service."),
		replyEntries: d("kafka_ext_proc_reply_index_entries", "Correlation ids with stored replies."),
		replyPinned:  d("kafka_ext_proc_reply_index_pinned", "Correlation ids with waiters."),
		replyBytes:   d("kafka_ext_proc_reply_index_bytes", "Bytes accounted to stored replies."),
		replyEvicted: d("kafka_ext_proc_reply_index_evicted_total", "Correlation ids evicted for reply-index-bytes."),
		replyExpired: d("kafka_ext_proc_reply_index_expired_total", "Correlation ids expired for reply-retention."),
		replySplit:   d("kafka_ext_proc_reply_index_split_replies_total", "Correlation ids whose replies came in several partitions (responder not keying by correlation id)."),
		noHd:         d("kafka_ext_proc_reply_index_records_without_correlation_total", "Reply records without the correlation header (not indexed)."),

		idemKeys:      d("kafka_ext_proc_idempotency_keys", "Correlation ids the key index remembers (written to request topics in the last 2 x idempotency-window)."),
		idemEvicted:   d("kafka_ext_proc_idempotency_keys_evicted_total", "Correlation ids evicted, oldest first, for idempotency-keys: a retry of one writes again."),
		idemForgotten: d("kafka_ext_proc_idempotency_keys_forgotten_total", "Correlation ids forgotten 2 x idempotency-window after their first record."),
		idemHits:      d("kafka_ext_proc_idempotency_replays_total", "Look-ups that found a correlation id written within the window: keyed retries (which write only what was missing), and async follow-ups still waiting for their reply."),
		idemExpired:   d("kafka_ext_proc_idempotency_expired_total", "Look-ups that found a correlation id past idempotency-window: keyed retries and follow-ups answered 410 / FAILED_PRECONDITION."),
		idemRecords:   d("kafka_ext_proc_idempotency_records_read_total", "Request-topic records the key index read back."),

		produced: dl("kafka_ext_proc_produce_records_total", "Records produced by the processor, by result: acked, or the cause of the failure.", "result"),
		lag: dl("kafka_ext_proc_consumer_lag_records", "Records the brokers hold beyond what a consumer has read, summed over its partitions, "+
			"by client (views, replies, log-tail) and topic (a static topic's name; a templated route's topic-pattern; other). From librdkafka's statistics.", "client", "topic"),
		queueMsgs:  dl("kafka_ext_proc_rdkafka_queue_messages", "Messages in a librdkafka client's queues (producers: waiting to be sent or acknowledged).", "client"),
		queueBytes: dl("kafka_ext_proc_rdkafka_queue_bytes", "Bytes of the messages in a librdkafka client's queues.", "client"),
		rttAvg:     dl("kafka_ext_proc_rdkafka_broker_rtt_avg_seconds", "Mean request round-trip time to a broker over the last statistics interval (0: no request).", "client", "broker"),
		rttP99:     dl("kafka_ext_proc_rdkafka_broker_rtt_p99_seconds", "99th percentile of the request round-trip time to a broker over the last statistics interval.", "client", "broker"),
		txErrs:     dl("kafka_ext_proc_rdkafka_broker_tx_errors_total", "Transmission errors to a broker since the client started.", "client", "broker"),
		rxErrs:     dl("kafka_ext_proc_rdkafka_broker_rx_errors_total", "Receive errors from a broker since the client started.", "client", "broker"),
		reqTOut:    dl("kafka_ext_proc_rdkafka_broker_request_timeouts_total", "Requests to a broker that timed out since the client started.", "client", "broker"),
	}
	c.readBack = newReplyReadBackMetrics()
	c.setConfig(cfg)
	return c
}

// setConfig installs the topic labels of a (reloaded) configuration.
func (c *kafkaCollector) setConfig(cfg *config.Config) { c.topics.Store(newTopicLabels(cfg)) }

// topicLabels bounds the topic label: a topic a route names statically (or
// a reply-to topic) is its own label; a topic of a templated route is
// labelled by the first topic-pattern of the routes exiting to its cluster
// that it matches, so ten thousand concrete topics are one series; anything
// else is "other".
type topicLabels struct {
	static   map[string]map[string]bool // kafka binding → topic
	patterns map[string][]string        // kafka binding → topic-patterns in file order
}

func newTopicLabels(cfg *config.Config) *topicLabels {
	t := &topicLabels{static: map[string]map[string]bool{}, patterns: map[string][]string{}}
	if cfg == nil {
		return t
	}
	add := func(exit, topic string) {
		if t.static[exit] == nil {
			t.static[exit] = map[string]bool{}
		}
		t.static[exit][topic] = true
	}
	for _, b := range cfg.Bindings {
		for _, r := range b.Routes {
			if r.With == nil {
				continue
			}
			if r.With.Topic.Static() {
				add(r.Exit, r.With.Topic.Raw)
			} else if r.With.TopicPattern != "" {
				t.patterns[r.Exit] = append(t.patterns[r.Exit], r.With.TopicPattern)
			}
			if r.With.ReplyTo != "" {
				add(r.Exit, r.With.ReplyTo)
			}
		}
	}
	return t
}

func (t *topicLabels) label(kafka, topic string) string {
	if t.static[kafka][topic] {
		return topic
	}
	for _, p := range t.patterns[kafka] {
		if ok, _ := path.Match(p, topic); ok {
			return p
		}
	}
	return "other"
}

func (c *kafkaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.views, c.viewsReady, c.keys, c.bytes, c.nullKeys, c.diskBytes, c.diskDebt, c.storeFailures, c.storeReadFailures,
		c.replyEntries, c.replyPinned, c.replyBytes, c.replyEvicted, c.replyExpired, c.replySplit, c.noHd,
		c.idemKeys, c.idemEvicted, c.idemForgotten, c.idemHits, c.idemExpired, c.idemRecords,
		c.produced, c.lag, c.queueMsgs, c.queueBytes, c.rttAvg, c.rttP99, c.txErrs, c.rxErrs, c.reqTOut} {
		ch <- d
	}
	c.readBack.describe(ch)
}

func (c *kafkaCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, name string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
	}
	counter := func(d *prometheus.Desc, v uint64, name string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
	}
	for name, cl := range c.clusters {
		vs := cl.Views.Stats()
		gauge(c.views, float64(vs.Views), name)
		gauge(c.viewsReady, float64(vs.Ready), name)
		gauge(c.keys, float64(vs.Keys), name)
		gauge(c.bytes, float64(vs.Bytes), name)
		counter(c.nullKeys, vs.NullKeys, name)
		gauge(c.diskBytes, float64(vs.DiskBytes), name)
		gauge(c.diskDebt, float64(vs.CompactionBytes), name)
		counter(c.storeFailures, vs.StoreFailures, name)
		counter(c.storeReadFailures, vs.ReadFailures, name)
		rs := cl.Replies.Stats()
		gauge(c.replyEntries, float64(rs.Entries), name)
		gauge(c.replyPinned, float64(rs.Pinned), name)
		gauge(c.replyBytes, float64(rs.Bytes), name)
		counter(c.replyEvicted, rs.Evicted, name)
		counter(c.replyExpired, rs.Expired, name)
		counter(c.replySplit, rs.SplitReplies, name)
		counter(c.noHd, rs.WithoutHeader, name)
		c.readBack.collect(ch, name, rs)
		// The key index exists once a keyed request came; until then its
		// series are 0.
		var ks writtenids.Stats
		if k, ok := cl.WrittenIDsIfAny(); ok {
			ks = k.Stats()
		}
		gauge(c.idemKeys, float64(ks.Keys), name)
		counter(c.idemEvicted, ks.Evicted, name)
		counter(c.idemForgotten, ks.Forgotten, name)
		counter(c.idemHits, ks.Hits, name)
		counter(c.idemExpired, ks.Expired, name)
		counter(c.idemRecords, ks.Records, name)
		for result, n := range cl.ProduceResults() {
			ch <- prometheus.MustNewConstMetric(c.produced, prometheus.CounterValue, float64(n), name, result)
		}
		c.collectRdStats(ch, name, cl.RdStats())
	}
}

func (c *kafkaCollector) collectRdStats(ch chan<- prometheus.Metric, name string, byRole map[string]*client.ClientStats) {
	topics := c.topics.Load()
	for role, s := range byRole {
		ch <- prometheus.MustNewConstMetric(c.queueMsgs, prometheus.GaugeValue, float64(s.MsgCnt), name, role)
		ch <- prometheus.MustNewConstMetric(c.queueBytes, prometheus.GaugeValue, float64(s.MsgSize), name, role)
		for _, b := range s.Brokers {
			ch <- prometheus.MustNewConstMetric(c.rttAvg, prometheus.GaugeValue, b.RTTAvg.Seconds(), name, role, b.Name)
			ch <- prometheus.MustNewConstMetric(c.rttP99, prometheus.GaugeValue, b.RTTP99.Seconds(), name, role, b.Name)
			ch <- prometheus.MustNewConstMetric(c.txErrs, prometheus.CounterValue, float64(b.TxErrs), name, role, b.Name)
			ch <- prometheus.MustNewConstMetric(c.rxErrs, prometheus.CounterValue, float64(b.RxErrs), name, role, b.Name)
			ch <- prometheus.MustNewConstMetric(c.reqTOut, prometheus.CounterValue, float64(b.ReqTimeouts), name, role, b.Name)
		}
		lags := map[string]int64{}
		for topic, n := range s.Lag {
			lags[topics.label(name, topic)] += n
		}
		for label, n := range lags {
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(n), name, role, label)
		}
	}
}
